package agent_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/tools/ovsenv"
	"github.com/kos-sdn/kos/tools/poll"
)

// TestIntegrationPolicyEnforced runs two agents on two simulated nodes
// (real Open vSwitch, userspace datapath) against the real control plane,
// and writes the NodeNetworkPolicies kos-controller-manager would publish:
// a policy that isolates g2 (node B) for ingress stops g1 (node A) from
// reaching it while g2 still reaches g1 (stateful: the replies pass); a
// rule admitting g1 lets it through; an egress policy on node A denies g1
// again, and lifting it allows; dropped packets are counted under the
// policy's name.
func TestIntegrationPolicyEnforced(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	k := newAPI(t)
	startControllers(t)

	nsA, nsB := ovsenv.NetnsT(t), ovsenv.NetnsT(t)
	if err := ovsenv.AddVethPair(ctx, nsA, "ul0", nsB, "ul0"); err != nil {
		t.Fatal(err)
	}
	a := startNode(t, ctx, nsA, hostA)
	b := startNode(t, ctx, nsB, hostB)
	a.knowNeighbour(t, ctx, b)
	b.knowNeighbour(t, ctx, a)
	cfgA, cfgB := agentConfig(t, k.node("a"), hostA, a.fabric), agentConfig(t, k.node("b"), hostB, b.fabric)
	cfgA.Policy, cfgB.Policy = true, true
	startAgent(t, cfgA)
	agentB := startAgent(t, cfgB)

	const vni = 311
	k.subnet("s1", "10.31.0.0/24", vni)
	k.attachment("g1", k.node("a"), "s1")
	k.attachment("g2", k.node("b"), "s1")
	poll.Until(t, settle, "g1 is ready", k.ready("g1", hostA))
	poll.Until(t, settle, "g2 is ready", k.ready("g2", hostB))
	g1, addr1 := a.guest(t, ctx, k, "g1")
	g2, addr2 := b.guest(t, ctx, k, "g2")

	reaches := func(from *ovsenv.Netns, to netip.Addr) func(context.Context) error {
		return func(context.Context) error {
			if got, err := from.Ping(ctx, to, 3, time.Second); err != nil || got != 3 {
				return fmt.Errorf("ping from %s to %v: %d of 3 replies (%v)", from.Name, to, got, err)
			}
			return nil
		}
	}
	// denied waits until no ping gets through, then checks twice more.
	denied := func(from *ovsenv.Netns, to netip.Addr) func(context.Context) error {
		return func(context.Context) error {
			if got, err := from.Ping(ctx, to, 3, 700*time.Millisecond); err != nil || got != 0 {
				return fmt.Errorf("ping from %s to %v: %d of 3 replies (%v), want none", from.Name, to, got, err)
			}
			return nil
		}
	}
	poll.Until(t, settle, "g1 reaches g2 without policy", reaches(g1, addr2))

	policies := k.client.NetworkV1alpha1().NodeNetworkPolicies(k.ns)
	set := func(node string, spec v1alpha1.NodeNetworkPolicySpec) {
		t.Helper()
		name := fmt.Sprintf("%d.%s", vni, node)
		spec.Node, spec.VNI = node, vni
		old, err := policies.Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			old.Spec = spec
			_, err = policies.Update(ctx, old, metav1.UpdateOptions{})
		} else {
			_, err = policies.Create(ctx, &v1alpha1.NodeNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatalf("writing NodeNetworkPolicy %s: %v", name, err)
		}
	}
	lift := func(node string) {
		t.Helper()
		if err := policies.Delete(ctx, fmt.Sprintf("%d.%s", vni, node), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	deny := k.ns + "/deny"
	set(k.node("b"), v1alpha1.NodeNetworkPolicySpec{Policies: []v1alpha1.PolicyModel{{Name: deny, Selected: []string{addr2.String()}, Ingress: true}}})
	poll.Until(t, settle, "g1 no longer reaches g2", denied(g1, addr2))
	poll.Until(t, settle, "g2 still reaches g1: its replies pass", reaches(g2, addr1))
	poll.Until(t, settle, "the drops at g2 are counted under the policy", func(context.Context) error {
		if n := agentB.counter(t, "kos_agent_policy_dropped_packets_total", map[string]string{"direction": "ingress", "policies": deny, "address": addr2.String()}); n == 0 {
			return fmt.Errorf("no drops counted")
		}
		return nil
	})

	set(k.node("b"), v1alpha1.NodeNetworkPolicySpec{Policies: []v1alpha1.PolicyModel{{Name: deny, Selected: []string{addr2.String()}, Ingress: true,
		IngressRules: []v1alpha1.PolicyRule{{Peers: []v1alpha1.PolicyPeer{{CIDR: addr1.String() + "/32"}}}}}}})
	poll.Until(t, settle, "a rule admitting g1 lets it reach g2", reaches(g1, addr2))

	set(k.node("a"), v1alpha1.NodeNetworkPolicySpec{Policies: []v1alpha1.PolicyModel{{Name: k.ns + "/out", Selected: []string{addr1.String()}, Egress: true,
		EgressRules: []v1alpha1.PolicyRule{{Peers: []v1alpha1.PolicyPeer{{CIDR: "10.31.0.0/24", Except: []string{addr2.String() + "/32"}}}}}}}})
	poll.Until(t, settle, "g1's egress policy on node A denies g2", denied(g1, addr2))
	lift(k.node("a"))
	poll.Until(t, settle, "lifting it lets g1 reach g2 again", reaches(g1, addr2))
	lift(k.node("b"))
	for _, n := range []*node{a, b} {
		poll.Until(t, settle, "the switch of "+n.ns.Name+" holds no policy", func(ctx context.Context) error {
			inv, err := inventoryOf(ctx, n.fabric)
			if err != nil {
				return err
			}
			if len(inv.Policies) > 0 {
				return fmt.Errorf("it holds the policies of networks %v", inv.Policies)
			}
			return nil
		})
	}
	poll.Until(t, settle, "without policy g1 still reaches g2", reaches(g1, addr2))
	if n := agentB.counter(t, "kos_agent_policy_updates_total", map[string]string{"result": "ok"}); n < 3 {
		t.Errorf("node B counted %g policy updates, want at least 3 (set, update, lift)", n)
	}
}
