package policy

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/fabric"
	"github.com/kos-sdn/kos/components/generated/clientset/versioned/fake"
)

// countingSwitch is a switch whose drop flows count what drops says.
type countingSwitch struct {
	recordingSwitch
	drops []fabric.PolicyDrop
}

func (s *countingSwitch) PolicyDrops(context.Context) ([]fabric.PolicyDrop, error) {
	return s.drops, nil
}

func TestDroppedPackets(t *testing.T) {
	sw := &countingSwitch{}
	reg := prometheus.NewPedanticRegistry()
	e, err := New(Config{Node: "n1", Client: fake.NewSimpleClientset(), Switch: sw, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	web, db := netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("10.0.0.6")
	mac := func(a netip.Addr) net.HardwareAddr { return v1alpha1.MACAddress(7, a) }
	// a/deny isolates both for ingress, a/web only web; a/out db for egress.
	e.applied[7] = fabric.NetworkPolicy{VNI: 7, Policies: []fabric.Policy{
		{Name: "a/web", Selected: []netip.Addr{web}, Ingress: true},
		{Name: "a/deny", Selected: []netip.Addr{web, db}, Ingress: true},
		{Name: "a/out", Selected: []netip.Addr{db}, Egress: true},
	}}
	check := func(step, want string) {
		t.Helper()
		const head = `# HELP kos_agent_policy_dropped_packets_total Packets dropped at this node's attachments that the policy namespace/policy isolates for the direction (ingress: to them, egress: from them) in network vni, because no rule of the policies isolating them allowed their connection. A packet dropped at an attachment that several policies isolate counts under each.
# TYPE kos_agent_policy_dropped_packets_total counter
`
		if err := testutil.GatherAndCompare(reg, strings.NewReader(head+want), "kos_agent_policy_dropped_packets_total"); err != nil {
			t.Errorf("%s: %v", step, err)
		}
	}
	sw.drops = []fabric.PolicyDrop{
		{VNI: 7, MAC: mac(web), Packets: 3},
		{VNI: 7, MAC: mac(db), Packets: 2},
		{VNI: 7, MAC: mac(db), Egress: true, Packets: 0},
	}
	check("first read", `
kos_agent_policy_dropped_packets_total{direction="egress",namespace="a",policy="out",vni="7"} 0
kos_agent_policy_dropped_packets_total{direction="ingress",namespace="a",policy="deny",vni="7"} 5
kos_agent_policy_dropped_packets_total{direction="ingress",namespace="a",policy="web",vni="7"} 3
`)
	// The network's flows were rewritten: web's count restarted and
	// reached 1; db's went on.
	sw.drops = []fabric.PolicyDrop{
		{VNI: 7, MAC: mac(web), Packets: 1},
		{VNI: 7, MAC: mac(db), Packets: 4},
		{VNI: 7, MAC: mac(db), Egress: true, Packets: 1},
	}
	check("after a rewrite", `
kos_agent_policy_dropped_packets_total{direction="egress",namespace="a",policy="out",vni="7"} 1
kos_agent_policy_dropped_packets_total{direction="ingress",namespace="a",policy="deny",vni="7"} 8
kos_agent_policy_dropped_packets_total{direction="ingress",namespace="a",policy="web",vni="7"} 4
`)
	// a/web is gone: its series too, and the others keep counting.
	e.applied[7] = fabric.NetworkPolicy{VNI: 7, Policies: []fabric.Policy{
		{Name: "a/deny", Selected: []netip.Addr{web, db}, Ingress: true},
		{Name: "a/out", Selected: []netip.Addr{db}, Egress: true},
	}}
	sw.drops = []fabric.PolicyDrop{
		{VNI: 7, MAC: mac(web), Packets: 2},
		{VNI: 7, MAC: mac(db), Packets: 4},
		{VNI: 7, MAC: mac(db), Egress: true, Packets: 1},
	}
	check("a policy gone", `
kos_agent_policy_dropped_packets_total{direction="egress",namespace="a",policy="out",vni="7"} 1
kos_agent_policy_dropped_packets_total{direction="ingress",namespace="a",policy="deny",vni="7"} 9
`)
}
