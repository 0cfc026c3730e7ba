package fabric

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
)

// NetworkPolicy is the policy of one virtual network on one node: every
// policy that selects one of the node's attachments in the network, with
// the selected attachments resolved to addresses and its peers to address
// sets. It has the semantics of networking/v1's NetworkPolicySpec: an
// attachment that some policy selects for a direction (ingress, egress) is
// isolated for that direction, and then only what some rule of the
// policies that select it for that direction allows passes in that
// direction; an attachment no policy selects for a direction is not
// isolated for it. Enforcement is stateful: the replies of a connection
// that was allowed pass, whatever the policies, and so does related
// traffic such as ICMP errors. ARP always passes.
//
// A NetworkPolicy with no policies lifts every isolation of the network.
type NetworkPolicy struct {
	// VNI is the virtual network, in [network.MinVNI, network.MaxVNI].
	VNI uint32
	// Policies are the policies that select attachments of the network
	// on this node; their order does not matter.
	Policies []Policy
}

// Policy is one policy as it applies to one network on one node, such as
// a MultiNetworkPolicy whose policy-for names the network.
type Policy struct {
	// Name names the policy in logs and errors, such as namespace/name.
	Name string
	// Selected are the addresses of the local attachments of the network
	// that the policy selects (its podSelector). Selected attachments of
	// other nodes are enforced there.
	Selected []netip.Addr
	// Ingress says the policy isolates the selected attachments for
	// ingress (its policyTypes hold Ingress): then only IngressRules, and
	// the rules of other policies that isolate them, allow traffic to them.
	Ingress bool
	// IngressRules allow traffic to the selected attachments from their
	// Peers (the rule's from). They count only when Ingress is set.
	IngressRules []Rule
	// Egress says the policy isolates the selected attachments for egress.
	Egress bool
	// EgressRules allow traffic from the selected attachments to their
	// Peers (the rule's to). They count only when Egress is set.
	EgressRules []Rule
}

// Rule allows traffic between the attachments its policy selects and its
// Peers on its Ports.
type Rule struct {
	// Peers are the addresses on the other end that the rule allows: a
	// pod's address as a /32 prefix, an ipBlock's CIDR with its except. A
	// rule with no from or to, which allows every peer, has the single
	// peer 0.0.0.0/0; a rule with no peers allows nothing (a selector that
	// selects nothing).
	Peers []Peer
	// Ports are the destination ports the rule allows. Empty allows every
	// port of every protocol, ICMP included. A named port is the caller's
	// to resolve to numbers: where it means different numbers on different
	// selected attachments, the caller splits the policy by number.
	Ports []Port
}

// Peer is a range of IPv4 addresses: Prefix less Except.
type Peer struct {
	Prefix netip.Prefix
	// Except are the parts of Prefix that the peer leaves out; each lies
	// within Prefix.
	Except []netip.Prefix
}

// Protocol is a transport protocol a rule can allow by port.
type Protocol string

// The protocols of networking/v1's NetworkPolicyPort.
const (
	ProtocolTCP  Protocol = "TCP"
	ProtocolUDP  Protocol = "UDP"
	ProtocolSCTP Protocol = "SCTP"
)

// Port is a destination port, or range of ports, of one protocol.
type Port struct {
	Protocol Protocol
	// Port is the first port allowed; 0 allows every port of Protocol.
	Port uint16
	// EndPort, when not 0, is the last port of the range from Port.
	EndPort uint16
}

// PolicyDrop counts the packets that a network's policy dropped at one
// of the node's attachments, isolated for one direction, because no rule
// allowed the new connection they opened (or belonged to).
type PolicyDrop struct {
	// VNI is the network and MAC the attachment's address in it, which
	// the caller maps to its attachment (MACAddress).
	VNI uint32
	MAC net.HardwareAddr
	// Egress says the attachment sent the packets; otherwise they were
	// for it.
	Egress bool
	// Packets is the count since the network's policy first isolated the
	// attachment for the direction, or since the switch lost its flows.
	Packets uint64
}

// Validate returns every problem of the policy at once, nil if none.
func (p NetworkPolicy) Validate() error {
	var errs []error
	if err := validate(p.VNI, netip.AddrFrom4([4]byte{})); err != nil {
		errs = append(errs, err)
	}
	for _, pol := range p.Policies {
		for _, ip := range pol.Selected {
			if !ip.Is4() {
				errs = append(errs, fmt.Errorf("policy %s selects %v, which is not an IPv4 address", pol.Name, ip))
			}
		}
		for _, r := range append(append([]Rule(nil), pol.IngressRules...), pol.EgressRules...) {
			errs = append(errs, r.validate(pol.Name)...)
		}
	}
	return errors.Join(errs...)
}

func (r Rule) validate(policy string) []error {
	var errs []error
	for _, p := range r.Peers {
		if !p.Prefix.IsValid() || !p.Prefix.Addr().Is4() {
			errs = append(errs, fmt.Errorf("policy %s has peer %v, which is not an IPv4 prefix", policy, p.Prefix))
			continue
		}
		for _, e := range p.Except {
			if !e.IsValid() || !e.Addr().Is4() || e.Bits() < p.Prefix.Bits() || !p.Prefix.Contains(e.Addr()) {
				errs = append(errs, fmt.Errorf("policy %s has peer %v with except %v, which is not an IPv4 prefix within it", policy, p.Prefix, e))
			}
		}
	}
	for _, p := range r.Ports {
		switch p.Protocol {
		case ProtocolTCP, ProtocolUDP, ProtocolSCTP:
		default:
			errs = append(errs, fmt.Errorf("policy %s has port of protocol %q, want TCP, UDP or SCTP", policy, p.Protocol))
		}
		if p.EndPort != 0 && (p.Port == 0 || p.EndPort < p.Port) {
			errs = append(errs, fmt.Errorf("policy %s has port range %d-%d, want a first port and a last one not below it", policy, p.Port, p.EndPort))
		}
	}
	return errs
}

// Isolates reports whether some policy of p selects an attachment for
// ingress or egress. A network whose policy isolates nothing needs no
// enforcement: a switch holds no policy for it.
func (p NetworkPolicy) Isolates() bool {
	for _, pol := range p.Policies {
		if len(pol.Selected) > 0 && (pol.Ingress || pol.Egress) {
			return true
		}
	}
	return false
}

// String returns a short form for logs, such as 7(3 policies).
func (p NetworkPolicy) String() string { return fmt.Sprintf("%d(%d policies)", p.VNI, len(p.Policies)) }
