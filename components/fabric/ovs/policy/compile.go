// Package policy compiles the policy of one virtual network on one node
// (fabric.NetworkPolicy) into the OpenFlow flows that enforce it in the OVS
// fabric's pipeline. It is pure: it runs nothing, and of the pipeline it
// knows only the tables and the cookie its caller gives it (Pipeline).
//
// The flows of a network with policy, whose VNI is V and whose conntrack
// zone is Zone(V):
//
//	Forward  prio 200  ip,tun_id=V,reg0=0/1     ct(zone,table=State)   the gate
//	State    prio 110  +inv                     drop
//	         prio 100  +est, or +rel-new        pass
//	         prio  90  +new                     → Egress
//	         prio  10  other IPv4 of V          drop
//	Egress   prio 110  rule of one dimension    → Ingress
//	         prio 100  conjunctions of rules    → Ingress
//	         prio  50  dl_src of isolated port  drop
//	         prio  10  other IPv4 of V          → Ingress
//	Ingress  prio 110  rule of one dimension    commit, pass
//	         prio 100  conjunctions of rules    commit, pass
//	         prio  50  dl_dst of isolated port  drop
//	         prio  10  other IPv4 of V          commit, pass
//
// To pass is to set reg0 bit 0 and resubmit to Forward, where the gate no
// longer matches and the network's forwarding flows deliver the packet. A
// new connection is committed to conntrack only once both its source's
// egress and its destination's ingress allowed it, so that its replies
// and later packets pass as established. A local attachment's port may
// only send with its own MAC and address (the fabric's anti-spoofing), so
// its MAC names it as a source; forwarding delivers by destination MAC, so
// the MAC names it as a destination too, and policy flows need no port
// numbers, which change when a pod's interface is plugged again.
//
// Each rule of a policy is one conjunctive match of up to three
// dimensions: the selected attachments' MACs, the peers' prefixes (left
// out when the rule allows every address) and the destination ports as
// value/mask pairs (left out when it allows every port). A flow that
// several rules share, such as a selected attachment's, is one flow with
// a conjunction action for each, so the flows grow with the rules plus the
// addresses and ports they name, not with their product.
package policy

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	goovs "github.com/digitalocean/go-openvswitch/ovs"

	"github.com/kos-sdn/kos/components/fabric"
)

// Pipeline is what Compile needs to know of the fabric's pipeline.
type Pipeline struct {
	// Forward is the table that forwards by destination MAC, at
	// priorities below GatePriority: Compile puts the network's gate
	// there and resubmits what passes back to it.
	Forward int
	// State, Egress and Ingress are the tables Compile fills, with the
	// flows of every network with policy; nothing else may use them.
	State, Egress, Ingress int
	// Cookie is the cookie of every flow Compile makes, so that a
	// network's policy can be replaced by deleting its flows by cookie.
	Cookie uint64
}

// GatePriority is the priority of the gate in Pipeline.Forward; the
// forwarding flows there must be below it.
const GatePriority = 200

// Priorities in the State, Egress and Ingress tables (see the package
// comment).
const (
	invalidPriority  = 110
	passPriority     = 100
	newPriority      = 90
	untrackPriority  = 10
	directPriority   = 110 // Egress and Ingress: a rule of one dimension
	conjPriority     = 100 // Egress and Ingress: conjunctive matches
	isolatedPriority = 50  // Egress and Ingress: an isolated port's drop
	openPriority     = 10  // Egress and Ingress: what no policy isolates
)

// checkedMatch matches a packet that has not been through the policy of
// its network yet: reg0 bit 0 clear. OVS zeroes the registers of every
// packet that enters the bridge, and keeps them across ct's recirculation.
var checkedMatch = goovs.FieldMatch("reg0", "0/0x1")

// checkedField is the bit that pass sets.
const checkedField = "NXM_NX_REG0[0]"

// conjIDBits is how many bits of a conjunction ID number the rules of one
// direction of one network; the VNI fills the bits above, so that two
// networks' conjunctions never share an ID in one table.
const conjIDBits = 11

// MaxRules is the most rules, counted per direction, that one network's
// policy may have that need a conjunctive match.
const MaxRules = 1<<conjIDBits - 1

// Zone returns the conntrack zone of a network's connections: its VNI,
// folded into [1, 65535]. Zone 0 is left out because the kernel's
// conntrack (the host's firewall) uses it; networks whose VNIs differ by a
// multiple of 65535 share a zone, which only matters when a node has
// attachments of both with the same addresses.
func Zone(vni uint32) uint16 { return uint16((vni-1)%65535 + 1) }

// Compile returns the flows that enforce p with pipeline pl, sorted by
// table, descending priority, then match; nil when p isolates no
// attachment, in which case the network needs none (and its traffic is not
// tracked). It fails when p is not valid or has more than MaxRules rules
// in one direction.
func Compile(p fabric.NetworkPolicy, pl Pipeline) ([]*goovs.Flow, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if !p.Isolates() {
		return nil, nil
	}
	b := newBuilder(pl)
	zone := Zone(p.VNI)
	pass := []goovs.Action{goovs.Load("1", checkedField), goovs.Resubmit(0, pl.Forward)}
	commitPass := append([]goovs.Action{goovs.ConnectionTracking(fmt.Sprintf("commit,zone=%d", zone))}, pass...)
	network := func(m ...goovs.Match) []goovs.Match {
		return append([]goovs.Match{goovs.TunnelID(uint64(p.VNI))}, m...)
	}
	ct := func(s ...string) goovs.Match { return goovs.ConnectionTrackingState(s...) }
	trk, est, rel, nw, inv := goovs.SetState(goovs.CTStateTracked), goovs.SetState(goovs.CTStateEstablished),
		goovs.SetState(goovs.CTStateRelated), goovs.SetState(goovs.CTStateNew), goovs.SetState(goovs.CTStateInvalid)
	notNew := goovs.UnsetState(goovs.CTStateNew)

	b.add(pl.Forward, GatePriority, goovs.ProtocolIPv4, network(checkedMatch),
		goovs.ConnectionTracking(fmt.Sprintf("table=%d,zone=%d", pl.State, zone)))
	b.add(pl.State, invalidPriority, goovs.ProtocolIPv4, network(ct(inv, trk)), goovs.Drop())
	b.add(pl.State, passPriority, goovs.ProtocolIPv4, network(ct(est, trk)), pass...)
	b.add(pl.State, passPriority, goovs.ProtocolIPv4, network(ct(notNew, rel, trk)), pass...)
	b.add(pl.State, newPriority, goovs.ProtocolIPv4, network(ct(nw, trk)), goovs.Resubmit(0, pl.Egress))
	b.add(pl.State, untrackPriority, goovs.ProtocolIPv4, network(), goovs.Drop())

	egress := direction{
		table:    pl.Egress,
		isolates: func(pol fabric.Policy) bool { return pol.Egress },
		rules:    func(pol fabric.Policy) []fabric.Rule { return pol.EgressRules },
		local:    func(ip netip.Addr) goovs.Match { return goovs.DataLinkSource(fabric.MACAddress(p.VNI, ip).String()) },
		peer:     func(pr netip.Prefix) goovs.Match { return goovs.NetworkDestination(prefixText(pr)) },
		next:     []goovs.Action{goovs.Resubmit(0, pl.Ingress)},
	}
	ingress := direction{
		table:    pl.Ingress,
		isolates: func(pol fabric.Policy) bool { return pol.Ingress },
		rules:    func(pol fabric.Policy) []fabric.Rule { return pol.IngressRules },
		local: func(ip netip.Addr) goovs.Match {
			return goovs.DataLinkDestination(fabric.MACAddress(p.VNI, ip).String())
		},
		peer: func(pr netip.Prefix) goovs.Match { return goovs.NetworkSource(prefixText(pr)) },
		next: commitPass,
	}
	for _, d := range []direction{egress, ingress} {
		if err := b.direction(p, d); err != nil {
			return nil, err
		}
	}
	return b.sorted(), nil
}

// direction says how one direction of policy turns into flows.
type direction struct {
	table    int
	isolates func(fabric.Policy) bool
	rules    func(fabric.Policy) []fabric.Rule
	// local matches a selected attachment by its address.
	local func(netip.Addr) goovs.Match
	// peer matches a peer's prefix.
	peer func(netip.Prefix) goovs.Match
	// next is what happens to a packet the direction allows.
	next []goovs.Action
}

// match is one flow's match: a protocol and fields.
type match struct {
	protocol goovs.Protocol
	fields   []goovs.Match
}

// direction adds the flows of one direction of p: each rule's, each
// isolated attachment's drop, and the network's default that lets through
// what no policy isolates.
func (b *builder) direction(p fabric.NetworkPolicy, d direction) error {
	network := goovs.TunnelID(uint64(p.VNI))
	isolated := map[netip.Addr]bool{}
	rules := 0
	for _, pol := range p.Policies {
		if !d.isolates(pol) || len(pol.Selected) == 0 {
			continue
		}
		locals := make([]match, 0, len(pol.Selected))
		for _, ip := range sortedUnique(pol.Selected, netip.Addr.Compare) {
			isolated[ip] = true
			locals = append(locals, match{goovs.ProtocolIPv4, []goovs.Match{network, d.local(ip)}})
		}
		for _, r := range d.rules(pol) {
			peers, anyPeer := peerMatches(r.Peers, network, d.peer)
			if !anyPeer && len(peers) == 0 {
				continue // the rule allows nothing
			}
			dims := [][]match{locals}
			if !anyPeer {
				dims = append(dims, peers)
			}
			if len(r.Ports) > 0 {
				dims = append(dims, portMatches(r.Ports, network))
			}
			if len(dims) == 1 {
				for _, m := range locals {
					b.add(d.table, directPriority, m.protocol, m.fields, d.next...)
				}
				continue
			}
			rules++
			if rules > MaxRules {
				return fmt.Errorf("the policy of VNI %d has more than %d rules in one direction", p.VNI, MaxRules)
			}
			id := p.VNI<<conjIDBits | uint32(rules)
			for k, dim := range dims {
				for _, m := range dim {
					b.add(d.table, conjPriority, m.protocol, m.fields, goovs.Conjunction(int(id), k+1, len(dims)))
				}
			}
			// ct(commit) needs the match to say the packet is IPv4.
			b.add(d.table, conjPriority, goovs.ProtocolIPv4, []goovs.Match{goovs.ConjunctionID(id)}, d.next...)
		}
	}
	for ip := range isolated {
		b.add(d.table, isolatedPriority, goovs.ProtocolIPv4, []goovs.Match{network, d.local(ip)}, goovs.Drop())
	}
	b.add(d.table, openPriority, goovs.ProtocolIPv4, []goovs.Match{network}, d.next...)
	return nil
}

// peerMatches returns the matches of a rule's peers, each prefix once;
// anyPeer is true when some peer is every address.
func peerMatches(peers []fabric.Peer, network goovs.Match, peer func(netip.Prefix) goovs.Match) (ms []match, anyPeer bool) {
	var prefixes []netip.Prefix
	for _, p := range peers {
		if p.Prefix.Bits() == 0 && len(Subtract(p.Prefix, p.Except)) == 1 {
			return nil, true
		}
		prefixes = append(prefixes, Subtract(p.Prefix, p.Except)...)
	}
	for _, pr := range sortedUnique(prefixes, comparePrefixes) {
		ms = append(ms, match{goovs.ProtocolIPv4, []goovs.Match{network, peer(pr)}})
	}
	return ms, false
}

// portMatches returns the matches of a rule's ports, each once.
func portMatches(ports []fabric.Port, network goovs.Match) []match {
	type key struct {
		proto goovs.Protocol
		all   bool
		port  MaskedPort
	}
	var keys []key
	for _, p := range ports {
		proto := goovs.Protocol(strings.ToLower(string(p.Protocol)))
		switch {
		case p.Port == 0:
			keys = append(keys, key{proto: proto, all: true})
		case p.EndPort == 0:
			keys = append(keys, key{proto: proto, port: MaskedPort{Value: p.Port, Mask: 0xffff}})
		default:
			for _, m := range PortMasks(p.Port, p.EndPort) {
				keys = append(keys, key{proto: proto, port: m})
			}
		}
	}
	keys = sortedUnique(keys, func(a, b key) int {
		return cmp.Or(cmp.Compare(a.proto, b.proto), -compareBool(a.all, b.all),
			cmp.Compare(a.port.Value, b.port.Value), cmp.Compare(a.port.Mask, b.port.Mask))
	})
	ms := make([]match, 0, len(keys))
	for _, k := range keys {
		fields := []goovs.Match{network}
		switch {
		case k.all:
		case k.port.Mask == 0xffff:
			fields = append(fields, goovs.TransportDestinationPort(k.port.Value))
		default:
			fields = append(fields, goovs.TransportDestinationMaskedPort(k.port.Value, k.port.Mask))
		}
		ms = append(ms, match{k.proto, fields})
	}
	return ms
}

// builder collects flows, merging those of one table, priority and match
// into one flow with the actions of each: a flow that several conjunctions
// share carries a conjunction action for each.
type builder struct {
	pl    Pipeline
	flows map[string]*goovs.Flow
	// actions holds the text of each flow's actions, by the flow's key.
	actions map[string]map[string]bool
}

func newBuilder(pl Pipeline) *builder {
	return &builder{pl: pl, flows: map[string]*goovs.Flow{}, actions: map[string]map[string]bool{}}
}

func (b *builder) add(table, priority int, protocol goovs.Protocol, fields []goovs.Match, actions ...goovs.Action) {
	k := flowKey(table, priority, protocol, fields)
	f, ok := b.flows[k]
	if !ok {
		f = &goovs.Flow{
			Table:    table,
			Priority: priority,
			Protocol: protocol,
			Matches:  slices.Clone(fields),
			Cookie:   b.pl.Cookie,
		}
		b.flows[k] = f
		b.actions[k] = map[string]bool{}
	}
	have := b.actions[k]
	for _, a := range actions {
		if t := actionText(a); !have[t] {
			have[t] = true
			f.Actions = append(f.Actions, a)
		}
	}
}

// sorted returns the flows by table, descending priority, then match.
func (b *builder) sorted() []*goovs.Flow {
	keys := make([]string, 0, len(b.flows))
	for k := range b.flows {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(x, y string) int {
		fx, fy := b.flows[x], b.flows[y]
		return cmp.Or(cmp.Compare(fx.Table, fy.Table), cmp.Compare(fy.Priority, fx.Priority), strings.Compare(x, y))
	})
	out := make([]*goovs.Flow, 0, len(keys))
	for _, k := range keys {
		out = append(out, b.flows[k])
	}
	return out
}

func flowKey(table, priority int, protocol goovs.Protocol, fields []goovs.Match) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%05d/%05d/%s", table, 65535-priority, protocol)
	for _, m := range fields {
		text, err := m.MarshalText()
		if err != nil {
			// The matches made here always marshal; a failure would
			// show in the flow itself when it is installed.
			text = []byte(m.GoString())
		}
		sb.WriteByte(',')
		sb.Write(text)
	}
	return sb.String()
}

func actionText(a goovs.Action) string {
	text, err := a.MarshalText()
	if err != nil {
		return a.GoString()
	}
	return string(text)
}

// prefixText is a prefix as a match on nw_src or nw_dst: an address alone
// for a /32.
func prefixText(p netip.Prefix) string {
	if p.IsSingleIP() {
		return p.Addr().String()
	}
	return p.String()
}

func comparePrefixes(a, b netip.Prefix) int {
	return cmp.Or(a.Addr().Compare(b.Addr()), cmp.Compare(a.Bits(), b.Bits()))
}

func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

func sortedUnique[T any](s []T, compare func(a, b T) int) []T {
	out := slices.Clone(s)
	slices.SortFunc(out, compare)
	return slices.CompactFunc(out, func(a, b T) bool { return compare(a, b) == 0 })
}
