package ovs

import (
	"context"
	"errors"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/kos-sdn/kos/components/fabric"
)

// TestIntegrationPortsOverOVSDB adds pods' interfaces as ports over the
// kept OVSDB connection, as a plug does, against a real ovsdb-server and
// ovs-vswitchd: each gets the OpenFlow number ovs-vsctl reads for it, an
// interface that does not exist gets -1 and OVS's reason, and a taken
// name or a missing bridge adds nothing. Reads over the connection are
// what ovs-vsctl reads, and a delete returns once ovs-vswitchd has let go
// of the port. A plug whose database socket is unreachable still plugs,
// through ovs-vsctl.
func TestIntegrationPortsOverOVSDB(t *testing.T) {
	f, inst := startFabric(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	a := fabric.LocalAttachment{VNI: 9, IP: netip.MustParseAddr("10.9.0.1")}
	b := fabric.LocalAttachment{VNI: 9, IP: netip.MustParseAddr("10.9.0.2")}
	gone := fabric.LocalAttachment{VNI: 9, IP: netip.MustParseAddr("10.9.0.3")}
	newGuest(t, ctx, inst, a)
	newGuest(t, ctx, inst, b)
	port := func(att fabric.LocalAttachment) systemPort {
		return systemPort{name: att.InterfaceName(), externalIDs: map[string]string{externalIDOwner: "c/net1", externalIDIP: att.IP.String()}}
	}

	rows, err := f.ovs.addSystemPortsDirect(ctx, f.bridge, []systemPort{port(a), port(b), port(gone)})
	if err != nil {
		t.Fatalf("adding ports: %v", err)
	}
	byName := map[string]interfaceRow{}
	for _, r := range rows {
		byName[r.Name] = r
	}
	for _, att := range []fabric.LocalAttachment{a, b} {
		r := byName[att.InterfaceName()]
		out, err := inst.Run(ctx, "ovs-vsctl", "get", "Interface", att.InterfaceName(), "ofport")
		if err != nil {
			t.Fatal(err)
		}
		if want, _ := strconv.Atoi(strings.TrimSpace(out)); r.OFPort != want || want <= 0 {
			t.Errorf("%s: ofport %d, ovs-vsctl reads %d; want the same, above 0", att.InterfaceName(), r.OFPort, want)
		}
		want := interfaceRow{Name: att.InterfaceName(), Type: "system", OFPort: r.OFPort, ExternalIDs: port(att).externalIDs}
		if diff := cmp.Diff(r, want, cmp.AllowUnexported(interfaceRow{})); diff != "" {
			t.Errorf("row of %s (-got +want):\n%s", att.InterfaceName(), diff)
		}
	}
	if r := byName[gone.InterfaceName()]; r.OFPort != -1 || r.Error == "" {
		t.Errorf("row of the interface that does not exist: ofport %d, error %q; want -1 and why", r.OFPort, r.Error)
	}

	if _, err := f.ovs.addSystemPortsDirect(ctx, f.bridge, []systemPort{port(a)}); !errors.Is(err, errPortsExist) {
		t.Errorf("adding a port of a taken name: %v, want errPortsExist", err)
	}
	// Reads over OVSDB are what ovs-vsctl reads; a name with no port
	// reads as nothing.
	byVsctl, err := f.ovs.interfaces(ctx, a.InterfaceName(), b.InterfaceName())
	if err != nil {
		t.Fatal(err)
	}
	byDB, err := f.ovs.interfacesDirect(ctx, []string{a.InterfaceName(), "kos-no-such-port", b.InterfaceName()})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(byVsctl, byDB, cmp.AllowUnexported(interfaceRow{}), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("rows read over OVSDB against ovs-vsctl's (-ovs-vsctl +OVSDB):\n%s", diff)
	}

	// A delete over OVSDB returns once ovs-vswitchd has let go of the
	// port: OpenFlow no longer shows it.
	if err := f.ovs.deletePortsDirect(ctx, f.bridge, []string{a.InterfaceName(), "kos-no-such-port"}); err != nil {
		t.Fatal(err)
	}
	if out, err := inst.Run(ctx, "ovs-ofctl", "show", f.bridge); err != nil || strings.Contains(out, a.InterfaceName()) {
		t.Errorf("after the delete returned, ovs-ofctl show (%v):\n%s\nwant no port %s", err, out, a.InterfaceName())
	}
	if err := f.ovs.deletePortsDirect(ctx, "no-such-bridge", []string{b.InterfaceName()}); err == nil {
		t.Errorf("deleting a port from a bridge that does not exist succeeded")
	}
	if got, err := f.ovs.interfacesDirect(ctx, []string{b.InterfaceName()}); err != nil || len(got) != 1 {
		t.Errorf("after a delete from another bridge: rows %+v (%v), want %s's still", got, err, b.InterfaceName())
	}
	if _, err := f.ovs.addSystemPortsDirect(ctx, "no-such-bridge", []systemPort{port(a)}); err == nil {
		t.Errorf("adding a port to a bridge that does not exist succeeded")
	}
	if got, err := f.ovs.interfacesIfExist(ctx, a.InterfaceName()); err != nil || len(got) != 0 {
		t.Errorf("after adding a port to a bridge that does not exist: rows %+v (%v), want none", got, err)
	}

	// No socket: the plug runs ovs-vsctl, and the attachment is whole.
	f.ovs.db.socket = t.TempDir() + "/none.sock"
	f.ovs.db.close()
	if err := f.PlugLocal(ctx, fabric.Plug{LocalAttachment: a, Owner: "c2/net1"}); err != nil {
		t.Fatalf("PlugLocal without the database socket: %v", err)
	}
	plugs, err := f.Plugs(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(plugs, []fabric.Plug{{LocalAttachment: a, Owner: "c2/net1"}}, cmpopts.EquateComparable(netip.Addr{})); diff != "" {
		t.Errorf("Plugs (-got +want):\n%s", diff)
	}
}
