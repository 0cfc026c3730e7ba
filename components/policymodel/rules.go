package policymodel

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kos-sdn/kos/components/fabric"
)

// everywhere is the peer of a rule without from or to.
var everywhere = fabric.Peer{Prefix: netip.MustParsePrefix("0.0.0.0/0")}

// rule is an ingress or egress rule as read from a spec: its selectors
// parsed, its ipBlocks as peers, its ports checked; what cannot be read is
// left out, and reported.
type rule struct {
	// all says the rule has no from (or to): it allows every peer.
	all bool
	// selectors are its peers that select pods.
	selectors []selector
	// blocks are its ipBlock peers.
	blocks []fabric.Peer
	// anyPort says the rule has no ports: it allows every port.
	anyPort bool
	// ports are its ports given by number, named those given by name.
	ports []fabric.Port
	named []namedPort
}

// selector is a peer that selects pods: nsSel nil selects in the
// policy's namespace.
type selector struct {
	nsSel, podSel labels.Selector
}

type namedPort struct {
	protocol fabric.Protocol
	name     string
}

// rules are the rules of one direction of a policy.
type rules []rule

func parseIngress(rs []networkingv1.NetworkPolicyIngressRule, problems *[]string) rules {
	var out rules
	for i, r := range rs {
		out = append(out, parseRule(fmt.Sprintf("spec.ingress[%d]", i), "from", r.From, r.Ports, problems))
	}
	return out
}

func parseEgress(rs []networkingv1.NetworkPolicyEgressRule, problems *[]string) rules {
	var out rules
	for i, r := range rs {
		out = append(out, parseRule(fmt.Sprintf("spec.egress[%d]", i), "to", r.To, r.Ports, problems))
	}
	return out
}

// parseRule reads one rule; field names it in problems, and peersField
// names its peers (from or to).
func parseRule(field, peersField string, peers []networkingv1.NetworkPolicyPeer, ports []networkingv1.NetworkPolicyPort, problems *[]string) rule {
	r := rule{all: len(peers) == 0, anyPort: len(ports) == 0}
	report := func(f string, args ...any) { *problems = append(*problems, fmt.Sprintf(f, args...)) }
	for j, p := range peers {
		f := fmt.Sprintf("%s.%s[%d]", field, peersField, j)
		if p.IPBlock != nil {
			if p.PodSelector != nil || p.NamespaceSelector != nil {
				report("%s: an ipBlock cannot go with selectors; the peer allows nothing.", f)
				continue
			}
			peer, err := parseBlock(p.IPBlock)
			if err != nil {
				report("%s.ipBlock: %v; the peer allows nothing.", f, err)
				continue
			}
			r.blocks = append(r.blocks, peer)
			continue
		}
		if p.PodSelector == nil && p.NamespaceSelector == nil {
			report("%s: the peer has neither selectors nor an ipBlock; it allows nothing.", f)
			continue
		}
		var sel selector
		var err error
		sel.podSel = labels.Everything()
		if p.PodSelector != nil {
			if sel.podSel, err = metav1.LabelSelectorAsSelector(p.PodSelector); err != nil {
				report("%s.podSelector: %v; the peer allows nothing.", f, err)
				continue
			}
		}
		if p.NamespaceSelector != nil {
			if sel.nsSel, err = metav1.LabelSelectorAsSelector(p.NamespaceSelector); err != nil {
				report("%s.namespaceSelector: %v; the peer allows nothing.", f, err)
				continue
			}
		}
		r.selectors = append(r.selectors, sel)
	}
	for j, p := range ports {
		f := fmt.Sprintf("%s.ports[%d]", field, j)
		proto := fabric.ProtocolTCP
		if p.Protocol != nil {
			proto = fabric.Protocol(*p.Protocol)
		}
		switch proto {
		case fabric.ProtocolTCP, fabric.ProtocolUDP, fabric.ProtocolSCTP:
		default:
			report("%s: protocol %q is not TCP, UDP or SCTP; the port allows nothing.", f, proto)
			continue
		}
		switch {
		case p.Port == nil:
			if p.EndPort != nil {
				report("%s: endPort needs a port; the port allows nothing.", f)
				continue
			}
			r.ports = append(r.ports, fabric.Port{Protocol: proto})
		case p.Port.Type == intstr.String:
			if p.EndPort != nil {
				report("%s: endPort needs a numeric port, not %q; the port allows nothing.", f, p.Port.StrVal)
				continue
			}
			r.named = append(r.named, namedPort{protocol: proto, name: p.Port.StrVal})
		default:
			port := p.Port.IntVal
			if port < 1 || port > 65535 {
				report("%s: port %d is not in 1-65535; the port allows nothing.", f, port)
				continue
			}
			fp := fabric.Port{Protocol: proto, Port: uint16(port)}
			if p.EndPort != nil {
				if end := *p.EndPort; end < port || end > 65535 {
					report("%s: endPort %d is not in %d-65535; the port allows nothing.", f, end, port)
					continue
				} else if end > port {
					fp.EndPort = uint16(end)
				}
			}
			r.ports = append(r.ports, fp)
		}
	}
	return r
}

// parseBlock reads an ipBlock. KOS networks are IPv4 only, so an IPv6
// block would allow nothing here; it is refused all the same, to be told.
func parseBlock(b *networkingv1.IPBlock) (fabric.Peer, error) {
	prefix, err := netip.ParsePrefix(b.CIDR)
	if err != nil {
		return fabric.Peer{}, fmt.Errorf("cidr %q is not a CIDR block", b.CIDR)
	}
	if !prefix.Addr().Is4() {
		return fabric.Peer{}, fmt.Errorf("cidr %s is not IPv4, and KOS networks are IPv4 only", b.CIDR)
	}
	peer := fabric.Peer{Prefix: prefix.Masked()}
	for _, e := range b.Except {
		ep, err := netip.ParsePrefix(e)
		if err != nil || !ep.Addr().Is4() || ep.Bits() < peer.Prefix.Bits() || !peer.Prefix.Contains(ep.Addr()) {
			return fabric.Peer{}, fmt.Errorf("except %q is not an IPv4 CIDR block within %s", e, b.CIDR)
		}
		peer.Except = append(peer.Except, ep.Masked())
	}
	return peer, nil
}

// peerAddrs returns the addresses of the members that a rule's selectors
// select, for a policy of namespace.
func (s *state) peerAddrs(namespace string, r rule, members []member) []netip.Addr {
	var out []netip.Addr
	for _, m := range members {
		for _, sel := range r.selectors {
			if s.selects(namespace, sel, m.pod) {
				out = append(out, m.addr)
				break
			}
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

// peers returns a rule's peers: its blocks, then the addresses as /32s.
func peers(r rule, addrs []netip.Addr) []fabric.Peer {
	if r.all {
		return []fabric.Peer{everywhere}
	}
	out := slices.Clone(r.blocks)
	for _, a := range addrs {
		out = append(out, fabric.Peer{Prefix: netip.PrefixFrom(a, 32)})
	}
	return out
}

// resolve returns a rule's ports with its named ports resolved on pod
// (nil for none), and whether they allow anything: a rule with ports none
// of which applies allows nothing, where empty ports would allow all.
func resolve(r rule, pod *corev1.Pod) ([]fabric.Port, bool) {
	if r.anyPort {
		return nil, true
	}
	out := slices.Clone(r.ports)
	for _, n := range r.named {
		for _, number := range containerPorts(pod, n) {
			p := fabric.Port{Protocol: n.protocol, Port: number}
			if !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	return out, len(out) > 0
}

// containerPorts returns the numbers of a pod's container ports of a name
// and protocol: its containers', and its sidecars' (init containers that
// keep running).
func containerPorts(pod *corev1.Pod, n namedPort) []uint16 {
	if pod == nil {
		return nil
	}
	var out []uint16
	add := func(c corev1.Container) {
		for _, cp := range c.Ports {
			proto := cp.Protocol
			if proto == "" {
				proto = corev1.ProtocolTCP
			}
			if cp.Name == n.name && fabric.Protocol(proto) == n.protocol && cp.ContainerPort > 0 && cp.ContainerPort <= 65535 {
				out = append(out, uint16(cp.ContainerPort))
			}
		}
	}
	for _, c := range pod.Spec.Containers {
		add(c)
	}
	for _, c := range pod.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			add(c)
		}
	}
	return out
}

// forTarget returns the function that gives a policy's ingress rules on
// one network, whose members are given, as they apply to one selected pod,
// whose containers name the named ports, with a key that is the same for
// two pods exactly when their named ports resolve the same.
func (rs rules) forTarget(s *state, namespace string, members []member) func(*corev1.Pod) ([]fabric.Rule, string) {
	rulePeers := make([][]fabric.Peer, len(rs))
	for i, r := range rs {
		rulePeers[i] = peers(r, s.peerAddrs(namespace, r, members))
	}
	return func(pod *corev1.Pod) ([]fabric.Rule, string) {
		var out []fabric.Rule
		var key strings.Builder
		for i, r := range rs {
			ports, ok := resolve(r, pod)
			if len(r.named) > 0 {
				fmt.Fprintf(&key, "%d:%v;", i, ports)
			}
			if ok && len(rulePeers[i]) > 0 {
				out = append(out, fabric.Rule{Peers: rulePeers[i], Ports: ports})
			}
		}
		return out, key.String()
	}
}

// resolve returns a policy's egress rules on one network, whose members
// are given. A named port is the destination's: the rule allows it to each
// peer pod as that pod's containers number it, so a rule with named ports
// becomes one rule per set of numbers. The pods a named port may reach are
// those the rule's selectors select and those whose address on the network
// lies in one of its blocks (any, when it has no to).
func (rs rules) resolve(s *state, namespace string, members []member) []fabric.Rule {
	var out []fabric.Rule
	for _, r := range rs {
		addrs := s.peerAddrs(namespace, r, members)
		all := peers(r, addrs)
		if len(all) == 0 {
			continue
		}
		if r.anyPort || len(r.ports) > 0 {
			ports, _ := resolve(rule{anyPort: r.anyPort, ports: r.ports}, nil)
			out = append(out, fabric.Rule{Peers: all, Ports: ports})
		}
		if len(r.named) == 0 {
			continue
		}
		type group struct {
			ports []fabric.Port
			addrs []netip.Addr
		}
		groups := map[string]*group{}
		var order []string
		for _, m := range members {
			if _, selected := slices.BinarySearchFunc(addrs, m.addr, netip.Addr.Compare); !r.all && !selected && !inBlocks(r.blocks, m.addr) {
				continue
			}
			ports, ok := resolve(rule{named: r.named}, m.pod)
			if !ok {
				continue
			}
			key := fmt.Sprint(ports)
			g := groups[key]
			if g == nil {
				g = &group{ports: ports}
				groups[key] = g
				order = append(order, key)
			}
			g.addrs = append(g.addrs, m.addr)
		}
		slices.Sort(order)
		for _, key := range order {
			g := groups[key]
			slices.SortFunc(g.addrs, netip.Addr.Compare)
			out = append(out, fabric.Rule{Peers: peers(rule{}, slices.Compact(g.addrs)), Ports: g.ports})
		}
	}
	return out
}

// inBlocks reports whether an address lies in one of the blocks.
func inBlocks(blocks []fabric.Peer, a netip.Addr) bool {
	for _, b := range blocks {
		if b.Prefix.Contains(a) && !slices.ContainsFunc(b.Except, func(e netip.Prefix) bool { return e.Contains(a) }) {
			return true
		}
	}
	return false
}
