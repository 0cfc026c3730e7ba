package policymodel

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/kos-sdn/kos/components/apis/multinetworkpolicy/v1beta1"
	"github.com/kos-sdn/kos/components/fabric"
	ovspolicy "github.com/kos-sdn/kos/components/fabric/ovs/policy"
)

// endpoint is one end of a probed connection on network blue: a pod's
// attachment, or the plain attachment (pod nil).
type endpoint struct {
	pod  *corev1.Pod
	addr netip.Addr
	node string
}

type probe struct {
	protocol corev1.Protocol
	port     int32
}

// TestTruthTable compares, for random sets of policies on blue, every
// (source, destination, protocol, port) cell of the model that Build
// returns, as the nodes' switches enforce it, with a direct reading of
// networking/v1's semantics that evaluates each connection against the
// specs, as the Kubernetes network-policy tests and cyclonus do.
func TestTruthTable(t *testing.T) {
	in := cluster()
	pods := map[string]*corev1.Pod{}
	for _, p := range in.Pods {
		pods[p.Name] = p
	}
	ends := []endpoint{
		{pods["web1"], netip.MustParseAddr("10.0.0.11"), "n1"},
		{pods["web2"], netip.MustParseAddr("10.0.0.12"), "n2"},
		{pods["client"], netip.MustParseAddr("10.0.0.21"), "n1"},
		{pods["db"], netip.MustParseAddr("10.0.0.31"), "n3"},
		{nil, netip.MustParseAddr("10.0.0.99"), "n1"},
	}
	probes := []probe{{"TCP", 80}, {"TCP", 8080}, {"TCP", 8500}, {"TCP", 9090}, {"UDP", 53}, {"UDP", 5000}, {"SCTP", 9}}
	rng := rand.New(rand.NewPCG(35, 1))
	cells, allowed := 0, 0
	for round := range 300 {
		var policies []*v1beta1.MultiNetworkPolicy
		for i := range 1 + rng.IntN(3) {
			policies = append(policies, randomPolicy(rng, fmt.Sprintf("p%d", i)))
		}
		in.Policies = policies
		m := Build(in)
		for node, np := range m.Networks[7] {
			if _, err := ovspolicy.Compile(np, pipeline); err != nil {
				t.Fatalf("round %d: compiling the model of node %s: %v", round, node, err)
			}
		}
		for _, src := range ends {
			for _, dst := range ends {
				if src == dst {
					continue
				}
				for _, pr := range probes {
					cells++
					want := specAllows(in, policies, src, dst, pr)
					got := modelAllows(m.Networks[7], src, dst, pr)
					if want {
						allowed++
					}
					if got != want {
						t.Errorf("round %d: %v → %v %s/%d: model allows %v, spec %v; policies:\n%s", round, src.addr, dst.addr, pr.protocol, pr.port, got, want, describe(policies))
					}
				}
			}
		}
	}
	t.Logf("%d cells, %d allowed", cells, allowed)
	if allowed == 0 || allowed == cells {
		t.Errorf("%d of %d cells allowed: the random policies do not exercise both outcomes", allowed, cells)
	}
}

func describe(policies []*v1beta1.MultiNetworkPolicy) string {
	var s string
	for _, p := range policies {
		s += fmt.Sprintf("  %s: %+v\n", p.Name, p.Spec)
	}
	return s
}

// The building blocks of the random policies.
var (
	podSelectors = []*metav1.LabelSelector{
		sel(), sel("app", "web"), sel("role", "client"), sel("app", "db"), sel("app", "none"),
		{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: []string{"web", "db"}}}},
		{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "role", Operator: metav1.LabelSelectorOpDoesNotExist}}},
	}
	randomPeers = []networkingv1.NetworkPolicyPeer{
		{PodSelector: sel("app", "web")},
		{PodSelector: sel("role", "client")},
		{PodSelector: sel()},
		{NamespaceSelector: sel("ns", "a")},
		{NamespaceSelector: sel("ns", "b")},
		{NamespaceSelector: sel(), PodSelector: sel("app", "db")},
		{NamespaceSelector: sel("ns", "b"), PodSelector: sel("app", "web")},
		{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/24", Except: []string{"10.0.0.16/28"}}},
		{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/28"}},
		{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.99/32"}},
	}
	randomPorts = []networkingv1.NetworkPolicyPort{
		port(corev1.ProtocolTCP, intstr.FromInt32(80)),
		port(corev1.ProtocolTCP, intstr.FromString("http")),
		port(corev1.ProtocolUDP, intstr.FromString("dns")),
		port(corev1.ProtocolTCP, intstr.FromInt32(8000), 9000),
		{Protocol: ptr.To(corev1.ProtocolUDP)},
		port(corev1.ProtocolSCTP, intstr.FromInt32(9)),
		{Port: ptr.To(intstr.FromInt32(9090))},
	}
	randomTypes = [][]networkingv1.PolicyType{nil, ingress, egress, {networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}}
)

func pick[T any](rng *rand.Rand, from []T, max int) []T {
	var out []T
	for range rng.IntN(max + 1) {
		out = append(out, from[rng.IntN(len(from))])
	}
	return out
}

func randomPolicy(rng *rand.Rand, name string) *v1beta1.MultiNetworkPolicy {
	spec := networkingv1.NetworkPolicySpec{
		PodSelector: *podSelectors[rng.IntN(len(podSelectors))],
		PolicyTypes: randomTypes[rng.IntN(len(randomTypes))],
	}
	for range rng.IntN(3) {
		spec.Ingress = append(spec.Ingress, networkingv1.NetworkPolicyIngressRule{From: pick(rng, randomPeers, 2), Ports: pick(rng, randomPorts, 2)})
	}
	for range rng.IntN(3) {
		spec.Egress = append(spec.Egress, networkingv1.NetworkPolicyEgressRule{To: pick(rng, randomPeers, 2), Ports: pick(rng, randomPorts, 2)})
	}
	return policy(name, "blue", spec)
}

// specAllows reads networking/v1 directly: the connection needs the
// source's egress and the destination's ingress, each allowed when no
// policy isolates the end for the direction, or a rule of one that does
// admits the other end and the port (a named port resolves on the
// destination).
func specAllows(in Input, policies []*v1beta1.MultiNetworkPolicy, src, dst endpoint, pr probe) bool {
	nsLabels := map[string]labels.Set{}
	for _, ns := range in.Namespaces {
		nsLabels[ns.Name] = ns.Labels
	}
	selects := func(s *metav1.LabelSelector, pod *corev1.Pod) bool {
		sel, err := metav1.LabelSelectorAsSelector(s)
		return err == nil && sel.Matches(labels.Set(pod.Labels))
	}
	peerMatches := func(p *v1beta1.MultiNetworkPolicy, peer networkingv1.NetworkPolicyPeer, other endpoint) bool {
		if peer.IPBlock != nil {
			block := netip.MustParsePrefix(peer.IPBlock.CIDR)
			for _, e := range peer.IPBlock.Except {
				if netip.MustParsePrefix(e).Contains(other.addr) {
					return false
				}
			}
			return block.Contains(other.addr)
		}
		if other.pod == nil {
			return false
		}
		if peer.NamespaceSelector == nil {
			if other.pod.Namespace != p.Namespace {
				return false
			}
		} else if sel, _ := metav1.LabelSelectorAsSelector(peer.NamespaceSelector); !sel.Matches(nsLabels[other.pod.Namespace]) {
			return false
		}
		return peer.PodSelector == nil || selects(peer.PodSelector, other.pod)
	}
	portMatches := func(ports []networkingv1.NetworkPolicyPort) bool {
		if len(ports) == 0 {
			return true
		}
		for _, p := range ports {
			proto := corev1.ProtocolTCP
			if p.Protocol != nil {
				proto = *p.Protocol
			}
			if proto != pr.protocol {
				continue
			}
			switch {
			case p.Port == nil:
				return true
			case p.Port.Type == intstr.String:
				if dst.pod != nil && slices.Contains(containerPorts(dst.pod, namedPort{fabric.Protocol(proto), p.Port.StrVal}), uint16(pr.port)) {
					return true
				}
			case p.EndPort != nil:
				if pr.port >= p.Port.IntVal && pr.port <= *p.EndPort {
					return true
				}
			default:
				if pr.port == p.Port.IntVal {
					return true
				}
			}
		}
		return false
	}
	direction := func(end, other endpoint, egress bool) bool {
		if end.pod == nil {
			return true // plain attachments are never isolated
		}
		isolated := false
		for _, p := range policies {
			if p.Namespace != end.pod.Namespace || !selects(&p.Spec.PodSelector, end.pod) {
				continue
			}
			types := p.Spec.PolicyTypes
			if len(types) == 0 {
				types = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
				if len(p.Spec.Egress) > 0 {
					types = append(types, networkingv1.PolicyTypeEgress)
				}
			}
			want := networkingv1.PolicyTypeIngress
			if egress {
				want = networkingv1.PolicyTypeEgress
			}
			if !slices.Contains(types, want) {
				continue
			}
			isolated = true
			type rule struct {
				peers []networkingv1.NetworkPolicyPeer
				ports []networkingv1.NetworkPolicyPort
			}
			var rules []rule
			if egress {
				for _, r := range p.Spec.Egress {
					rules = append(rules, rule{r.To, r.Ports})
				}
			} else {
				for _, r := range p.Spec.Ingress {
					rules = append(rules, rule{r.From, r.Ports})
				}
			}
			for _, r := range rules {
				peerOK := len(r.peers) == 0
				for _, peer := range r.peers {
					peerOK = peerOK || peerMatches(p, peer, other)
				}
				if peerOK && portMatches(r.ports) {
					return true
				}
			}
		}
		return !isolated
	}
	return direction(src, dst, true) && direction(dst, src, false)
}

// modelAllows reads the model as the switches enforce it: egress on the
// source's node, ingress on the destination's.
func modelAllows(nodes map[string]fabric.NetworkPolicy, src, dst endpoint, pr probe) bool {
	direction := func(end, other endpoint, egress bool) bool {
		isolated := false
		for _, p := range nodes[end.node].Policies {
			if !slices.Contains(p.Selected, end.addr) {
				continue
			}
			rules := p.IngressRules
			if egress {
				if !p.Egress {
					continue
				}
				rules = p.EgressRules
			} else if !p.Ingress {
				continue
			}
			isolated = true
			for _, r := range rules {
				if peerIn(r.Peers, other.addr) && portIn(r.Ports, pr) {
					return true
				}
			}
		}
		return !isolated
	}
	return direction(src, dst, true) && direction(dst, src, false)
}

func peerIn(peers []fabric.Peer, a netip.Addr) bool {
	for _, p := range peers {
		if p.Prefix.Contains(a) && !slices.ContainsFunc(p.Except, func(e netip.Prefix) bool { return e.Contains(a) }) {
			return true
		}
	}
	return false
}

func portIn(ports []fabric.Port, pr probe) bool {
	if len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		if string(p.Protocol) != string(pr.protocol) {
			continue
		}
		end := p.EndPort
		if end == 0 {
			end = p.Port
		}
		if p.Port == 0 || (uint16(pr.port) >= p.Port && uint16(pr.port) <= end) {
			return true
		}
	}
	return false
}
