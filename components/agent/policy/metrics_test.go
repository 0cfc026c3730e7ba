package policy

import (
	"context"
	"net"
	"net/netip"
	"slices"
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

// networkCountingSwitch is a countingSwitch that reads one network's drops
// too, and whose drop flows start again from 0 when a policy is set.
type networkCountingSwitch struct {
	countingSwitch
}

func (s *networkCountingSwitch) NetworkPolicyDrops(_ context.Context, vni uint32) ([]fabric.PolicyDrop, error) {
	var out []fabric.PolicyDrop
	for _, d := range s.drops {
		if d.VNI == vni {
			out = append(out, d)
		}
	}
	return out, nil
}

func (s *networkCountingSwitch) SetPolicy(ctx context.Context, p fabric.NetworkPolicy) error {
	for i := range s.drops {
		if s.drops[i].VNI == p.VNI {
			s.drops[i].Packets = 0
		}
	}
	return s.countingSwitch.SetPolicy(ctx, p)
}

// TestDroppedPacketsAcrossUpdates checks that an update of a network's
// policy, which rewrites its flows, loses none of the drops they counted
// since the last scrape.
func TestDroppedPacketsAcrossUpdates(t *testing.T) {
	sw := &networkCountingSwitch{}
	reg := prometheus.NewPedanticRegistry()
	e, err := New(Config{Node: "n1", Client: fake.NewSimpleClientset(), Switch: sw, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	web := netip.MustParseAddr("10.0.0.5")
	mac := v1alpha1.MACAddress(7, web)
	np := fabric.NetworkPolicy{VNI: 7, Policies: []fabric.Policy{{Name: "a/web", Selected: []netip.Addr{web}, Ingress: true}}}
	e.applied[7] = np
	total := func() float64 {
		t.Helper()
		return gatheredValue(t, reg, "kos_agent_policy_dropped_packets_total")
	}
	sw.drops = []fabric.PolicyDrop{{VNI: 7, MAC: mac, Packets: 5}}
	if got := total(); got != 5 {
		t.Fatalf("first scrape: %g, want 5", got)
	}
	// 3 more dropped, then an update rewrites the flows.
	sw.drops[0].Packets = 8
	np2 := np
	np2.Policies = append(slices.Clone(np.Policies), fabric.Policy{Name: "a/other", Selected: []netip.Addr{web}})
	if err := e.metrics.rewrite(context.Background(), 7, func() error { return sw.SetPolicy(context.Background(), np2) }); err != nil {
		t.Fatal(err)
	}
	// 9 after the rewrite: more than before it, which only a count known
	// to start again from 0 tells from 1 more.
	sw.drops[0].Packets = 9
	if got := total(); got != 17 {
		t.Errorf("after an update: %g, want 17 (5, then 3 before the rewrite, 9 after)", got)
	}
}

// gatheredValue sums the samples of a metric family of reg.
func gatheredValue(t *testing.T, reg prometheus.Gatherer, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range families {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}
