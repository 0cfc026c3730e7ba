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
)

// The two tables of the pipeline.
const (
	// classifyTable tags each packet from a local attachment's port with
	// the attachment's VNI (the tunnel ID), then resubmits it to
	// forwardTable. Packets from the tunnel port already carry theirs.
	classifyTable = 0
	// forwardTable sends a packet to the attachment it is for, by (VNI,
	// destination MAC) and, for ARP, by (VNI, target IP): out of a local
	// port, or into the tunnel towards a remote attachment's node.
	forwardTable = 1
)

// Priorities. A packet that no attachment's flow takes falls to the
// priority-0 default of its table: classifyTable resubmits (packets from the
// tunnel), forwardTable drops. ARP by target address sits above forwarding
// by MAC so that an ARP packet whose two disagree has a defined fate.
const (
	defaultPriority = 0
	portPriority    = 100
	macPriority     = 100
	arpPriority     = 110
)

// Cookies tell KOS's flows from any others and name the attachment each
// belongs to, so that an attachment's flows can be listed and deleted
// without knowing the port numbers they were made with:
//
//	bits 63–56: cookieMagic, the byte 'k'
//	bits 55–53: the kind of flow (default, local, remote)
//	bits 52–32: the VNI (21 bits)
//	bits 31–0:  the attachment's IPv4 address
//
// For example 0x6b4000010a000005 is a flow of local attachment 10.0.0.5 in
// VNI 1.
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
)

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
	}
	return 0, 0, netip.Addr{}, false
}

// allKOSFlows matches every flow that carries a KOS cookie.
func allKOSFlows() *goovs.MatchFlow {
	return &goovs.MatchFlow{Cookie: cookieMagic, CookieMask: cookieMagicMask, Table: goovs.AnyTable}
}

// flowsWithCookie matches every flow with exactly cookie c, in any table.
func flowsWithCookie(c uint64) *goovs.MatchFlow {
	return &goovs.MatchFlow{Cookie: c, Table: goovs.AnyTable}
}

// defaultFlows are the flows a bridge has before any attachment: resubmit
// what the classifier does not know (packets from the tunnel), and drop what
// nothing forwards.
func defaultFlows() []*goovs.Flow {
	c := cookie(kindDefault, 0, netip.Addr{})
	return []*goovs.Flow{{
		Table:    classifyTable,
		Priority: defaultPriority,
		Cookie:   c,
		Actions:  []goovs.Action{goovs.Resubmit(0, forwardTable)},
	}, {
		Table:    forwardTable,
		Priority: defaultPriority,
		Cookie:   c,
		Actions:  []goovs.Action{goovs.Drop()},
	}}
}

// localFlows are the three flows of a local attachment whose interface is
// OpenFlow port port: tag its packets with its VNI, and deliver to it what
// is addressed to its MAC or asks for its IP.
func localFlows(a fabric.LocalAttachment, port int) []*goovs.Flow {
	c := cookie(kindLocal, a.VNI, a.IP)
	out := []goovs.Action{goovs.Output(port)}
	return []*goovs.Flow{{
		Table:    classifyTable,
		Priority: portPriority,
		InPort:   port,
		Cookie:   c,
		Actions:  []goovs.Action{goovs.SetField(vniText(a.VNI), "tun_id"), goovs.Resubmit(0, forwardTable)},
	}, {
		Table:    forwardTable,
		Priority: macPriority,
		Matches:  []goovs.Match{goovs.TunnelID(uint64(a.VNI)), goovs.DataLinkDestination(a.MAC().String())},
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

// remoteFlows are the two flows of a remote attachment: what is addressed to
// its MAC or asks for its IP goes into the tunnel (OpenFlow port vtepPort)
// towards its node.
func remoteFlows(a fabric.RemoteAttachment, vtepPort int) []*goovs.Flow {
	c := cookie(kindRemote, a.VNI, a.IP)
	tunnel := []goovs.Action{goovs.SetField(a.HostIP.String(), "tun_dst"), goovs.Output(vtepPort)}
	return []*goovs.Flow{{
		Table:    forwardTable,
		Priority: macPriority,
		Matches:  []goovs.Match{goovs.TunnelID(uint64(a.VNI)), goovs.DataLinkDestination(a.MAC().String())},
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
