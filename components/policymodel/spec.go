package policymodel

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/fabric"
)

// NodePolicyName is the name of the NodeNetworkPolicy of network vni on
// node: <vni>.<node>.
func NodePolicyName(vni uint32, node string) string { return fmt.Sprintf("%d.%s", vni, node) }

// NodeSpec returns the NodeNetworkPolicy spec that carries np, the model
// of one network on node, in a canonical form: addresses and peers sorted,
// so that the same model always gives the same spec and an unchanged model
// costs no write.
func NodeSpec(node string, np fabric.NetworkPolicy) v1alpha1.NodeNetworkPolicySpec {
	spec := v1alpha1.NodeNetworkPolicySpec{Node: node, VNI: np.VNI}
	for _, p := range np.Policies {
		m := v1alpha1.PolicyModel{Name: p.Name, Ingress: p.Ingress, Egress: p.Egress,
			IngressRules: specRules(p.IngressRules), EgressRules: specRules(p.EgressRules)}
		for _, a := range slices.SortedFunc(slices.Values(p.Selected), func(a, b netip.Addr) int { return a.Compare(b) }) {
			m.Selected = append(m.Selected, a.String())
		}
		spec.Policies = append(spec.Policies, m)
	}
	slices.SortStableFunc(spec.Policies, func(a, b v1alpha1.PolicyModel) int {
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return slices.Compare(a.Selected, b.Selected)
	})
	return spec
}

func specRules(rules []fabric.Rule) []v1alpha1.PolicyRule {
	var out []v1alpha1.PolicyRule
	for _, r := range rules {
		sr := v1alpha1.PolicyRule{}
		for _, p := range r.Peers {
			peer := v1alpha1.PolicyPeer{CIDR: p.Prefix.String()}
			for _, e := range p.Except {
				peer.Except = append(peer.Except, e.String())
			}
			sr.Peers = append(sr.Peers, peer)
		}
		slices.SortFunc(sr.Peers, func(a, b v1alpha1.PolicyPeer) int { return strings.Compare(a.CIDR, b.CIDR) })
		for _, p := range r.Ports {
			sr.Ports = append(sr.Ports, v1alpha1.PolicyPort{Protocol: string(p.Protocol), Port: int32(p.Port), EndPort: int32(p.EndPort)})
		}
		out = append(out, sr)
	}
	return out
}
