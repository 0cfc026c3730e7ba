// Package policymodel translates MultiNetworkPolicies into what each node's
// switch enforces: for every KOS network (VNI) and node, the
// fabric.NetworkPolicy that the node's agent programs with SetPolicy. It is
// pure: Build reads the policies, pods, namespaces, definitions, subnets
// and attachments it is given and nothing else, so that the controller and
// the tests (and, should agents compute their own models, the agents) get
// the same answer from the same objects.
//
// The semantics are networking/v1's, with a pod's addresses on the
// policy's networks in place of its cluster address: a policy governs the
// KOS interfaces its podSelector selects on the NetworkAttachmentDefinitions
// its policy-for annotation names, and its peers' podSelector and
// namespaceSelector stand for those pods' addresses on the same
// definitions. Whatever KOS cannot honour is reported in the policy's
// Report, never dropped silently; where it cannot honour part of a rule, it
// allows less, never more.
package policymodel

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kos-sdn/kos/components/apis/multinetworkpolicy/v1beta1"
	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/controllers/podnetwork"
	"github.com/kos-sdn/kos/components/fabric"
)

// Input is the cluster state a model is built from, as listers return it.
// Build does not modify it.
type Input struct {
	Policies   []*v1beta1.MultiNetworkPolicy
	Namespaces []*corev1.Namespace
	Pods       []*corev1.Pod
	// Definitions are the NetworkAttachmentDefinitions, as the dynamic
	// client returns them.
	Definitions []*unstructured.Unstructured
	Subnets     []*v1alpha1.Subnet
	Attachments []*v1alpha1.NetworkAttachment
}

// Model is what the policies mean for the switches, and for their authors.
type Model struct {
	// Networks holds, by VNI and then by node, the policy of the network
	// that the node's agent programs. A network, or a node of a network,
	// that is absent has no policy: none of its attachments is isolated.
	Networks map[uint32]map[string]fabric.NetworkPolicy
	// Reports tell, by the policy's namespace/name, what each policy
	// applies to and what of it KOS cannot honour.
	Reports map[string]Report
}

// Report says what one MultiNetworkPolicy applies to, for its Events.
type Report struct {
	// Networks are the VNIs of the KOS networks it governs, ascending: those
	// of the KOS definitions its policy-for names. Empty when it names none,
	// and then KOS ignores it.
	Networks []uint32
	// Definitions are the KOS definitions its policy-for names that gave
	// those networks, as namespace/name, in the annotation's order.
	Definitions []string
	// Pods counts the pods it selects that have an addressed KOS interface
	// on those networks.
	Pods int
	// Problems say what of the policy KOS cannot honour, or cannot read,
	// one sentence each.
	Problems []string
}

// subnetKey names a Subnet: its namespace and name.
type subnetKey = types.NamespacedName

// member is an addressed interface of a live pod on a KOS network.
type member struct {
	pod  *corev1.Pod
	node string
	addr netip.Addr
}

// state indexes an Input for the policies' lookups.
type state struct {
	namespaceLabels map[string]labels.Set
	definitions     map[types.NamespacedName]*unstructured.Unstructured
	subnetVNIs      map[subnetKey]uint32
	// members are the live pods' addressed interfaces, by subnet: all a
	// policy's selectors can select on its networks.
	members map[subnetKey][]member
}

// Build returns the model of in's policies.
func Build(in Input) Model {
	s := index(in)
	m := Model{Networks: map[uint32]map[string]fabric.NetworkPolicy{}, Reports: map[string]Report{}}
	for _, p := range in.Policies {
		key := p.Namespace + "/" + p.Name
		policies, report := s.policy(p)
		m.Reports[key] = report
		for _, np := range policies {
			nodes := m.Networks[np.vni]
			if nodes == nil {
				nodes = map[string]fabric.NetworkPolicy{}
				m.Networks[np.vni] = nodes
			}
			n := nodes[np.node]
			n.VNI = np.vni
			n.Policies = append(n.Policies, np.policy)
			nodes[np.node] = n
		}
	}
	for _, nodes := range m.Networks {
		for _, n := range nodes {
			slices.SortStableFunc(n.Policies, func(a, b fabric.Policy) int {
				return cmp.Or(cmp.Compare(a.Name, b.Name), a.Selected[0].Compare(b.Selected[0]))
			})
		}
	}
	return m
}

func index(in Input) *state {
	s := &state{
		namespaceLabels: map[string]labels.Set{},
		definitions:     map[types.NamespacedName]*unstructured.Unstructured{},
		subnetVNIs:      map[subnetKey]uint32{},
		members:         map[subnetKey][]member{},
	}
	for _, ns := range in.Namespaces {
		s.namespaceLabels[ns.Name] = ns.Labels
	}
	for _, d := range in.Definitions {
		s.definitions[types.NamespacedName{Namespace: d.GetNamespace(), Name: d.GetName()}] = d
	}
	for _, sn := range in.Subnets {
		s.subnetVNIs[subnetKey{Namespace: sn.Namespace, Name: sn.Name}] = sn.Spec.VNI
	}
	live := map[types.UID]*corev1.Pod{}
	for _, p := range in.Pods {
		// A pod that has run to completion has no interfaces left, and
		// its addresses may soon be another's (as networking/v1 has it).
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		live[p.UID] = p
	}
	for _, a := range in.Attachments {
		pod := live[types.UID(a.Labels[v1alpha1.PodUIDLabel])]
		if pod == nil || pod.Namespace != a.Namespace {
			continue // not a live pod's: plain attachments are peers only by ipBlock
		}
		addr, err := netip.ParseAddr(a.Status.IPv4)
		if err != nil || !addr.Is4() {
			continue // not addressed yet: nothing to select or allow
		}
		sk := subnetKey{Namespace: a.Namespace, Name: a.Spec.Subnet}
		vni, ok := s.subnetVNIs[sk]
		if !ok || (a.Status.AddressVNI != 0 && a.Status.AddressVNI != vni) {
			continue // the address belongs to a subnet that is gone
		}
		s.members[sk] = append(s.members[sk], member{pod: pod, node: a.Spec.Node, addr: addr})
	}
	return s
}

// nodePolicy is one fabric.Policy for one node of one network.
type nodePolicy struct {
	vni    uint32
	node   string
	policy fabric.Policy
}

// networks returns the KOS networks that a policy's policy-for names, as
// the subnets of each VNI whose interfaces it governs.
func (s *state) networks(p *v1beta1.MultiNetworkPolicy, r *Report) map[uint32]map[subnetKey]bool {
	problems := &r.Problems
	annotation, ok := p.Annotations[v1beta1.PolicyForAnnotation]
	if !ok {
		*problems = append(*problems, fmt.Sprintf("The policy has no %s annotation: it governs no network.", v1beta1.PolicyForAnnotation))
		return nil
	}
	defs, err := v1beta1.PolicyFor(annotation, p.Namespace)
	if err != nil {
		*problems = append(*problems, fmt.Sprintf("Annotation %s: %v.", v1beta1.PolicyForAnnotation, err))
	}
	nets := map[uint32]map[subnetKey]bool{}
	for _, d := range defs {
		nad, ok := s.definitions[d]
		if !ok {
			*problems = append(*problems, fmt.Sprintf("NetworkAttachmentDefinition %s not found.", d))
			continue
		}
		config, err := podnetwork.DefinitionConfig(nad)
		var pc podnetwork.PluginConfig
		if err == nil {
			pc, err = podnetwork.ParsePluginConfig(config)
		}
		if !pc.IsKOS() {
			continue // another plugin's network: its policies are its own
		}
		if err != nil {
			*problems = append(*problems, fmt.Sprintf("NetworkAttachmentDefinition %s: %v.", d, err))
			continue
		}
		if d.Namespace != p.Namespace {
			// KOS gives interfaces on a definition only to pods of its
			// namespace, which a policy of another one cannot select.
			*problems = append(*problems, fmt.Sprintf("NetworkAttachmentDefinition %s is in another namespace: the KOS interfaces on it are its namespace's pods', which this policy cannot select.", d))
			continue
		}
		sk := subnetKey{Namespace: d.Namespace, Name: pc.Subnet}
		vni, ok := s.subnetVNIs[sk]
		if !ok {
			*problems = append(*problems, fmt.Sprintf("Subnet %s of NetworkAttachmentDefinition %s not found.", sk, d))
			continue
		}
		if nets[vni] == nil {
			nets[vni] = map[subnetKey]bool{}
		}
		nets[vni][sk] = true
		r.Definitions = append(r.Definitions, d.String())
	}
	return nets
}

// policyTypes returns whether a policy isolates for ingress and egress,
// with networking/v1's default when it has no policyTypes.
func policyTypes(spec *networkingv1.NetworkPolicySpec, problems *[]string) (ingress, egress bool) {
	if len(spec.PolicyTypes) == 0 {
		return true, len(spec.Egress) > 0
	}
	for _, t := range spec.PolicyTypes {
		switch t {
		case networkingv1.PolicyTypeIngress:
			ingress = true
		case networkingv1.PolicyTypeEgress:
			egress = true
		default:
			*problems = append(*problems, fmt.Sprintf("Policy type %q is neither Ingress nor Egress.", t))
		}
	}
	return ingress, egress
}

// policy returns the fabric policies of one MultiNetworkPolicy, by network
// and node, and its report.
func (s *state) policy(p *v1beta1.MultiNetworkPolicy) ([]nodePolicy, Report) {
	var r Report
	nets := s.networks(p, &r)
	for vni := range nets {
		r.Networks = append(r.Networks, vni)
	}
	slices.Sort(r.Networks)
	if len(nets) == 0 {
		return nil, r
	}
	spec := &p.Spec
	ingress, egress := policyTypes(spec, &r.Problems)
	podSel, err := metav1.LabelSelectorAsSelector(&spec.PodSelector)
	if err != nil {
		r.Problems = append(r.Problems, fmt.Sprintf("spec.podSelector: %v; the policy selects no pod.", err))
		podSel = labels.Nothing()
	}
	ingressRules := parseIngress(spec.Ingress, &r.Problems)
	egressRules := parseEgress(spec.Egress, &r.Problems)
	var out []nodePolicy
	counted := map[types.UID]bool{}
	for _, vni := range r.Networks {
		members := s.network(nets[vni])
		// Rules are resolved once per network, their slices shared by
		// the network's fabric.Policy values.
		var egressOut []fabric.Rule
		if egress {
			egressOut = egressRules.resolve(s, p.Namespace, members)
		}
		ingressFor := func(*corev1.Pod) ([]fabric.Rule, string) { return nil, "" }
		if ingress {
			ingressFor = ingressRules.forTarget(s, p.Namespace, members)
		}
		// The selected members, grouped by how the policy's ingress named
		// ports resolve on their pods: each group is one fabric.Policy
		// per node.
		type group struct {
			ingress []fabric.Rule
			byNode  map[string][]netip.Addr
		}
		groups := map[string]*group{}
		var order []string
		for _, m := range members {
			if m.pod.Namespace != p.Namespace || !podSel.Matches(labels.Set(m.pod.Labels)) {
				continue
			}
			counted[m.pod.UID] = true
			ingressOut, key := ingressFor(m.pod)
			g := groups[key]
			if g == nil {
				g = &group{ingress: ingressOut, byNode: map[string][]netip.Addr{}}
				groups[key] = g
				order = append(order, key)
			}
			g.byNode[m.node] = append(g.byNode[m.node], m.addr)
		}
		if !ingress && !egress {
			continue
		}
		for _, key := range order {
			g := groups[key]
			for node, addrs := range g.byNode {
				slices.SortFunc(addrs, netip.Addr.Compare)
				out = append(out, nodePolicy{vni: vni, node: node, policy: fabric.Policy{
					Name:         p.Namespace + "/" + p.Name,
					Selected:     slices.Compact(addrs),
					Ingress:      ingress,
					IngressRules: g.ingress,
					Egress:       egress,
					EgressRules:  egressOut,
				}})
			}
		}
	}
	r.Pods = len(counted)
	return out, r
}

// network returns the members of a policy's subnets of one network.
func (s *state) network(subnets map[subnetKey]bool) []member {
	keys := make([]subnetKey, 0, len(subnets))
	for k := range subnets {
		keys = append(keys, k)
	}
	if len(keys) == 1 {
		return s.members[keys[0]] // read only: no copy
	}
	slices.SortFunc(keys, func(a, b subnetKey) int { return strings.Compare(a.String(), b.String()) })
	var out []member
	for _, k := range keys {
		out = append(out, s.members[k]...)
	}
	return out
}

// selects reports whether a peer's selectors select pod for a policy of
// namespace: podSel in namespace when nsSel is nil, else podSel in the
// namespaces nsSel selects.
func (s *state) selects(namespace string, sel selector, pod *corev1.Pod) bool {
	if sel.nsSel == nil {
		if pod.Namespace != namespace {
			return false
		}
	} else if !sel.nsSel.Matches(s.namespaceLabels[pod.Namespace]) {
		return false
	}
	return sel.podSel.Matches(labels.Set(pod.Labels))
}
