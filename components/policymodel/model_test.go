package policymodel

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/kos-sdn/kos/components/apis/multinetworkpolicy/v1beta1"
	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/fabric"
	ovspolicy "github.com/kos-sdn/kos/components/fabric/ovs/policy"
)

// pipeline is where the OVS fabric's policy compiler puts its flows; the
// tests compile every model with it, as an agent's SetPolicy would.
var pipeline = ovspolicy.Pipeline{Forward: 1, State: 2, Egress: 3, Ingress: 4, Cookie: 0x6b8000070000000}

// The cluster of the tests. Namespace a has two KOS networks, blue (VNI 7,
// 10.0.0.0/24) and red (VNI 8, 10.1.0.0/24), and a macvlan definition;
// namespace b has its own KOS network, green (VNI 9). Pods, on nodes n1-n3:
//
//	a/web1   app=web     n1  blue 10.0.0.11, red 10.1.0.11  http=TCP/8080
//	a/web2   app=web     n2  blue 10.0.0.12                 http=TCP/9090, dns=UDP/53
//	a/client role=client n1  blue 10.0.0.21 (red: not addressed yet)
//	a/db     app=db      n3  blue 10.0.0.31
//	a/done   app=web     n3  blue 10.0.0.41, but Succeeded
//	b/other  role=client n2  green 10.2.0.5
//
// and a plain attachment (no pod's) on blue at 10.0.0.99 on n1.
func cluster() Input {
	ns := func(name string) *corev1.Namespace {
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"ns": name}}}
	}
	nad := func(namespace, name, config string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
			"metadata": map[string]any{"namespace": namespace, "name": name},
			"spec":     map[string]any{"config": config},
		}}
	}
	subnet := func(namespace, name string, vni uint32) *v1alpha1.Subnet {
		return &v1alpha1.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}, Spec: v1alpha1.SubnetSpec{VNI: vni}}
	}
	pod := func(namespace, name, node string, labels map[string]string, ports ...corev1.ContainerPort) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: types.UID("uid-" + name), Labels: labels},
			Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Ports: ports}}},
			Status:     corev1.PodStatus{Phase: corev1.PodRunning},
		}
	}
	att := func(namespace, pod, subnet, node, ipv4 string, vni uint32) *v1alpha1.NetworkAttachment {
		a := &v1alpha1.NetworkAttachment{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: pod + "-" + subnet},
			Spec:       v1alpha1.NetworkAttachmentSpec{Node: node, Subnet: subnet},
			Status:     v1alpha1.NetworkAttachmentStatus{IPv4: ipv4, AddressVNI: vni},
		}
		if pod != "" {
			a.Labels = map[string]string{v1alpha1.PodUIDLabel: "uid-" + pod}
		}
		return a
	}
	done := pod("a", "done", "n3", map[string]string{"app": "web"})
	done.Status.Phase = corev1.PodSucceeded
	return Input{
		Namespaces: []*corev1.Namespace{ns("a"), ns("b")},
		Definitions: []*unstructured.Unstructured{
			nad("a", "blue", `{"cniVersion":"1.0.0","type":"kos","subnet":"blue"}`),
			nad("a", "red", `{"cniVersion":"1.0.0","type":"kos","subnet":"red"}`),
			nad("a", "mac", `{"cniVersion":"1.0.0","type":"macvlan"}`),
			nad("a", "broken", `{"cniVersion":"1.0.0","type":"kos"}`),
			nad("b", "green", `{"cniVersion":"1.0.0","type":"kos","subnet":"green"}`),
		},
		Subnets: []*v1alpha1.Subnet{subnet("a", "blue", 7), subnet("a", "red", 8), subnet("b", "green", 9)},
		Pods: []*corev1.Pod{
			pod("a", "web1", "n1", map[string]string{"app": "web"}, corev1.ContainerPort{Name: "http", ContainerPort: 8080}),
			pod("a", "web2", "n2", map[string]string{"app": "web"},
				corev1.ContainerPort{Name: "http", ContainerPort: 9090, Protocol: corev1.ProtocolTCP},
				corev1.ContainerPort{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP}),
			pod("a", "client", "n1", map[string]string{"role": "client"}),
			pod("a", "db", "n3", map[string]string{"app": "db"}),
			done,
			pod("b", "other", "n2", map[string]string{"role": "client"}),
		},
		Attachments: []*v1alpha1.NetworkAttachment{
			att("a", "web1", "blue", "n1", "10.0.0.11", 7),
			att("a", "web1", "red", "n1", "10.1.0.11", 8),
			att("a", "web2", "blue", "n2", "10.0.0.12", 7),
			att("a", "client", "blue", "n1", "10.0.0.21", 7),
			att("a", "client", "red", "n1", "", 0),
			att("a", "db", "blue", "n3", "10.0.0.31", 7),
			att("a", "done", "blue", "n3", "10.0.0.41", 7),
			att("b", "other", "green", "n2", "10.2.0.5", 9),
			att("a", "", "blue", "n1", "10.0.0.99", 7),
		},
	}
}

func policy(name, policyFor string, spec networkingv1.NetworkPolicySpec) *v1beta1.MultiNetworkPolicy {
	p := &v1beta1.MultiNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: name}, Spec: spec}
	if policyFor != "-" {
		p.Annotations = map[string]string{v1beta1.PolicyForAnnotation: policyFor}
	}
	return p
}

func sel(kv ...string) *metav1.LabelSelector {
	s := &metav1.LabelSelector{MatchLabels: map[string]string{}}
	for i := 0; i+1 < len(kv); i += 2 {
		s.MatchLabels[kv[i]] = kv[i+1]
	}
	return s
}

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

func hosts(s ...string) []fabric.Peer {
	var out []fabric.Peer
	for _, a := range s {
		out = append(out, fabric.Peer{Prefix: netip.PrefixFrom(netip.MustParseAddr(a), 32)})
	}
	return out
}

func block(cidr string, except ...string) fabric.Peer {
	p := fabric.Peer{Prefix: netip.MustParsePrefix(cidr)}
	for _, e := range except {
		p.Except = append(p.Except, netip.MustParsePrefix(e))
	}
	return p
}

func port(proto corev1.Protocol, p intstr.IntOrString, end ...int32) networkingv1.NetworkPolicyPort {
	np := networkingv1.NetworkPolicyPort{Protocol: ptr.To(proto), Port: &p}
	if len(end) > 0 {
		np.EndPort = ptr.To(end[0])
	}
	return np
}

var (
	ingress = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	egress  = []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
	tcp80   = fabric.Port{Protocol: fabric.ProtocolTCP, Port: 80}
	from    = func(peers ...networkingv1.NetworkPolicyPeer) []networkingv1.NetworkPolicyIngressRule {
		return []networkingv1.NetworkPolicyIngressRule{{From: peers}}
	}
	everyone = []fabric.Peer{block("0.0.0.0/0")}
)

// blue returns the model of network 7 (blue) alone, from node to policies.
func blue(nodes map[string][]fabric.Policy) map[uint32]map[string]fabric.NetworkPolicy {
	out := map[string]fabric.NetworkPolicy{}
	for node, ps := range nodes {
		out[node] = fabric.NetworkPolicy{VNI: 7, Policies: ps}
	}
	return map[uint32]map[string]fabric.NetworkPolicy{7: out}
}

func TestBuild(t *testing.T) {
	denyAll := func(name string, selected ...string) fabric.Policy {
		return fabric.Policy{Name: "a/" + name, Selected: addrs(selected...), Ingress: true}
	}
	for _, tc := range []struct {
		name         string
		policies     []*v1beta1.MultiNetworkPolicy
		wantNetworks map[uint32]map[string]fabric.NetworkPolicy
		wantReports  map[string]Report
	}{{
		name: "default deny ingress",
		policies: []*v1beta1.MultiNetworkPolicy{policy("deny", "blue", networkingv1.NetworkPolicySpec{
			PolicyTypes: ingress,
		})},
		// The plain attachment and the finished pod are never selected.
		wantNetworks: blue(map[string][]fabric.Policy{
			"n1": {denyAll("deny", "10.0.0.11", "10.0.0.21")},
			"n2": {denyAll("deny", "10.0.0.12")},
			"n3": {denyAll("deny", "10.0.0.31")},
		}),
		wantReports: map[string]Report{"a/deny": {Networks: []uint32{7}, Definitions: []string{"a/blue"}, Pods: 4}},
	}, {
		name:         "policyTypes omitted and no rules: deny ingress",
		policies:     []*v1beta1.MultiNetworkPolicy{policy("deny", "a/blue", networkingv1.NetworkPolicySpec{PodSelector: *sel("app", "db")})},
		wantNetworks: blue(map[string][]fabric.Policy{"n3": {denyAll("deny", "10.0.0.31")}}),
		wantReports:  map[string]Report{"a/deny": {Networks: []uint32{7}, Definitions: []string{"a/blue"}, Pods: 1}},
	}, {
		name: "policyTypes omitted with egress rules: both directions",
		policies: []*v1beta1.MultiNetworkPolicy{policy("p", "blue", networkingv1.NetworkPolicySpec{
			PodSelector: *sel("app", "db"),
			Egress:      []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{PodSelector: sel("app", "web")}}}},
		})},
		wantNetworks: blue(map[string][]fabric.Policy{"n3": {{
			Name: "a/p", Selected: addrs("10.0.0.31"), Ingress: true,
			Egress: true, EgressRules: []fabric.Rule{{Peers: hosts("10.0.0.11", "10.0.0.12")}},
		}}}),
		wantReports: map[string]Report{"a/p": {Networks: []uint32{7}, Definitions: []string{"a/blue"}, Pods: 1}},
	}, {
		name: "egress only: ingress rules do not count",
		policies: []*v1beta1.MultiNetworkPolicy{policy("p", "blue", networkingv1.NetworkPolicySpec{
			PodSelector: *sel("app", "db"),
			PolicyTypes: egress,
			Ingress:     from(networkingv1.NetworkPolicyPeer{PodSelector: sel()}),
		})},
		wantNetworks: blue(map[string][]fabric.Policy{"n3": {{Name: "a/p", Selected: addrs("10.0.0.31"), Egress: true}}}),
		wantReports:  map[string]Report{"a/p": {Networks: []uint32{7}, Definitions: []string{"a/blue"}, Pods: 1}},
	}, {
		name: "allow from pods on a port",
		policies: []*v1beta1.MultiNetworkPolicy{policy("web", "blue", networkingv1.NetworkPolicySpec{
			PodSelector: *sel("app", "web"),
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{PodSelector: sel("role", "client")}},
				Ports: []networkingv1.NetworkPolicyPort{{Port: ptr.To(intstr.FromInt32(80))}},
			}},
		})},
		// b/other is role=client too, but in another namespace and network.
		wantNetworks: blue(map[string][]fabric.Policy{
			"n1": {{Name: "a/web", Selected: addrs("10.0.0.11"), Ingress: true, IngressRules: []fabric.Rule{{Peers: hosts("10.0.0.21"), Ports: []fabric.Port{tcp80}}}}},
			"n2": {{Name: "a/web", Selected: addrs("10.0.0.12"), Ingress: true, IngressRules: []fabric.Rule{{Peers: hosts("10.0.0.21"), Ports: []fabric.Port{tcp80}}}}},
		}),
		wantReports: map[string]Report{"a/web": {Networks: []uint32{7}, Definitions: []string{"a/blue"}, Pods: 2}},
	}, {
		name: "allow from a namespace, every namespace, and none",
		policies: []*v1beta1.MultiNetworkPolicy{
			policy("ns-a", "blue", networkingv1.NetworkPolicySpec{PodSelector: *sel("app", "db"), Ingress: from(networkingv1.NetworkPolicyPeer{NamespaceSelector: sel("ns", "a")})}),
			policy("ns-all", "blue", networkingv1.NetworkPolicySpec{PodSelector: *sel("app", "db"), Ingress: from(networkingv1.NetworkPolicyPeer{NamespaceSelector: sel()})}),
			policy("ns-b", "blue", networkingv1.NetworkPolicySpec{PodSelector: *sel("app", "db"), Ingress: from(networkingv1.NetworkPolicyPeer{NamespaceSelector: sel("ns", "b")})}),
		},
		// The addresses are the pods' on blue only: not web1's on red,
		// not b/other's on green, not the plain attachment's.
		wantNetworks: blue(map[string][]fabric.Policy{"n3": {
			{Name: "a/ns-a", Selected: addrs("10.0.0.31"), Ingress: true, IngressRules: []fabric.Rule{{Peers: hosts("10.0.0.11", "10.0.0.12", "10.0.0.21", "10.0.0.31")}}},
			{Name: "a/ns-all", Selected: addrs("10.0.0.31"), Ingress: true, IngressRules: []fabric.Rule{{Peers: hosts("10.0.0.11", "10.0.0.12", "10.0.0.21", "10.0.0.31")}}},
			denyAll("ns-b", "10.0.0.31"),
		}}),
		wantReports: map[string]Report{
			"a/ns-a":   {Networks: []uint32{7}, Definitions: []string{"a/blue"}, Pods: 1},
			"a/ns-all": {Networks: []uint32{7}, Definitions: []string{"a/blue"}, Pods: 1},
			"a/ns-b":   {Networks: []uint32{7}, Definitions: []string{"a/blue"}, Pods: 1},
		},
	}, {
		name: "pod and namespace selector in one peer: and; in two peers: or",
		policies: []*v1beta1.MultiNetworkPolicy{
			policy("and", "blue", networkingv1.NetworkPolicySpec{PodSelector: *sel("app", "db"), Ingress: from(
				networkingv1.NetworkPolicyPeer{NamespaceSelector: sel("ns", "a"), PodSelector: sel("role", "client")},
				networkingv1.NetworkPolicyPeer{NamespaceSelector: sel("ns", "b"), PodSelector: sel("app", "web")},
			)}),
			policy("or", "blue", networkingv1.NetworkPolicySpec{PodSelector: *sel("app", "db"), Ingress: from(
				networkingv1.NetworkPolicyPeer{NamespaceSelector: sel("ns", "b")},
				networkingv1.NetworkPolicyPeer{PodSelector: sel("app", "web")},
			)}),
		},
		wantNetworks: blue(map[string][]fabric.Policy{"n3": {
			{Name: "a/and", Selected: addrs("10.0.0.31"), Ingress: true, IngressRules: []fabric.Rule{{Peers: hosts("10.0.0.21")}}},
			{Name: "a/or", Selected: addrs("10.0.0.31"), Ingress: true, IngressRules: []fabric.Rule{{Peers: hosts("10.0.0.11", "10.0.0.12")}}},
		}}),
		wantReports: map[string]Report{"a/and": {Networks: []uint32{7}, Definitions: []string{"a/blue"}, Pods: 1}, "a/or": {Networks: []uint32{7}, Definitions: []string{"a/blue"}, Pods: 1}},
	}, {
		name: "ipBlock with except, and a rule without from",
		policies: []*v1beta1.MultiNetworkPolicy{policy("p", "blue", networkingv1.NetworkPolicySpec{
			PodSelector: *sel("app", "db"),
			Ingress: []networkingv1.NetworkPolicyIngressRule{
				{From: []networkingv1.NetworkPolicyPeer{
					{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/24", Except: []string{"10.0.0.16/28", "10.0.0.99/32"}}},
					{PodSelector: sel("role", "client")},
				}},
				{Ports: []networkingv1.NetworkPolicyPort{port(corev1.ProtocolUDP, intstr.FromInt32(53))}},
			},
		})},
		wantNetworks: blue(map[string][]fabric.Policy{"n3": {{
			Name: "a/p", Selected: addrs("10.0.0.31"), Ingress: true, IngressRules: []fabric.Rule{
				{Peers: append([]fabric.Peer{block("10.0.0.0/24", "10.0.0.16/28", "10.0.0.99/32")}, hosts("10.0.0.21")...)},
				{Peers: everyone, Ports: []fabric.Port{{Protocol: fabric.ProtocolUDP, Port: 53}}},
			},
		}}}),
		wantReports: map[string]Report{"a/p": {Networks: []uint32{7}, Definitions: []string{"a/blue"}, Pods: 1}},
	}, {
		name: "named port resolved per selected pod",
		policies: []*v1beta1.MultiNetworkPolicy{policy("http", "blue", networkingv1.NetworkPolicySpec{
			Ingress: []networkingv1.NetworkPolicyIngressRule{
				{Ports: []networkingv1.NetworkPolicyPort{port(corev1.ProtocolTCP, intstr.FromString("http")), port(corev1.ProtocolTCP, intstr.FromInt32(80))}},
				{Ports: []networkingv1.NetworkPolicyPort{port(corev1.ProtocolTCP, intstr.FromString("http"))}, From: []networkingv1.NetworkPolicyPeer{{PodSelector: sel("role", "client")}}},
			},
		})},
		// Each pod gets its own number; a pod without the name gets the
		// rule's numeric ports, or no rule when it had only the name.
		wantNetworks: blue(map[string][]fabric.Policy{
			"n1": {
				{Name: "a/http", Selected: addrs("10.0.0.11"), Ingress: true, IngressRules: []fabric.Rule{
					{Peers: everyone, Ports: []fabric.Port{tcp80, {Protocol: fabric.ProtocolTCP, Port: 8080}}},
					{Peers: hosts("10.0.0.21"), Ports: []fabric.Port{{Protocol: fabric.ProtocolTCP, Port: 8080}}},
				}},
				{Name: "a/http", Selected: addrs("10.0.0.21"), Ingress: true, IngressRules: []fabric.Rule{{Peers: everyone, Ports: []fabric.Port{tcp80}}}},
			},
			"n2": {{Name: "a/http", Selected: addrs("10.0.0.12"), Ingress: true, IngressRules: []fabric.Rule{
				{Peers: everyone, Ports: []fabric.Port{tcp80, {Protocol: fabric.ProtocolTCP, Port: 9090}}},
				{Peers: hosts("10.0.0.21"), Ports: []fabric.Port{{Protocol: fabric.ProtocolTCP, Port: 9090}}},
			}}},
			"n3": {{Name: "a/http", Selected: addrs("10.0.0.31"), Ingress: true, IngressRules: []fabric.Rule{{Peers: everyone, Ports: []fabric.Port{tcp80}}}}},
		}),
		wantReports: map[string]Report{"a/http": {Networks: []uint32{7}, Definitions: []string{"a/blue"}, Pods: 4}},
	}, {
		name: "named port of the wrong protocol does not resolve",
		policies: []*v1beta1.MultiNetworkPolicy{policy("p", "blue", networkingv1.NetworkPolicySpec{
			PodSelector: *sel("app", "web"),
			Ingress:     []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{port(corev1.ProtocolUDP, intstr.FromString("http"))}}},
		})},
		wantNetworks: blue(map[string][]fabric.Policy{"n1": {denyAll("p", "10.0.0.11")}, "n2": {denyAll("p", "10.0.0.12")}}),
		wantReports:  map[string]Report{"a/p": {Networks: []uint32{7}, Definitions: []string{"a/blue"}, Pods: 2}},
	}, {
		name: "port ranges and protocols",
		policies: []*v1beta1.MultiNetworkPolicy{policy("p", "blue", networkingv1.NetworkPolicySpec{
			PodSelector: *sel("app", "db"),
			Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{
				port(corev1.ProtocolTCP, intstr.FromInt32(1000), 1100),
				port(corev1.ProtocolUDP, intstr.FromInt32(5000), 5000),
				port(corev1.ProtocolSCTP, intstr.FromInt32(9)),
				{Protocol: ptr.To(corev1.ProtocolUDP)},
			}}},
		})},
		wantNetworks: blue(map[string][]fabric.Policy{"n3": {{Name: "a/p", Selected: addrs("10.0.0.31"), Ingress: true, IngressRules: []fabric.Rule{{
			Peers: everyone,
			Ports: []fabric.Port{
				{Protocol: fabric.ProtocolTCP, Port: 1000, EndPort: 1100},
				{Protocol: fabric.ProtocolUDP, Port: 5000},
				{Protocol: fabric.ProtocolSCTP, Port: 9},
				{Protocol: fabric.ProtocolUDP},
			},
		}}}}}),
		wantReports: map[string]Report{"a/p": {Networks: []uint32{7}, Definitions: []string{"a/blue"}, Pods: 1}},
	}, {
		name: "egress to pods by named port, to a block by name, and everywhere by number",
		policies: []*v1beta1.MultiNetworkPolicy{policy("out", "blue", networkingv1.NetworkPolicySpec{
			PodSelector: *sel("role", "client"),
			PolicyTypes: egress,
			Egress: []networkingv1.NetworkPolicyEgressRule{
				{To: []networkingv1.NetworkPolicyPeer{{PodSelector: sel("app", "web")}}, Ports: []networkingv1.NetworkPolicyPort{port(corev1.ProtocolTCP, intstr.FromString("http"))}},
				{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/28"}}}, Ports: []networkingv1.NetworkPolicyPort{port(corev1.ProtocolUDP, intstr.FromString("dns")), port(corev1.ProtocolTCP, intstr.FromInt32(80))}},
				{Ports: []networkingv1.NetworkPolicyPort{port(corev1.ProtocolUDP, intstr.FromInt32(53))}},
			},
		})},
		wantNetworks: blue(map[string][]fabric.Policy{"n1": {{Name: "a/out", Selected: addrs("10.0.0.21"), Egress: true, EgressRules: []fabric.Rule{
			{Peers: hosts("10.0.0.11"), Ports: []fabric.Port{{Protocol: fabric.ProtocolTCP, Port: 8080}}},
			{Peers: hosts("10.0.0.12"), Ports: []fabric.Port{{Protocol: fabric.ProtocolTCP, Port: 9090}}},
			{Peers: []fabric.Peer{block("10.0.0.0/28")}, Ports: []fabric.Port{tcp80}},
			{Peers: hosts("10.0.0.12"), Ports: []fabric.Port{{Protocol: fabric.ProtocolUDP, Port: 53}}},
			{Peers: everyone, Ports: []fabric.Port{{Protocol: fabric.ProtocolUDP, Port: 53}}},
		}}}}),
		wantReports: map[string]Report{"a/out": {Networks: []uint32{7}, Definitions: []string{"a/blue"}, Pods: 1}},
	}, {
		name: "egress deny all",
		policies: []*v1beta1.MultiNetworkPolicy{policy("p", "blue", networkingv1.NetworkPolicySpec{
			PodSelector: *sel("role", "client"), PolicyTypes: egress,
		})},
		wantNetworks: blue(map[string][]fabric.Policy{"n1": {{Name: "a/p", Selected: addrs("10.0.0.21"), Egress: true}}}),
		wantReports:  map[string]Report{"a/p": {Networks: []uint32{7}, Definitions: []string{"a/blue"}, Pods: 1}},
	}, {
		name: "multiple policies: each selected pod's policies, by name",
		policies: []*v1beta1.MultiNetworkPolicy{
			policy("z-web", "blue", networkingv1.NetworkPolicySpec{PodSelector: *sel("app", "web"), Ingress: from(networkingv1.NetworkPolicyPeer{PodSelector: sel("role", "client")})}),
			policy("a-all", "blue", networkingv1.NetworkPolicySpec{Ingress: from(networkingv1.NetworkPolicyPeer{PodSelector: sel("app", "db")})}),
		},
		wantNetworks: blue(map[string][]fabric.Policy{
			"n1": {
				{Name: "a/a-all", Selected: addrs("10.0.0.11", "10.0.0.21"), Ingress: true, IngressRules: []fabric.Rule{{Peers: hosts("10.0.0.31")}}},
				{Name: "a/z-web", Selected: addrs("10.0.0.11"), Ingress: true, IngressRules: []fabric.Rule{{Peers: hosts("10.0.0.21")}}},
			},
			"n2": {
				{Name: "a/a-all", Selected: addrs("10.0.0.12"), Ingress: true, IngressRules: []fabric.Rule{{Peers: hosts("10.0.0.31")}}},
				{Name: "a/z-web", Selected: addrs("10.0.0.12"), Ingress: true, IngressRules: []fabric.Rule{{Peers: hosts("10.0.0.21")}}},
			},
			"n3": {{Name: "a/a-all", Selected: addrs("10.0.0.31"), Ingress: true, IngressRules: []fabric.Rule{{Peers: hosts("10.0.0.31")}}}},
		}),
		wantReports: map[string]Report{"a/z-web": {Networks: []uint32{7}, Definitions: []string{"a/blue"}, Pods: 2}, "a/a-all": {Networks: []uint32{7}, Definitions: []string{"a/blue"}, Pods: 4}},
	}, {
		name: "two networks: each its own addresses",
		policies: []*v1beta1.MultiNetworkPolicy{policy("p", "blue, a/red", networkingv1.NetworkPolicySpec{
			PodSelector: *sel("app", "web"), Ingress: from(networkingv1.NetworkPolicyPeer{PodSelector: sel()}),
		})},
		// client has no address on red yet: it is no peer there.
		wantNetworks: map[uint32]map[string]fabric.NetworkPolicy{
			7: {
				"n1": {VNI: 7, Policies: []fabric.Policy{{Name: "a/p", Selected: addrs("10.0.0.11"), Ingress: true, IngressRules: []fabric.Rule{{Peers: hosts("10.0.0.11", "10.0.0.12", "10.0.0.21", "10.0.0.31")}}}}},
				"n2": {VNI: 7, Policies: []fabric.Policy{{Name: "a/p", Selected: addrs("10.0.0.12"), Ingress: true, IngressRules: []fabric.Rule{{Peers: hosts("10.0.0.11", "10.0.0.12", "10.0.0.21", "10.0.0.31")}}}}},
			},
			8: {"n1": {VNI: 8, Policies: []fabric.Policy{{Name: "a/p", Selected: addrs("10.1.0.11"), Ingress: true, IngressRules: []fabric.Rule{{Peers: hosts("10.1.0.11")}}}}}},
		},
		wantReports: map[string]Report{"a/p": {Networks: []uint32{7, 8}, Definitions: []string{"a/blue", "a/red"}, Pods: 2}},
	}, {
		name: "definitions KOS does not provide, or cannot read",
		policies: []*v1beta1.MultiNetworkPolicy{
			policy("mac", "mac", networkingv1.NetworkPolicySpec{}),
			policy("none", "-", networkingv1.NetworkPolicySpec{}),
			policy("missing", "nope,b/green,broken,Bad/x", networkingv1.NetworkPolicySpec{}),
		},
		wantNetworks: map[uint32]map[string]fabric.NetworkPolicy{},
		wantReports: map[string]Report{
			"a/mac":  {},
			"a/none": {Problems: []string{"The policy has no k8s.v1.cni.cncf.io/policy-for annotation: it governs no network."}},
			"a/missing": {Problems: []string{
				`Annotation k8s.v1.cni.cncf.io/policy-for: entry "Bad/x": namespace "Bad": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?').`,
				"NetworkAttachmentDefinition a/nope not found.",
				"NetworkAttachmentDefinition b/green is in another namespace: the KOS interfaces on it are its namespace's pods', which this policy cannot select.",
				`NetworkAttachmentDefinition a/broken: the kos configuration has no "subnet": it must name a KOS Subnet in the NetworkAttachmentDefinition's namespace.`,
			}},
		},
	}, {
		name: "what KOS cannot honour allows less, and is reported",
		policies: []*v1beta1.MultiNetworkPolicy{policy("p", "blue", networkingv1.NetworkPolicySpec{
			PodSelector: *sel("app", "db"),
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, "Sideways"},
			Ingress: []networkingv1.NetworkPolicyIngressRule{
				{From: []networkingv1.NetworkPolicyPeer{
					{IPBlock: &networkingv1.IPBlock{CIDR: "fd00::/64"}},
					{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/24", Except: []string{"10.9.0.0/24"}}},
					{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/24"}, PodSelector: sel()},
					{},
					{PodSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "x", Operator: "Near"}}}},
				}},
				{Ports: []networkingv1.NetworkPolicyPort{
					{Protocol: ptr.To[corev1.Protocol]("ICMP")},
					port(corev1.ProtocolTCP, intstr.FromString("http"), 90),
					port(corev1.ProtocolTCP, intstr.FromInt32(100), 99),
					port(corev1.ProtocolTCP, intstr.FromInt32(0)),
				}},
				{Ports: []networkingv1.NetworkPolicyPort{port(corev1.ProtocolTCP, intstr.FromInt32(22)), {Protocol: ptr.To[corev1.Protocol]("ICMP")}}},
			},
		})},
		// The first two rules allow nothing; the third what it can.
		wantNetworks: blue(map[string][]fabric.Policy{"n3": {{Name: "a/p", Selected: addrs("10.0.0.31"), Ingress: true, IngressRules: []fabric.Rule{
			{Peers: everyone, Ports: []fabric.Port{{Protocol: fabric.ProtocolTCP, Port: 22}}},
		}}}}),
		wantReports: map[string]Report{"a/p": {Networks: []uint32{7}, Definitions: []string{"a/blue"}, Pods: 1, Problems: []string{
			`Policy type "Sideways" is neither Ingress nor Egress.`,
			"spec.ingress[0].from[0].ipBlock: cidr fd00::/64 is not IPv4, and KOS networks are IPv4 only; the peer allows nothing.",
			`spec.ingress[0].from[1].ipBlock: except "10.9.0.0/24" is not an IPv4 CIDR block within 10.0.0.0/24; the peer allows nothing.`,
			"spec.ingress[0].from[2]: an ipBlock cannot go with selectors; the peer allows nothing.",
			"spec.ingress[0].from[3]: the peer has neither selectors nor an ipBlock; it allows nothing.",
			`spec.ingress[0].from[4].podSelector: "Near" is not a valid label selector operator; the peer allows nothing.`,
			`spec.ingress[1].ports[0]: protocol "ICMP" is not TCP, UDP or SCTP; the port allows nothing.`,
			`spec.ingress[1].ports[1]: endPort needs a numeric port, not "http"; the port allows nothing.`,
			"spec.ingress[1].ports[2]: endPort 99 is not in 100-65535; the port allows nothing.",
			"spec.ingress[1].ports[3]: port 0 is not in 1-65535; the port allows nothing.",
			`spec.ingress[2].ports[1]: protocol "ICMP" is not TCP, UDP or SCTP; the port allows nothing.`,
		}}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			in := cluster()
			in.Policies = tc.policies
			got := Build(in)
			if diff := cmp.Diff(got.Networks, tc.wantNetworks, cmpopts.EquateComparable(netip.Addr{}, netip.Prefix{}), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Build networks (-got +want):\n%s", diff)
			}
			if diff := cmp.Diff(got.Reports, tc.wantReports, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Build reports (-got +want):\n%s", diff)
			}
			for vni, nodes := range got.Networks {
				for node, np := range nodes {
					if _, err := ovspolicy.Compile(np, pipeline); err != nil {
						t.Errorf("compiling network %d on node %s: %v", vni, node, err)
					}
				}
			}
		})
	}
}
