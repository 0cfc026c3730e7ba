package ovs

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/kos-sdn/kos/components/fabric"
	"github.com/kos-sdn/kos/tools/golden"
	"github.com/kos-sdn/kos/tools/ovsenv"
)

var (
	l1 = fabric.LocalAttachment{VNI: 1, IP: netip.MustParseAddr("10.0.0.5")}
	// l2 has l1's address in another virtual network.
	l2 = fabric.LocalAttachment{VNI: 2, IP: netip.MustParseAddr("10.0.0.5")}
	r1 = fabric.RemoteAttachment{VNI: 1, IP: netip.MustParseAddr("10.0.0.6"), HostIP: netip.MustParseAddr("192.168.100.2")}
	r2 = fabric.RemoteAttachment{VNI: 1, IP: netip.MustParseAddr("10.0.0.7"), HostIP: netip.MustParseAddr("192.168.100.3")}
	// r1Moved is r1 after its node changed.
	r1Moved = fabric.RemoteAttachment{VNI: 1, IP: r1.IP, HostIP: netip.MustParseAddr("192.168.100.4")}
)

// startFabric starts an OVS instance of its own and a fabric on it, with the
// bridge ensured.
func startFabric(t *testing.T) (*Fabric, *ovsenv.Instance) {
	t.Helper()
	inst := ovsenv.StartT(t, ovsenv.Options{})
	f := New(Config{RunDir: inst.RunDir, DatapathType: "netdev"})
	lost, err := f.Ensure(t.Context())
	if err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	if !lost {
		t.Errorf("Ensure on a new switch reported no lost flows, want lost")
	}
	return f, inst
}

// dumpFlows returns the bridge's flows as ovs-ofctl prints them, with port
// names instead of numbers and without counters, one a line, sorted.
func dumpFlows(t *testing.T, inst *ovsenv.Instance) string {
	t.Helper()
	out, err := inst.Run(t.Context(), "ovs-ofctl", "-O", "OpenFlow14", "--names", "--no-stats", "dump-flows", DefaultBridge)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.Contains(l, "ST_FLOW reply") {
			lines = append(lines, l)
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n") + "\n"
}

// bridgePorts returns the names of the bridge's ports, sorted.
func bridgePorts(t *testing.T, inst *ovsenv.Instance) []string {
	t.Helper()
	out, err := inst.Run(t.Context(), "ovs-vsctl", "list-ports", DefaultBridge)
	if err != nil {
		t.Fatal(err)
	}
	ports := strings.Fields(out)
	slices.Sort(ports)
	return ports
}

func list(t *testing.T, f *Fabric) *fabric.Inventory {
	t.Helper()
	inv, err := f.List(t.Context())
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	return inv
}

func diffInventory(want, got *fabric.Inventory) string {
	return cmp.Diff(want, got, cmpopts.EquateComparable(netip.Addr{}), cmpopts.EquateEmpty())
}

// TestIntegrationFlows drives a fabric through creates, updates and deletes
// and checks, after each step, the flows ovs-ofctl shows against golden
// files, the bridge's ports, and what List reports.
func TestIntegrationFlows(t *testing.T) {
	f, inst := startFabric(t)
	ctx := t.Context()
	steps := []struct {
		name      string
		do        func() error
		wantPorts []string
		wantInv   *fabric.Inventory
	}{{
		name:      "defaults",
		do:        func() error { return nil },
		wantPorts: []string{TunnelPort},
		wantInv:   &fabric.Inventory{},
	}, {
		name: "created",
		do: func() error {
			if err := f.CreateLocal(ctx, l1, l2); err != nil {
				return err
			}
			return f.CreateRemote(ctx, r1, r2)
		},
		wantPorts: []string{l1.InterfaceName(), l2.InterfaceName(), TunnelPort},
		wantInv:   &fabric.Inventory{Local: []fabric.LocalAttachment{l1, l2}, Remote: []fabric.RemoteAttachment{r1, r2}},
	}, {
		name: "updated",
		do: func() error {
			// Creating again changes nothing; creating a remote
			// attachment with another host moves it.
			if err := f.CreateLocal(ctx, l1); err != nil {
				return err
			}
			return f.CreateRemote(ctx, r1Moved, r2)
		},
		wantPorts: []string{l1.InterfaceName(), l2.InterfaceName(), TunnelPort},
		wantInv:   &fabric.Inventory{Local: []fabric.LocalAttachment{l1, l2}, Remote: []fabric.RemoteAttachment{r1Moved, r2}},
	}, {
		name: "deleted",
		do: func() error {
			if err := f.DeleteLocal(ctx, l2); err != nil {
				return err
			}
			// Deleting needs only VNI and IP, and deleting what
			// is gone is no error.
			return f.DeleteRemote(ctx, fabric.RemoteAttachment{VNI: r2.VNI, IP: r2.IP}, r2)
		},
		wantPorts: []string{l1.InterfaceName(), TunnelPort},
		wantInv:   &fabric.Inventory{Local: []fabric.LocalAttachment{l1}, Remote: []fabric.RemoteAttachment{r1Moved}},
	}, {
		name: "emptied",
		do: func() error {
			if err := f.DeleteLocal(ctx, l1, l2); err != nil {
				return err
			}
			return f.DeleteRemote(ctx, r1Moved)
		},
		wantPorts: []string{TunnelPort},
		wantInv:   &fabric.Inventory{},
	}}
	for _, step := range steps {
		if err := step.do(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		golden.Check(t, "dump-"+step.name+".golden", dumpFlows(t, inst))
		if diff := cmp.Diff(step.wantPorts, bridgePorts(t, inst)); diff != "" {
			t.Errorf("%s: ports differ (-want +got):\n%s", step.name, diff)
		}
		if diff := diffInventory(step.wantInv, list(t, f)); diff != "" {
			t.Errorf("%s: List differs (-want +got):\n%s", step.name, diff)
		}
	}
}

// TestIntegrationVSwitchdRestart restarts ovs-vswitchd under a fabric, which
// loses every flow, and checks that Ensure notices, List shows what is left
// and creating again restores the flows exactly.
func TestIntegrationVSwitchdRestart(t *testing.T) {
	f, inst := startFabric(t)
	ctx := t.Context()
	if err := f.CreateLocal(ctx, l1, l2); err != nil {
		t.Fatal(err)
	}
	if err := f.CreateRemote(ctx, r1, r2); err != nil {
		t.Fatal(err)
	}
	before := dumpFlows(t, inst)
	if lost, err := f.Ensure(ctx); err != nil || lost {
		t.Fatalf("Ensure before the restart = %t, %v; want false, nil", lost, err)
	}

	if err := inst.RestartVSwitchd(ctx); err != nil {
		t.Fatal(err)
	}
	lost, err := f.Ensure(ctx)
	if err != nil {
		t.Fatalf("Ensure after the restart: %v", err)
	}
	if !lost {
		t.Errorf("Ensure after the restart reported no lost flows")
	}
	// The ports are in the database and so survive; their flows do not.
	want := &fabric.Inventory{PartialLocal: []fabric.LocalAttachment{l1, l2}}
	if diff := diffInventory(want, list(t, f)); diff != "" {
		t.Errorf("List after the restart differs (-want +got):\n%s", diff)
	}

	// The agent's repair: create everything it wants again.
	if err := f.CreateLocal(ctx, l1, l2); err != nil {
		t.Fatal(err)
	}
	if err := f.CreateRemote(ctx, r1, r2); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, dumpFlows(t, inst)); diff != "" {
		t.Errorf("flows after the repair differ from before the restart (-before +after):\n%s", diff)
	}
	want = &fabric.Inventory{Local: []fabric.LocalAttachment{l1, l2}, Remote: []fabric.RemoteAttachment{r1, r2}}
	if diff := diffInventory(want, list(t, f)); diff != "" {
		t.Errorf("List after the repair differs (-want +got):\n%s", diff)
	}
	if lost, err := f.Ensure(ctx); err != nil || lost {
		t.Errorf("Ensure after the repair = %t, %v; want false, nil", lost, err)
	}
}

// TestIntegrationListPartial damages a fabric's work behind its back, as a
// crash halfway through an operation or an operator might, and checks that
// a new fabric object on the same switch (a restarted agent) lists exactly
// what exists, ignores what is not KOS's, and that create and delete repair.
func TestIntegrationListPartial(t *testing.T) {
	f, inst := startFabric(t)
	ctx := t.Context()
	l3 := fabric.LocalAttachment{VNI: 3, IP: netip.MustParseAddr("192.168.1.1")}
	l4 := fabric.LocalAttachment{VNI: 3, IP: netip.MustParseAddr("192.168.1.2")}
	if err := f.CreateLocal(ctx, l1, l2, l3, l4); err != nil {
		t.Fatal(err)
	}
	if err := f.CreateRemote(ctx, r1, r2); err != nil {
		t.Fatal(err)
	}
	healthy := dumpFlows(t, inst)

	damage := [][]string{
		// l2 loses its ARP flow.
		{"ovs-ofctl", "del-flows", DefaultBridge, "table=1,arp,tun_id=0x2,arp_tpa=10.0.0.5"},
		// l3 loses its port, so only its flows are left.
		{"ovs-vsctl", "del-port", DefaultBridge, l3.InterfaceName()},
		// l4's port gets another MAC address.
		{"ovs-vsctl", "set", "Interface", l4.InterfaceName(), `mac="02:00:00:00:00:99"`},
		// r2 loses its MAC flow.
		{"ovs-ofctl", "del-flows", DefaultBridge, "table=1,tun_id=0x1,dl_dst=" + r2.MAC().String()},
		// Things that are not KOS's: a flow without a cookie and a port.
		{"ovs-ofctl", "add-flow", DefaultBridge, "table=5,priority=1,actions=drop"},
		{"ovs-vsctl", "add-port", DefaultBridge, "other", "--", "set", "Interface", "other", "type=internal"},
	}
	for _, cmd := range damage {
		if _, err := inst.Run(ctx, cmd[0], cmd[1:]...); err != nil {
			t.Fatal(err)
		}
	}

	restarted := New(Config{RunDir: inst.RunDir, DatapathType: "netdev"})
	want := &fabric.Inventory{
		Local:         []fabric.LocalAttachment{l1},
		PartialLocal:  []fabric.LocalAttachment{l2, l3, l4},
		Remote:        []fabric.RemoteAttachment{r1},
		PartialRemote: []fabric.RemoteAttachment{r2},
	}
	if diff := diffInventory(want, list(t, restarted)); diff != "" {
		t.Errorf("List of the damaged switch differs (-want +got):\n%s", diff)
	}

	// Repair l2, l4 and r2 by creating them again; l3 is an orphan now.
	if err := restarted.CreateLocal(ctx, l2, l4); err != nil {
		t.Fatal(err)
	}
	if err := restarted.CreateRemote(ctx, r2); err != nil {
		t.Fatal(err)
	}
	if err := restarted.DeleteLocal(ctx, l3); err != nil {
		t.Fatal(err)
	}
	want = &fabric.Inventory{
		Local:  []fabric.LocalAttachment{l1, l2, l4},
		Remote: []fabric.RemoteAttachment{r1, r2},
	}
	if diff := diffInventory(want, list(t, restarted)); diff != "" {
		t.Errorf("List of the repaired switch differs (-want +got):\n%s", diff)
	}
	var wantFlows []string
	for _, l := range strings.Split(healthy, "\n") {
		if l != "" && !strings.Contains(l, fmt.Sprintf("cookie=%#x,", cookie(kindLocal, l3.VNI, l3.IP))) {
			wantFlows = append(wantFlows, l)
		}
	}
	// ovs-ofctl add-flow speaks OpenFlow 1.0, whose flows OVS prints
	// with reset_counts in OpenFlow 1.4.
	wantFlows = append(wantFlows, "table=5, reset_counts priority=1 actions=drop")
	slices.Sort(wantFlows)
	if diff := cmp.Diff(strings.Join(wantFlows, "\n")+"\n", dumpFlows(t, inst)); diff != "" {
		t.Errorf("flows after the repair differ (-want +got):\n%s", diff)
	}
	wantPorts := []string{l1.InterfaceName(), l2.InterfaceName(), l4.InterfaceName(), "other", TunnelPort}
	slices.Sort(wantPorts)
	if diff := cmp.Diff(wantPorts, bridgePorts(t, inst)); diff != "" {
		t.Errorf("ports after the repair differ (-want +got):\n%s", diff)
	}
}

// TestIntegrationInvalid checks that invalid attachments are refused before
// anything reaches the switch.
func TestIntegrationInvalid(t *testing.T) {
	f, inst := startFabric(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	before := dumpFlows(t, inst)
	bad := fabric.LocalAttachment{VNI: 0, IP: netip.MustParseAddr("10.0.0.9")}
	if err := f.CreateLocal(ctx, l1, bad); err == nil {
		t.Errorf("CreateLocal with VNI 0 succeeded")
	}
	if err := f.CreateRemote(ctx, fabric.RemoteAttachment{VNI: 1, IP: r1.IP}); err == nil {
		t.Errorf("CreateRemote without a host succeeded")
	}
	if diff := cmp.Diff(before, dumpFlows(t, inst)); diff != "" {
		t.Errorf("flows changed (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff([]string{TunnelPort}, bridgePorts(t, inst)); diff != "" {
		t.Errorf("ports changed (-want +got):\n%s", diff)
	}
}

// TestIntegrationSameAddress checks what happens when a local and a remote
// attachment share VNI and IP, as when an address moves between nodes and
// the agent learns of the new holder before the old one is gone: the one
// created last takes the forwarding flows.
func TestIntegrationSameAddress(t *testing.T) {
	f, _ := startFabric(t)
	ctx := t.Context()
	rOverL1 := fabric.RemoteAttachment{VNI: l1.VNI, IP: l1.IP, HostIP: r1.HostIP}
	if err := f.CreateLocal(ctx, l1); err != nil {
		t.Fatal(err)
	}
	if err := f.CreateRemote(ctx, rOverL1); err != nil {
		t.Fatal(err)
	}
	want := &fabric.Inventory{PartialLocal: []fabric.LocalAttachment{l1}, Remote: []fabric.RemoteAttachment{rOverL1}}
	if diff := diffInventory(want, list(t, f)); diff != "" {
		t.Errorf("List with the remote created last differs (-want +got):\n%s", diff)
	}
	if err := f.CreateLocal(ctx, l1); err != nil {
		t.Fatal(err)
	}
	want = &fabric.Inventory{Local: []fabric.LocalAttachment{l1}}
	if diff := diffInventory(want, list(t, f)); diff != "" {
		t.Errorf("List with the local created last differs (-want +got):\n%s", diff)
	}
	// Deleting the stale remote attachment leaves the local one whole.
	if err := f.DeleteRemote(ctx, rOverL1); err != nil {
		t.Fatal(err)
	}
	if diff := diffInventory(want, list(t, f)); diff != "" {
		t.Errorf("List after deleting the remote differs (-want +got):\n%s", diff)
	}
}
