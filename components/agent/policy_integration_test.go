package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentapi "github.com/kos-sdn/kos/components/agent/api"
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
// policy's name, and a trace names the policy that dropped a packet and
// the rule that allowed another.
func TestIntegrationPolicyEnforced(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	k := newAPI(t)
	startControllers(t)

	a, b := startTwoNodes(t, ctx)
	cfgA, cfgB := agentConfig(t, k.node("a"), hostA, a.fabric), agentConfig(t, k.node("b"), hostB, b.fabric)
	cfgA.Policy, cfgB.Policy = true, true
	agentA := startAgent(t, cfgA)
	agentB := startAgent(t, cfgB)
	debugA := httptest.NewServer(agentA.agent.DebugHandler())
	defer debugA.Close()
	// traces asks node A's agent to trace a TCP packet from g1 and checks
	// that what it says names the policy.
	traces := func(to netip.Addr, want string) func(context.Context) error {
		return func(ctx context.Context) error {
			body, err := json.Marshal(agentapi.TraceRequest{Namespace: k.ns, Name: "g1", To: to.String(), Protocol: agentapi.ProtocolTCP, Port: 80})
			if err != nil {
				return err
			}
			out, err := call(ctx, debugA.URL, http.MethodPost, agentapi.PathTrace, body)
			if err != nil {
				return err
			}
			if !strings.Contains(string(out), want) {
				return fmt.Errorf("the trace to %v does not say %q:\n%s", to, want, out)
			}
			_, policy, _ := strings.Cut(string(out), "\nPolicy of VNI")
			t.Logf("The trace to %v ends: Policy of VNI%s", to, policy)
			return nil
		}
	}

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
		if n := agentB.counter(t, "kos_agent_policy_dropped_packets_total", map[string]string{"direction": "ingress", "namespace": k.ns, "policy": "deny", "vni": strconv.Itoa(vni)}); n == 0 {
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
	out := k.ns + "/out"
	poll.Until(t, settle, "a trace names the policy that drops g1's packet to g2", traces(addr2,
		"Dropped: the egress of "+addr1.String()+" is isolated by "+out+", and no rule of theirs allows the packet."))
	poll.Until(t, settle, "a trace names the rule that allows g1's packet to another address", traces(netip.MustParseAddr("10.31.0.200"),
		"The egress of "+addr1.String()+" is allowed by "+out+" egress[0]."))
	poll.Until(t, settle, "g1's drops are counted under its egress policy", func(context.Context) error {
		if n := agentA.counter(t, "kos_agent_policy_dropped_packets_total", map[string]string{"direction": "egress", "namespace": k.ns, "policy": "out"}); n == 0 {
			return fmt.Errorf("no drops counted")
		}
		return nil
	})
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
	poll.Until(t, settle, "without policy a trace says nothing is checked", traces(addr2,
		fmt.Sprintf("No policy isolates an attachment of VNI %d on this node", vni)))
	if n := agentB.counter(t, "kos_agent_policy_updates_total", map[string]string{"result": "ok"}); n < 3 {
		t.Errorf("node B counted %g policy updates, want at least 3 (set, update, lift)", n)
	}
}
