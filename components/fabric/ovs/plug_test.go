package ovs

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/kos-sdn/kos/components/fabric"
	"github.com/kos-sdn/kos/tools/ovsenv"
)

// plugGuest replaces att's port by a veth pair into a guest namespace of
// its own, as the agent's CNI server does for a pod: the host end named as
// the attachment's interface, the guest end net1 with its MAC and address.
// Like the agent, it takes only the port off the switch first (DeletePorts)
// and checks that the flows of an attachment that has them stay, and that
// List reports it partial.
func plugGuest(t *testing.T, ctx context.Context, f *Fabric, inst *ovsenv.Instance, att fabric.LocalAttachment, owner string) *ovsenv.Netns {
	t.Helper()
	localFlows := func() int {
		flows, err := f.ovs.dumpFlows(ctx, f.bridge, flowsWithCookie(cookie(kindLocal, att.VNI, att.IP)))
		if err != nil {
			t.Fatal(err)
		}
		return len(flows)
	}
	had := localFlows()
	if err := f.DeletePorts(ctx, att); err != nil {
		t.Fatalf("DeletePorts: %v", err)
	}
	if had > 0 {
		if got := localFlows(); got != had {
			t.Errorf("after DeletePorts: %d flows of %v, want the %d it had", got, att, had)
		}
		if inv := list(t, f); !slices.Contains(inv.PartialLocal, att) {
			t.Errorf("after DeletePorts: List = %+v, want %v partial", inv, att)
		}
	}
	guest := newGuest(t, ctx, inst, att)
	if err := f.PlugLocal(ctx, fabric.Plug{LocalAttachment: att, Owner: owner}); err != nil {
		t.Fatalf("PlugLocal: %v", err)
	}
	return guest
}

// newGuest makes a veth pair into a guest namespace of its own for att, as
// the agent's CNI server does for a pod: the host end named as the
// attachment's interface, the guest end net1 with its MAC and address.
func newGuest(t testing.TB, ctx context.Context, inst *ovsenv.Instance, att fabric.LocalAttachment) *ovsenv.Netns {
	t.Helper()
	guest := ovsenv.NetnsT(t)
	if err := ovsenv.AddVethPair(ctx, inst.Netns, att.InterfaceName(), guest, "net1"); err != nil {
		t.Fatal(err)
	}
	if _, err := inst.Netns.Run(ctx, "ip", "link", "set", att.InterfaceName(), "up"); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]string{
		{"ip", "link", "set", "net1", "address", att.MAC().String()},
		{"ip", "addr", "add", att.IP.String() + "/24", "dev", "net1"},
		{"ip", "link", "set", "net1", "up"},
	} {
		if _, err := guest.Run(ctx, cmd[0], cmd[1:]...); err != nil {
			t.Fatal(err)
		}
	}
	return guest
}

// TestIntegrationPlugWithoutPort plugs veth pairs as the only ports of two
// pods' attachments, which had none before: PlugLocal alone makes each
// whole, carrying traffic. Then a new sandbox's veth replaces one, as the
// CNI server does when a pod's sandbox is made again without a DEL: the
// earlier veth deleted, its port taken off (DeletePorts), the new veth
// plugged with its new owner.
func TestIntegrationPlugWithoutPort(t *testing.T) {
	f, inst := startFabric(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	a := fabric.LocalAttachment{VNI: 9, IP: netip.MustParseAddr("10.9.0.1")}
	b := fabric.LocalAttachment{VNI: 9, IP: netip.MustParseAddr("10.9.0.2")}
	plug := func(att fabric.LocalAttachment, owner string) *ovsenv.Netns {
		t.Helper()
		guest := newGuest(t, ctx, inst, att)
		if err := f.PlugLocal(ctx, fabric.Plug{LocalAttachment: att, Owner: owner}); err != nil {
			t.Fatalf("PlugLocal of %v: %v", att, err)
		}
		return guest
	}
	check := func(step string, guest *ovsenv.Netns, wantPlugs []fabric.Plug) {
		t.Helper()
		if diff := diffInventory(&fabric.Inventory{Local: []fabric.LocalAttachment{a, b}}, list(t, f)); diff != "" {
			t.Errorf("%s: List (-want +got):\n%s", step, diff)
		}
		plugs, err := f.Plugs(ctx, a, b)
		if err != nil {
			t.Fatalf("%s: Plugs: %v", step, err)
		}
		if diff := cmp.Diff(plugs, wantPlugs, cmpopts.EquateComparable(netip.Addr{})); diff != "" {
			t.Errorf("%s: Plugs (-got +want):\n%s", step, diff)
		}
		if got, err := guest.Ping(ctx, b.IP, 3, time.Second); err != nil || got != 3 {
			t.Errorf("%s: ping from a to b: %d of 3 replies (%v), want 3", step, got, err)
		}
	}
	guestA := plug(a, "c1/net1")
	plug(b, "c2/net1")
	check("plugged", guestA, []fabric.Plug{{LocalAttachment: a, Owner: "c1/net1"}, {LocalAttachment: b, Owner: "c2/net1"}})

	if _, err := inst.Netns.Run(ctx, "ip", "link", "del", b.InterfaceName()); err != nil {
		t.Fatal(err)
	}
	if err := f.DeletePorts(ctx, b); err != nil {
		t.Fatal(err)
	}
	plug(b, "c3/net1")
	check("plugged again", guestA, []fabric.Plug{{LocalAttachment: a, Owner: "c1/net1"}, {LocalAttachment: b, Owner: "c3/net1"}})
	if diff := cmp.Diff(bridgePorts(t, inst), []string{a.InterfaceName(), b.InterfaceName(), TunnelPort}); diff != "" {
		t.Errorf("ports (-got +want):\n%s", diff)
	}
}

// TestIntegrationPlug plugs veth pairs in place of two attachments'
// internal ports and checks that they carry traffic, that creating the
// attachments again and an ovs-vswitchd restart keep them plugged, and that
// deleting an attachment leaves its veth pair to its maker.
func TestIntegrationPlug(t *testing.T) {
	f, inst := startFabric(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	a := fabric.LocalAttachment{VNI: 9, IP: netip.MustParseAddr("10.9.0.1")}
	b := fabric.LocalAttachment{VNI: 9, IP: netip.MustParseAddr("10.9.0.2")}
	// c keeps its internal port.
	c := fabric.LocalAttachment{VNI: 9, IP: netip.MustParseAddr("10.9.0.3")}
	if err := f.CreateLocal(ctx, a, b, c); err != nil {
		t.Fatal(err)
	}
	guestA := plugGuest(t, ctx, f, inst, a, "c1/net1")
	guestB := plugGuest(t, ctx, f, inst, b, "c2/net1")
	wantPlugs := []fabric.Plug{{LocalAttachment: a, Owner: "c1/net1"}, {LocalAttachment: b, Owner: "c2/net1"}}

	check := func(step string, want *fabric.Inventory) {
		t.Helper()
		if diff := diffInventory(want, list(t, f)); diff != "" {
			t.Errorf("%s: List (-want +got):\n%s", step, diff)
		}
		plugs, err := f.Plugs(ctx, a, b, c)
		if err != nil {
			t.Fatalf("%s: Plugs: %v", step, err)
		}
		if diff := cmp.Diff(plugs, wantPlugs, cmpopts.EquateComparable(netip.Addr{})); diff != "" {
			t.Errorf("%s: Plugs (-got +want):\n%s", step, diff)
		}
		if got, err := guestA.Ping(ctx, b.IP, 3, time.Second); err != nil || got != 3 {
			t.Errorf("%s: ping from a to b: %d of 3 replies (%v), want 3", step, got, err)
		}
	}
	whole := &fabric.Inventory{Local: []fabric.LocalAttachment{a, b, c}}
	check("plugged", whole)

	if err := f.CreateLocal(ctx, a, b, c); err != nil {
		t.Fatal(err)
	}
	check("created again", whole)

	if err := inst.RestartVSwitchd(ctx); err != nil {
		t.Fatal(err)
	}
	if diff := diffInventory(&fabric.Inventory{PartialLocal: []fabric.LocalAttachment{a, b, c}}, list(t, f)); diff != "" {
		t.Errorf("after the restart: List (-want +got):\n%s", diff)
	}
	if _, err := f.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.CreateLocal(ctx, a, b, c); err != nil {
		t.Fatal(err)
	}
	check("repaired", whole)

	if err := f.DeleteLocal(ctx, a); err != nil {
		t.Fatal(err)
	}
	wantPlugs = wantPlugs[1:]
	if diff := cmp.Diff(bridgePorts(t, inst), []string{b.InterfaceName(), c.InterfaceName(), TunnelPort}); diff != "" {
		t.Errorf("ports after deleting a (-got +want):\n%s", diff)
	}
	if _, err := inst.Netns.Run(ctx, "ip", "link", "show", a.InterfaceName()); err != nil {
		t.Errorf("deleting a deleted its veth, which is its maker's: %v", err)
	}

	// b's pod goes without a word and ovs-vswitchd restarts, as at a
	// reboot: creating b again gives it an internal port.
	if err := guestB.Delete(); err != nil {
		t.Fatal(err)
	}
	if err := inst.RestartVSwitchd(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.CreateLocal(ctx, b, c); err != nil {
		t.Fatalf("CreateLocal of an attachment whose plugged interface is gone: %v", err)
	}
	wantPlugs = nil
	if diff := diffInventory(&fabric.Inventory{Local: []fabric.LocalAttachment{b, c}}, list(t, f)); diff != "" {
		t.Errorf("after b's interface went: List (-want +got):\n%s", diff)
	}
	if plugs, err := f.Plugs(ctx, b); err != nil || len(plugs) != 0 {
		t.Errorf("after b's interface went: Plugs = %v, %v; want none", plugs, err)
	}
}
