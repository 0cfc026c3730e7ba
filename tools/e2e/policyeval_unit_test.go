package e2e

import (
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestPolicyEval checks the truth table's oracle on its own: each case a
// world of a few policies and cells whose verdicts are worked out by hand
// from networking/v1's documentation.
func TestPolicyEval(t *testing.T) {
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	pods := []evalPod{
		{Namespace: "one", Name: "a", Labels: map[string]string{"app": "a"}, Network: "one/net", IP: netip.MustParseAddr("10.0.0.1"),
			Ports: []corev1.ContainerPort{{Name: "web", ContainerPort: 80}, {Name: "dns", ContainerPort: 53, Protocol: udp}}},
		{Namespace: "one", Name: "b", Labels: map[string]string{"app": "b"}, Network: "one/net", IP: netip.MustParseAddr("10.0.0.2"),
			Ports: []corev1.ContainerPort{{Name: "web", ContainerPort: 8080}}},
		{Namespace: "two", Name: "c", Labels: map[string]string{"app": "a"}, Network: "one/net", IP: netip.MustParseAddr("10.0.0.3")},
		{Namespace: "one", Name: "elsewhere", Labels: map[string]string{"app": "b"}, Network: "one/other", IP: netip.MustParseAddr("10.0.1.2")},
	}
	namespaces := map[string]map[string]string{"one": {"team": "x"}, "two": {"team": "y"}}
	app := func(a string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{"app": a}}
	}
	team := func(tm string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{"team": tm}}
	}
	port := func(p intstr.IntOrString, proto corev1.Protocol) networkingv1.NetworkPolicyPort {
		return networkingv1.NetworkPolicyPort{Port: &p, Protocol: &proto}
	}
	policy := func(spec networkingv1.NetworkPolicySpec) evalPolicy {
		return evalPolicy{Namespace: "one", Name: "p", For: []string{"one/net"}, Spec: spec}
	}
	type cell struct {
		from, to string
		protocol corev1.Protocol
		port     int32
		want     bool
	}
	for _, tc := range []struct {
		name     string
		policies []evalPolicy
		cells    []cell
	}{
		{"no policy allows all on a network, nothing across", nil, []cell{
			{"a", "b", tcp, 1, true}, {"b", "a", udp, 53, true}, {"c", "a", tcp, 80, true}, {"a", "elsewhere", tcp, 80, false},
		}},
		{"default deny ingress", []evalPolicy{policy(networkingv1.NetworkPolicySpec{PodSelector: *app("b")})}, []cell{
			{"a", "b", tcp, 8080, false}, {"b", "a", tcp, 80, true}, {"c", "b", udp, 9, false},
		}},
		{"a policy of another network governs nothing here", []evalPolicy{{Namespace: "one", For: []string{"one/other"},
			Spec: networkingv1.NetworkPolicySpec{PodSelector: *app("b")}}}, []cell{
			{"a", "b", tcp, 8080, true},
		}},
		{"empty podSelector selects the namespace only", []evalPolicy{policy(networkingv1.NetworkPolicySpec{})}, []cell{
			{"c", "a", tcp, 80, false}, {"c", "b", tcp, 80, false}, {"a", "c", tcp, 80, true},
		}},
		{"podSelector alone is the policy's namespace", []evalPolicy{policy(networkingv1.NetworkPolicySpec{PodSelector: *app("b"),
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{PodSelector: app("a")}}}}})}, []cell{
			{"a", "b", tcp, 1, true}, {"c", "b", tcp, 1, false},
		}},
		{"namespaceSelector alone is every pod of those namespaces", []evalPolicy{policy(networkingv1.NetworkPolicySpec{PodSelector: *app("b"),
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: team("y")}}}}})}, []cell{
			{"a", "b", tcp, 1, false}, {"c", "b", udp, 1, true},
		}},
		{"both selectors together are their conjunction", []evalPolicy{policy(networkingv1.NetworkPolicySpec{PodSelector: *app("b"),
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: team("x"), PodSelector: app("a")}}}}})}, []cell{
			{"a", "b", tcp, 1, true}, {"c", "b", tcp, 1, false},
		}},
		{"two peers are their union", []evalPolicy{policy(networkingv1.NetworkPolicySpec{PodSelector: *app("b"),
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: team("x")}, {PodSelector: app("a"), NamespaceSelector: team("y")}}}}})}, []cell{
			{"a", "b", tcp, 1, true}, {"c", "b", tcp, 1, true},
		}},
		{"ipBlock with except", []evalPolicy{policy(networkingv1.NetworkPolicySpec{PodSelector: *app("b"),
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/24", Except: []string{"10.0.0.3/32"}}}}}}})}, []cell{
			{"a", "b", tcp, 1, true}, {"c", "b", tcp, 1, false},
		}},
		{"ports: number, protocol defaulting to TCP, range", []evalPolicy{policy(networkingv1.NetworkPolicySpec{PodSelector: *app("b"),
			Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{
				{Port: new(intstr.FromInt32(8080))},
				func() networkingv1.NetworkPolicyPort {
					p := port(intstr.FromInt32(9000), udp)
					p.EndPort = new(int32(9010))
					return p
				}(),
			}}}})}, []cell{
			{"a", "b", tcp, 8080, true}, {"a", "b", udp, 8080, false}, {"a", "b", udp, 9000, true}, {"a", "b", udp, 9010, true},
			{"a", "b", udp, 9011, false}, {"a", "b", tcp, 9005, false},
		}},
		{"a protocol without a port is every port of it", []evalPolicy{policy(networkingv1.NetworkPolicySpec{PodSelector: *app("b"),
			Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp}}}}})}, []cell{
			{"a", "b", udp, 1, true}, {"a", "b", tcp, 1, false},
		}},
		{"an ingress named port is the selected pod's", []evalPolicy{policy(networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{port(intstr.FromString("web"), tcp), port(intstr.FromString("dns"), udp)}}}})}, []cell{
			{"b", "a", tcp, 80, true}, {"a", "b", tcp, 8080, true}, {"a", "b", tcp, 80, false},
			{"b", "a", udp, 53, true}, {"b", "a", tcp, 53, false}, {"b", "a", udp, 80, false},
		}},
		{"an egress named port is the destination's", []evalPolicy{policy(networkingv1.NetworkPolicySpec{PodSelector: *app("a"), PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress: []networkingv1.NetworkPolicyEgressRule{{Ports: []networkingv1.NetworkPolicyPort{port(intstr.FromString("web"), tcp)}}}})}, []cell{
			{"a", "b", tcp, 8080, true}, {"a", "b", tcp, 80, false}, {"a", "c", tcp, 80, false}, {"b", "a", tcp, 1, true},
		}},
		{"egress rules alone imply Egress, and Ingress too", []evalPolicy{policy(networkingv1.NetworkPolicySpec{PodSelector: *app("a"),
			Egress: []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{PodSelector: app("b")}}}}})}, []cell{
			{"a", "b", tcp, 1, true}, {"a", "c", tcp, 1, false}, {"b", "a", tcp, 1, false},
		}},
		{"Egress alone leaves ingress open", []evalPolicy{policy(networkingv1.NetworkPolicySpec{PodSelector: *app("a"),
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}})}, []cell{
			{"a", "b", tcp, 1, false}, {"b", "a", tcp, 1, true},
		}},
		{"rules of a type the policy does not isolate are ignored", []evalPolicy{policy(networkingv1.NetworkPolicySpec{PodSelector: *app("a"),
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Egress:      []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{PodSelector: app("nobody")}}}}})}, []cell{
			{"a", "b", tcp, 1, true}, {"b", "a", tcp, 1, false},
		}},
		{"policies add up; both ends must allow", []evalPolicy{
			policy(networkingv1.NetworkPolicySpec{PodSelector: *app("b"),
				Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{port(intstr.FromInt32(1), tcp)}}}}),
			policy(networkingv1.NetworkPolicySpec{PodSelector: *app("b"),
				Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{port(intstr.FromInt32(2), tcp)}}}}),
			policy(networkingv1.NetworkPolicySpec{PodSelector: *app("a"), PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
				Egress: []networkingv1.NetworkPolicyEgressRule{{Ports: []networkingv1.NetworkPolicyPort{port(intstr.FromInt32(2), tcp), port(intstr.FromInt32(3), tcp)}}}}),
		}, []cell{
			{"c", "b", tcp, 1, true}, {"c", "b", tcp, 2, true}, {"c", "b", tcp, 3, false},
			{"a", "b", tcp, 1, false}, {"a", "b", tcp, 2, true}, {"a", "b", tcp, 3, false},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &policyWorld{Namespaces: namespaces, Pods: pods, Policies: tc.policies}
			byName := map[string]*evalPod{}
			for i := range pods {
				byName[pods[i].Name] = &pods[i]
			}
			for _, c := range tc.cells {
				if got := w.allowed(byName[c.from], byName[c.to], c.protocol, c.port); got != c.want {
					t.Errorf("%s>%s %s/%d: got %s, want %s", c.from, c.to, c.protocol, c.port, verdict(got), verdict(c.want))
				}
			}
		})
	}
}
