package agent_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kos-sdn/kos/components/fabric"
	"github.com/kos-sdn/kos/components/fabric/ovs"
	"github.com/kos-sdn/kos/tools/golden"
	"github.com/kos-sdn/kos/tools/ovsenv"
	"github.com/kos-sdn/kos/tools/poll"
)

// startOVS starts an Open vSwitch of the test's own, in a network
// namespace of its own, and an OVS fabric on it with the userspace
// datapath.
func startOVS(t *testing.T) (*ovsenv.Instance, *ovs.Fabric) {
	t.Helper()
	inst := ovsenv.StartT(t, ovsenv.Options{})
	return inst, newOVSFabric(inst)
}

// testMTU is the MTU of the test agents' interfaces: what the agent
// chooses on an underlay of 1500 bytes, such as the simulated nodes' veths.
const testMTU = 1500 - fabric.VXLANOverhead

// newOVSFabric returns a fabric on inst, as a freshly started agent makes.
func newOVSFabric(inst *ovsenv.Instance) *ovs.Fabric {
	return ovs.New(ovs.Config{RunDir: inst.RunDir, DatapathType: "netdev", MTU: testMTU})
}

// dumpFlows returns the KOS bridge's flows as ovs-ofctl prints them, with
// port names and without counters, sorted.
func dumpFlows(t *testing.T, inst *ovsenv.Instance) string {
	t.Helper()
	out, err := inst.Run(context.Background(), "ovs-ofctl", "-O", "OpenFlow14", "--names", "--no-stats", "dump-flows", ovs.DefaultBridge)
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
	return joinLines(lines)
}

// bridgePorts returns the names of the KOS bridge's ports, sorted.
func bridgePorts(t *testing.T, inst *ovsenv.Instance) []string {
	t.Helper()
	out, err := inst.Run(context.Background(), "ovs-vsctl", "list-ports", ovs.DefaultBridge)
	if err != nil {
		t.Fatal(err)
	}
	ports := strings.Fields(out)
	slices.Sort(ports)
	return ports
}

// portsOf returns the port names a switch with these local attachments has.
func portsOf(atts ...fabric.LocalAttachment) []string {
	ports := []string{ovs.TunnelPort}
	for _, a := range atts {
		ports = append(ports, a.InterfaceName())
	}
	slices.Sort(ports)
	return ports
}

// checkSwitch waits until the fabric holds want, then checks the flows
// against a golden file and the bridge's ports.
func checkSwitch(t *testing.T, step string, inst *ovsenv.Instance, fab fabric.Interface, want *fabric.Inventory) {
	t.Helper()
	poll.Until(t, settle, step, holds(fab, want))
	golden.Check(t, step+".golden", dumpFlows(t, inst))
	if diff := cmp.Diff(bridgePorts(t, inst), portsOf(want.Local...)); diff != "" {
		t.Errorf("%s: ports (-got +want):\n%s", step, diff)
	}
}

// TestIntegrationOVSFlows runs an agent on a real Open vSwitch and checks
// the flows ovs-ofctl shows against golden files after attachments are
// created, updated and deleted.
func TestIntegrationOVSFlows(t *testing.T) {
	k := newAPI(t)
	const vni1, vni2 = 201, 202
	k.subnet("s1", "10.201.0.0/24", vni1)
	k.subnet("s2", "10.202.0.0/24", vni2)
	inst, fab := startOVS(t)
	r := startAgent(t, agentConfig(t, k.node("a"), hostA, fab))

	k.attachment("a1", k.node("a"), "s1")
	k.address("a1", "10.201.0.5", vni1)
	k.attachment("a2", k.node("a"), "s2")
	k.address("a2", "10.202.0.5", vni2)
	k.remote("c1", k.node("c"), "s1", "10.201.0.6", vni1, hostC)
	k.remote("c2", k.node("c"), "s1", "10.201.0.7", vni1, hostD)
	k.remote("c3", k.node("c"), "s2", "10.202.0.8", vni2, hostC)
	checkSwitch(t, "ovs-created", inst, fab, &fabric.Inventory{
		Local:  []fabric.LocalAttachment{local(vni1, "10.201.0.5"), local(vni2, "10.202.0.5")},
		Remote: []fabric.RemoteAttachment{remote(vni1, "10.201.0.6", hostC), remote(vni1, "10.201.0.7", hostD), remote(vni2, "10.202.0.8", hostC)},
	})
	poll.Until(t, settle, "a1 is ready", k.ready("a1", hostA))
	// The drop counts are read from the switch, which dropped nothing.
	families, err := r.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	drops := map[string]float64{}
	for _, f := range families {
		if n := f.GetName(); n == "kos_agent_tunnel_drops_total" || n == "kos_agent_spoofed_drops_total" {
			drops[n] = f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	if want := map[string]float64{"kos_agent_tunnel_drops_total": 0, "kos_agent_spoofed_drops_total": 0}; !cmp.Equal(drops, want) {
		t.Errorf("drop counters = %v, want %v", drops, want)
	}

	// c1 moves to another node; a2 gets another address.
	k.hostIP("c1", hostB)
	k.address("a2", "10.202.0.9", vni2)
	checkSwitch(t, "ovs-updated", inst, fab, &fabric.Inventory{
		Local:  []fabric.LocalAttachment{local(vni1, "10.201.0.5"), local(vni2, "10.202.0.9")},
		Remote: []fabric.RemoteAttachment{remote(vni1, "10.201.0.6", hostB), remote(vni1, "10.201.0.7", hostD), remote(vni2, "10.202.0.8", hostC)},
	})
	poll.Until(t, settle, "a2 is ready at its new address", k.ready("a2", hostA))

	// c2 goes; a2 goes, and with it network 2.
	k.delete("c2")
	k.delete("a2")
	checkSwitch(t, "ovs-deleted", inst, fab, &fabric.Inventory{
		Local:  []fabric.LocalAttachment{local(vni1, "10.201.0.5")},
		Remote: []fabric.RemoteAttachment{remote(vni1, "10.201.0.6", hostB)},
	})

	k.delete("a1")
	checkSwitch(t, "ovs-emptied", inst, fab, &fabric.Inventory{})
}

// TestIntegrationOVSRestart restarts ovs-vswitchd under a running agent,
// which loses every flow, and checks that the agent puts them back exactly.
func TestIntegrationOVSRestart(t *testing.T) {
	k := newAPI(t)
	const vni = 211
	k.subnet("s1", "10.211.0.0/24", vni)
	inst, fab := startOVS(t)
	agentA := startAgent(t, agentConfig(t, k.node("a"), hostA, fab))
	k.attachment("a1", k.node("a"), "s1")
	k.address("a1", "10.211.0.5", vni)
	k.remote("c1", k.node("c"), "s1", "10.211.0.6", vni, hostC)
	whole := &fabric.Inventory{
		Local:  []fabric.LocalAttachment{local(vni, "10.211.0.5")},
		Remote: []fabric.RemoteAttachment{remote(vni, "10.211.0.6", hostC)},
	}
	poll.Until(t, settle, "the switch is whole", holds(fab, whole))
	before := dumpFlows(t, inst)

	if err := inst.RestartVSwitchd(context.Background()); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, settle, "the switch is whole again", holds(fab, whole))
	if diff := cmp.Diff(dumpFlows(t, inst), before); diff != "" {
		t.Errorf("flows after the repair (-got +before the restart):\n%s", diff)
	}
	if n := agentA.counter(t, "kos_agent_reconciles_total", map[string]string{"reason": "flows_lost", "result": "ok"}); n < 1 {
		t.Errorf("no reconcile for lost flows")
	}
}

// TestIntegrationOVSAgentDown changes attachments while the agent is down
// and checks that a new agent, with a new fabric on the same switch,
// leaves exactly the flows and ports of the attachments that exist: no
// orphans, nothing missing.
func TestIntegrationOVSAgentDown(t *testing.T) {
	k := newAPI(t)
	const vni1, vni2 = 221, 222
	k.subnet("s1", "10.221.0.0/24", vni1)
	k.subnet("s2", "10.222.0.0/24", vni2)
	inst, fab := startOVS(t)
	first := startAgent(t, agentConfig(t, k.node("a"), hostA, fab))
	k.attachment("a1", k.node("a"), "s1")
	k.address("a1", "10.221.0.1", vni1)
	k.attachment("a2", k.node("a"), "s1")
	k.address("a2", "10.221.0.2", vni1)
	k.attachment("a3", k.node("a"), "s2")
	k.address("a3", "10.222.0.3", vni2)
	k.remote("c1", k.node("c"), "s1", "10.221.0.11", vni1, hostC)
	k.remote("c2", k.node("c"), "s1", "10.221.0.12", vni1, hostC)
	k.remote("c3", k.node("c"), "s2", "10.222.0.13", vni2, hostC)
	poll.Until(t, settle, "the switch holds everything", holds(fab, &fabric.Inventory{
		Local:  []fabric.LocalAttachment{local(vni1, "10.221.0.1"), local(vni1, "10.221.0.2"), local(vni2, "10.222.0.3")},
		Remote: []fabric.RemoteAttachment{remote(vni1, "10.221.0.11", hostC), remote(vni1, "10.221.0.12", hostC), remote(vni2, "10.222.0.13", hostC)},
	}))
	first.stop(t)

	k.delete("a3")
	k.delete("a2")
	k.attachment("a4", k.node("a"), "s1")
	k.address("a4", "10.221.0.4", vni1)
	k.delete("c1")
	k.hostIP("c2", hostD)
	k.remote("c4", k.node("c"), "s1", "10.221.0.14", vni1, hostC)

	restarted := newOVSFabric(inst)
	startAgent(t, agentConfig(t, k.node("a"), hostA, restarted))
	checkSwitch(t, "ovs-agent-down", inst, restarted, &fabric.Inventory{
		Local:  []fabric.LocalAttachment{local(vni1, "10.221.0.1"), local(vni1, "10.221.0.4")},
		Remote: []fabric.RemoteAttachment{remote(vni1, "10.221.0.12", hostD), remote(vni1, "10.221.0.14", hostC)},
	})
	poll.Until(t, settle, "a4 is ready", k.ready("a4", hostA))
}
