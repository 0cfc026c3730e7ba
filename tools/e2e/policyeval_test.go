package e2e

import (
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// This file is the policy truth table's oracle: networking/v1's
// NetworkPolicy semantics read straight from the specs, as the Kubernetes
// network-policy e2e and cyclonus do, written apart from
// kos-controller-manager's compiler (components/policymodel) so that the
// two can disagree. It knows of KOS only that a policy governs the pods on
// the networks its policy-for names, and that a peer is a pod on the
// cell's network.

// evalPod is a pod of the truth table with its one KOS interface.
type evalPod struct {
	Namespace, Name string
	Labels          map[string]string
	// Network is the definition the interface is on, "namespace/name".
	Network string
	IP      netip.Addr
	Ports   []corev1.ContainerPort
}

// evalPolicy is a MultiNetworkPolicy: its spec, and the definitions its
// policy-for annotation names ("namespace/name").
type evalPolicy struct {
	Namespace, Name string
	For             []string
	Spec            networkingv1.NetworkPolicySpec
}

// policyWorld is everything the verdicts depend on.
type policyWorld struct {
	// Namespaces are the namespaces' labels, by name.
	Namespaces map[string]map[string]string
	Pods       []evalPod
	Policies   []evalPolicy
}

// allowed says whether networking/v1 lets from open a connection (or send
// a datagram that is answered) to to's port over protocol: from's egress
// and to's ingress must both allow it. Pods on different networks do not
// reach each other at all.
func (w *policyWorld) allowed(from, to *evalPod, protocol corev1.Protocol, port int32) bool {
	if from.Network != to.Network {
		return false
	}
	return w.direction(networkingv1.PolicyTypeEgress, from, to, protocol, port) &&
		w.direction(networkingv1.PolicyTypeIngress, to, from, protocol, port)
}

// direction says whether the policies that isolate self in the direction
// let it talk to peer (to peer for egress, from peer for ingress); the
// port is always the destination's, whose names resolve the named ports.
func (w *policyWorld) direction(dir networkingv1.PolicyType, self, peer *evalPod, protocol corev1.Protocol, port int32) bool {
	dst := self
	if dir == networkingv1.PolicyTypeEgress {
		dst = peer
	}
	isolated := false
	for i := range w.Policies {
		pol := &w.Policies[i]
		if !w.selects(pol, self) || !slices.Contains(policyTypes(pol.Spec), dir) {
			continue
		}
		isolated = true
		if dir == networkingv1.PolicyTypeIngress {
			for _, r := range pol.Spec.Ingress {
				if w.peersMatch(pol, r.From, peer) && portsMatch(r.Ports, dst, protocol, port) {
					return true
				}
			}
			continue
		}
		for _, r := range pol.Spec.Egress {
			if w.peersMatch(pol, r.To, peer) && portsMatch(r.Ports, dst, protocol, port) {
				return true
			}
		}
	}
	return !isolated
}

// selects says whether the policy governs the pod: its namespace, its
// podSelector, and one of its networks.
func (w *policyWorld) selects(pol *evalPolicy, pod *evalPod) bool {
	return pod.Namespace == pol.Namespace && slices.Contains(pol.For, pod.Network) &&
		selectorMatches(&pol.Spec.PodSelector, pod.Labels)
}

// policyTypes is the spec's policyTypes, or what networking/v1 makes of
// none: Ingress, and Egress when there are egress rules.
func policyTypes(spec networkingv1.NetworkPolicySpec) []networkingv1.PolicyType {
	if len(spec.PolicyTypes) > 0 {
		return spec.PolicyTypes
	}
	types := []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	if len(spec.Egress) > 0 {
		types = append(types, networkingv1.PolicyTypeEgress)
	}
	return types
}

// peersMatch says whether a rule's from or to admits the pod: no peers
// admit everyone; an ipBlock admits the addresses in its CIDR but its
// excepts; a podSelector alone selects in the policy's namespace, a
// namespaceSelector alone every pod of the namespaces it selects, both
// together the pods both select.
func (w *policyWorld) peersMatch(pol *evalPolicy, peers []networkingv1.NetworkPolicyPeer, pod *evalPod) bool {
	if len(peers) == 0 {
		return true
	}
	for _, p := range peers {
		switch {
		case p.IPBlock != nil:
			if inBlock(p.IPBlock, pod.IP) {
				return true
			}
		case p.PodSelector == nil && p.NamespaceSelector == nil:
			// Invalid: admits nobody.
		default:
			nsOK := pod.Namespace == pol.Namespace
			if p.NamespaceSelector != nil {
				nsOK = selectorMatches(p.NamespaceSelector, w.Namespaces[pod.Namespace])
			}
			if nsOK && (p.PodSelector == nil || selectorMatches(p.PodSelector, pod.Labels)) {
				return true
			}
		}
	}
	return false
}

// inBlock says whether a is in the block's CIDR and none of its excepts.
func inBlock(b *networkingv1.IPBlock, a netip.Addr) bool {
	cidr, err := netip.ParsePrefix(b.CIDR)
	if err != nil || !cidr.Contains(a) {
		return false
	}
	for _, e := range b.Except {
		if ex, err := netip.ParsePrefix(e); err == nil && ex.Contains(a) {
			return false
		}
	}
	return true
}

// portsMatch says whether a rule's ports admit the destination's port
// over protocol: no ports admit every port; a port's protocol defaults to
// TCP; no number admits every port of the protocol; a number with endPort
// a range; a name the destination's container port of that name and
// protocol.
func portsMatch(ports []networkingv1.NetworkPolicyPort, dst *evalPod, protocol corev1.Protocol, port int32) bool {
	if len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		proto := corev1.ProtocolTCP
		if p.Protocol != nil {
			proto = *p.Protocol
		}
		if proto != protocol {
			continue
		}
		switch {
		case p.Port == nil:
			return true
		case p.Port.Type == intstr.String:
			for _, cp := range dst.Ports {
				cpProto := cp.Protocol
				if cpProto == "" {
					cpProto = corev1.ProtocolTCP
				}
				if cp.Name == p.Port.StrVal && cpProto == protocol && cp.ContainerPort == port {
					return true
				}
			}
		case p.EndPort != nil:
			if p.Port.IntVal <= port && port <= *p.EndPort {
				return true
			}
		case p.Port.IntVal == port:
			return true
		}
	}
	return false
}

// selectorMatches is metav1's label selector; one that does not parse
// matches nothing.
func selectorMatches(s *metav1.LabelSelector, l map[string]string) bool {
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		return false
	}
	return sel.Matches(labels.Set(l))
}
