package ovs

// This file says which flows KOS wants, as values; switch.go says how to get
// them into Open vSwitch. Nothing here runs a command.

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	goovs "github.com/digitalocean/go-openvswitch/ovs"

	"github.com/kos-sdn/kos/components/apis/network"
	"github.com/kos-sdn/kos/components/fabric"
	"github.com/kos-sdn/kos/components/fabric/ovs/policy"
)

// The two tables of the pipeline.
const (
	// classifyTable admits a packet or drops it, by who sent it. From a
	// local attachment's port it admits only IPv4 and ARP with the
	// attachment's own MAC and IPv4 address as source (anti-spoofing),
	// tagged with the attachment's VNI (the tunnel ID); from the tunnel
	// only packets of VNI V sent by the tunnel address of a node that holds
	// a remote attachment of V, with that attachment's MAC as source. What
	// it admits it resubmits to forwardTable.
	classifyTable = 0
	// forwardTable sends a packet to the attachment it is for, by (VNI,
	// destination MAC) and, for ARP, by (VNI, target IP): out of a local
	// port, or into the tunnel towards a remote attachment's node.
	forwardTable = 1
	// The tables of network policy (fabric.NetworkPolicy), which package
	// policy fills: a network with policy has a gate in forwardTable,
	// above its forwarding flows, that sends its IPv4 packets through
	// conntrack to policyStateTable, then egressTable, then ingressTable,
	// and back to forwardTable when they pass.
	policyStateTable = 2
	egressTable      = 3
	ingressTable     = 4
)

// policyPipeline is the pipeline package policy compiles a network's
// policy for, whose flows carry cookie c.
func policyPipeline(c uint64) policy.Pipeline {
	return policy.Pipeline{Forward: forwardTable, State: policyStateTable, Egress: egressTable, Ingress: ingressTable, Cookie: c}
}

// Priorities. A packet that no attachment's flow takes falls to a default
// of its table, all of which drop: in classifyTable, what came from the
// tunnel (tunnelDropPriority, counted as Drops.Tunnel), IPv6 from anywhere
// (ipv6DropPriority: KOS attachments are IPv4 only and a guest's kernel
// sends neighbour discovery by itself, so IPv6 is dropped but not counted
// as spoofing), and everything else, which is what local ports send with
// another source than their attachment's (defaultPriority, counted as
// Drops.Spoofed); in forwardTable what nothing forwards. ARP by target
// address sits above forwarding by MAC so that an ARP packet whose two
// disagree has a defined fate.
const (
	defaultPriority    = 0
	ipv6DropPriority   = 1
	tunnelDropPriority = 2
	portPriority       = 100
	macPriority        = 100
	arpPriority        = 110
)

// Cookies tell KOS's flows from any others and name the attachment each
// belongs to, so that an attachment's flows can be listed and deleted
// without knowing the port numbers they were made with:
//
//	bits 63–56: cookieMagic, the byte 'k'
//	bits 55–53: the kind of flow (default, local, remote, policy)
//	bits 52–32: the VNI (21 bits)
//	bits 31–0:  the attachment's IPv4 address; 0 for a policy flow
//
// For example 0x6b4000010a000005 is a flow of local attachment 10.0.0.5 in
// VNI 1, and 0x6b80000100000000 a flow of VNI 1's policy. The kinds of
// attachments' flows have bit 55 clear and the policy's has it set, so
// that one masked cookie selects either.
const (
	cookieMagic     uint64 = 0x6b << 56
	cookieMagicMask uint64 = 0xff << 56
	kindShift              = 53
	kindMask        uint64 = 0x7 << kindShift
	vniShift               = 32
)

// flowKind is what a KOS flow is for.
type flowKind uint64

const (
	kindDefault flowKind = 1
	kindLocal   flowKind = 2
	kindRemote  flowKind = 3
	// kindPolicy flows enforce a network's policy; all of one network's
	// share one cookie.
	kindPolicy flowKind = 4
)

// kindPolicyBit is the bit of the kind that only kindPolicy has.
const kindPolicyBit uint64 = 4 << kindShift

// cookie returns the cookie of the flows of kind for the attachment with vni
// and ip; a default flow has neither.
func cookie(kind flowKind, vni uint32, ip netip.Addr) uint64 {
	c := cookieMagic | uint64(kind)<<kindShift
	if ip.Is4() {
		b := ip.As4()
		c |= uint64(vni&network.MaxVNI)<<vniShift | uint64(b[0])<<24 | uint64(b[1])<<16 | uint64(b[2])<<8 | uint64(b[3])
	}
	return c
}

// parseCookie is the inverse of cookie. ok is false for a cookie that is not
// KOS's.
func parseCookie(c uint64) (kind flowKind, vni uint32, ip netip.Addr, ok bool) {
	if c&cookieMagicMask != cookieMagic {
		return 0, 0, netip.Addr{}, false
	}
	kind = flowKind((c & kindMask) >> kindShift)
	vni = uint32(c>>vniShift) & network.MaxVNI
	ip = netip.AddrFrom4([4]byte{byte(c >> 24), byte(c >> 16), byte(c >> 8), byte(c)})
	switch kind {
	case kindDefault:
		return kind, 0, netip.Addr{}, c == cookie(kindDefault, 0, netip.Addr{})
	case kindLocal, kindRemote:
		return kind, vni, ip, true
	case kindPolicy:
		return kind, vni, netip.Addr{}, uint32(c) == 0
	}
	return 0, 0, netip.Addr{}, false
}

// attachmentFlows matches every flow that carries a KOS cookie, but for
// those of policy: the default flows and those of attachments.
func attachmentFlows() *goovs.MatchFlow {
	return &goovs.MatchFlow{Cookie: cookieMagic, CookieMask: cookieMagicMask | kindPolicyBit, Table: goovs.AnyTable}
}

// policyCookie returns the cookie of the flows of a network's policy.
func policyCookie(vni uint32) uint64 {
	return cookieMagic | uint64(kindPolicy)<<kindShift | uint64(vni&network.MaxVNI)<<vniShift
}

// policyGates matches the gate of every network with policy: its only flow
// in forwardTable.
func policyGates() *goovs.MatchFlow {
	return &goovs.MatchFlow{Cookie: cookieMagic | kindPolicyBit, CookieMask: cookieMagicMask | kindMask, Table: forwardTable}
}

// flowsWithCookie matches every flow with exactly cookie c, in any table.
func flowsWithCookie(c uint64) *goovs.MatchFlow {
	return &goovs.MatchFlow{Cookie: c, Table: goovs.AnyTable}
}

// defaultFlows are the flows a bridge has before any attachment, whose
// tunnel port is OpenFlow port vtepPort: in classifyTable, drop what no
// attachment's flow admits, counting tunnel packets and packets from other
// ports apart (see the priorities); in forwardTable, drop what nothing
// forwards.
func defaultFlows(vtepPort int) []*goovs.Flow {
	c := cookie(kindDefault, 0, netip.Addr{})
	drop := []goovs.Action{goovs.Drop()}
	return []*goovs.Flow{{
		Table:    classifyTable,
		Priority: tunnelDropPriority,
		InPort:   vtepPort,
		Cookie:   c,
		Actions:  drop,
	}, {
		Table:    classifyTable,
		Priority: ipv6DropPriority,
		Protocol: goovs.ProtocolIPv6,
		Cookie:   c,
		Actions:  drop,
	}, {
		Table:    classifyTable,
		Priority: defaultPriority,
		Cookie:   c,
		Actions:  drop,
	}, {
		Table:    forwardTable,
		Priority: defaultPriority,
		Cookie:   c,
		Actions:  drop,
	}}
}

// localFlows are the four flows of a local attachment whose interface is
// OpenFlow port port: admit its IPv4 packets and ARP packets whose source
// MAC and IPv4 address (ARP's sender fields too) are the attachment's,
// tagged with its VNI, and deliver to it what is addressed to its MAC or
// asks for its IP. Anything else the port sends falls to the counted
// default drop of classifyTable.
func localFlows(a fabric.LocalAttachment, port int) []*goovs.Flow {
	c := cookie(kindLocal, a.VNI, a.IP)
	mac := a.MAC()
	admit := []goovs.Action{goovs.SetField(vniText(a.VNI), "tun_id"), goovs.Resubmit(0, forwardTable)}
	out := []goovs.Action{goovs.Output(port)}
	return []*goovs.Flow{{
		Table:    classifyTable,
		Priority: portPriority,
		Protocol: goovs.ProtocolIPv4,
		InPort:   port,
		Matches:  []goovs.Match{goovs.DataLinkSource(mac.String()), goovs.NetworkSource(a.IP.String())},
		Cookie:   c,
		Actions:  admit,
	}, {
		Table:    classifyTable,
		Priority: portPriority,
		Protocol: goovs.ProtocolARP,
		InPort:   port,
		Matches: []goovs.Match{goovs.DataLinkSource(mac.String()),
			goovs.ARPSourceHardwareAddress(mac), goovs.ARPSourceProtocolAddress(a.IP.String())},
		Cookie:  c,
		Actions: admit,
	}, {
		Table:    forwardTable,
		Priority: macPriority,
		Matches:  []goovs.Match{goovs.TunnelID(uint64(a.VNI)), goovs.DataLinkDestination(mac.String())},
		Cookie:   c,
		Actions:  out,
	}, {
		Table:    forwardTable,
		Priority: arpPriority,
		Protocol: goovs.ProtocolARP,
		Matches:  []goovs.Match{goovs.TunnelID(uint64(a.VNI)), goovs.ARPTargetProtocolAddress(a.IP.String())},
		Cookie:   c,
		Actions:  out,
	}}
}

// remoteFlows are the three flows of a remote attachment: admit from the
// tunnel (OpenFlow port vtepPort) what its node sends for it, in its VNI and
// with its MAC as source, and send into the tunnel towards its node what is
// addressed to its MAC or asks for its IP.
//
// The ingress flow is one per remote attachment, not one per (VNI, node):
// it then belongs to the attachment alone, is installed and deleted in the
// same bundle as the attachment's forwarding flows (so legitimate traffic
// sees no gap, and none of it outlives the attachment), and needs no count
// of how many attachments share a node, which a restarted agent would have
// to rebuild. It also binds the inner source MAC to the node that holds it.
func remoteFlows(a fabric.RemoteAttachment, vtepPort int) []*goovs.Flow {
	c := cookie(kindRemote, a.VNI, a.IP)
	mac := a.MAC().String()
	tunnel := []goovs.Action{goovs.SetField(a.HostIP.String(), "tun_dst"), goovs.Output(vtepPort)}
	return []*goovs.Flow{{
		Table:    classifyTable,
		Priority: portPriority,
		InPort:   vtepPort,
		Matches:  []goovs.Match{goovs.TunnelID(uint64(a.VNI)), tunnelSource(a.HostIP), goovs.DataLinkSource(mac)},
		Cookie:   c,
		Actions:  []goovs.Action{goovs.Resubmit(0, forwardTable)},
	}, {
		Table:    forwardTable,
		Priority: macPriority,
		Matches:  []goovs.Match{goovs.TunnelID(uint64(a.VNI)), goovs.DataLinkDestination(mac)},
		Cookie:   c,
		Actions:  tunnel,
	}, {
		Table:    forwardTable,
		Priority: arpPriority,
		Protocol: goovs.ProtocolARP,
		Matches:  []goovs.Match{goovs.TunnelID(uint64(a.VNI)), goovs.ARPTargetProtocolAddress(a.IP.String())},
		Cookie:   c,
		Actions:  tunnel,
	}}
}

// tunnelSourceMatch matches the outer source address of a tunnel packet
// (tun_src). The library has no such match, and its parser reads tun_src
// back as nw_src; fixTunnelSource undoes that.
type tunnelSourceMatch struct{ ip netip.Addr }

func tunnelSource(ip netip.Addr) goovs.Match { return tunnelSourceMatch{ip: ip} }

func (m tunnelSourceMatch) MarshalText() ([]byte, error) {
	return []byte("tun_src=" + m.ip.String()), nil
}

func (m tunnelSourceMatch) GoString() string { return fmt.Sprintf("tunnelSource(%q)", m.ip) }

// fixTunnelSource turns what the library's parser made of a dumped tun_src
// match, an nw_src match, back into a tunnel source match. A flow without
// an IP or ARP protocol cannot match on nw_src (OVS refuses it for want of
// a prerequisite), so there an nw_src match can only have been tun_src.
func fixTunnelSource(f *goovs.Flow) {
	if f.Protocol != "" {
		return
	}
	for i, m := range f.Matches {
		text, err := m.MarshalText()
		if err != nil {
			continue
		}
		if v, ok := strings.CutPrefix(string(text), "nw_src="); ok {
			if ip, err := netip.ParseAddr(v); err == nil {
				f.Matches[i] = tunnelSource(ip)
			}
		}
	}
}

// vniText is a VNI as OVS prints a tunnel ID.
func vniText(vni uint32) string { return fmt.Sprintf("%#x", vni) }

// tunnelDestination returns the address a flow sends its packets to through
// the tunnel, if it does.
func tunnelDestination(f *goovs.Flow) (netip.Addr, bool) {
	for _, a := range f.Actions {
		text, err := a.MarshalText()
		if err != nil {
			continue
		}
		if v, ok := strings.CutPrefix(string(text), "set_field:"); ok {
			if addr, ok := strings.CutSuffix(v, "->tun_dst"); ok {
				ip, err := netip.ParseAddr(addr)
				return ip, err == nil
			}
		}
	}
	return netip.Addr{}, false
}

// flowText is a flow's canonical text: what it matches, in sorted order,
// then its actions. Two flows with equal texts do the same; flows read back
// from the switch compare equal to those made here.
func flowText(f *goovs.Flow) (string, error) {
	b, err := f.MarshalText()
	if err != nil {
		return "", fmt.Errorf("formatting flow: %w", err)
	}
	match, actions, _ := strings.Cut(string(b), ",actions=")
	fields := strings.Split(match, ",")
	slices.Sort(fields)
	return strings.Join(fields, ",") + " actions=" + actions, nil
}

// sameFlows reports whether got and want hold the same flows, in any order.
func sameFlows(got, want []*goovs.Flow) bool {
	if len(got) != len(want) {
		return false
	}
	texts := func(fs []*goovs.Flow) ([]string, bool) {
		out := make([]string, 0, len(fs))
		for _, f := range fs {
			t, err := flowText(f)
			if err != nil {
				return nil, false
			}
			out = append(out, t)
		}
		slices.Sort(out)
		return out, true
	}
	g, okG := texts(got)
	w, okW := texts(want)
	return okG && okW && slices.Equal(g, w)
}
