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
// value/mask pairs, with the later fragments of datagrams, which carry no
// ports (the dimension is left out when the rule allows every port). A flow that
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

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
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
	invalidPriority = 110
	passPriority    = 100
	newPriority     = 90
	untrackPriority = 10
	directPriority  = 110 // Egress and Ingress: a rule of one dimension
	conjPriority    = 100 // Egress and Ingress: conjunctive matches
	openPriority    = 10  // Egress and Ingress: what no policy isolates
)

// IsolatedPriority is the priority of an isolated port's drop in the
// Egress and Ingress tables, whose packet counts are what the policy
// dropped at the port.
const IsolatedPriority = 50

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
	b, err := compile(p, pl)
	if err != nil || b == nil {
		return nil, err
	}
	return b.sorted(), nil
}

// compile builds the flows of p; it returns nil when p isolates nothing.
func compile(p fabric.NetworkPolicy, pl Pipeline) (*builder, error) {
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

	b.add(pl.Forward, GatePriority, newMatch(goovs.ProtocolIPv4, network(checkedMatch)...),
		goovs.ConnectionTracking(fmt.Sprintf("table=%d,zone=%d", pl.State, zone)))
	b.add(pl.State, invalidPriority, newMatch(goovs.ProtocolIPv4, network(ct(inv, trk))...), goovs.Drop())
	b.add(pl.State, passPriority, newMatch(goovs.ProtocolIPv4, network(ct(est, trk))...), pass...)
	b.add(pl.State, passPriority, newMatch(goovs.ProtocolIPv4, network(ct(notNew, rel, trk))...), pass...)
	b.add(pl.State, newPriority, newMatch(goovs.ProtocolIPv4, network(ct(nw, trk))...), goovs.Resubmit(0, pl.Egress))
	b.add(pl.State, untrackPriority, newMatch(goovs.ProtocolIPv4, network()...), goovs.Drop())

	egress := direction{
		egress:   true,
		table:    pl.Egress,
		isolates: func(pol fabric.Policy) bool { return pol.Egress },
		rules:    func(pol fabric.Policy) []fabric.Rule { return pol.EgressRules },
		local:    func(ip netip.Addr) goovs.Match { return goovs.DataLinkSource(v1alpha1.MACAddress(p.VNI, ip).String()) },
		peer:     func(pr netip.Prefix) goovs.Match { return goovs.NetworkDestination(prefixText(pr)) },
		next:     []goovs.Action{goovs.Resubmit(0, pl.Ingress)},
	}
	ingress := direction{
		table:    pl.Ingress,
		isolates: func(pol fabric.Policy) bool { return pol.Ingress },
		rules:    func(pol fabric.Policy) []fabric.Rule { return pol.IngressRules },
		local: func(ip netip.Addr) goovs.Match {
			return goovs.DataLinkDestination(v1alpha1.MACAddress(p.VNI, ip).String())
		},
		peer: func(pr netip.Prefix) goovs.Match { return goovs.NetworkSource(prefixText(pr)) },
		next: commitPass,
	}
	for _, d := range []direction{egress, ingress} {
		if err := b.direction(p, d); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// direction says how one direction of policy turns into flows.
type direction struct {
	egress   bool
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

// match is one flow's match: a protocol and fields, and the text that
// tells it from others, made once however many rules share it.
type match struct {
	protocol goovs.Protocol
	fields   []goovs.Match
	key      string
}

func newMatch(protocol goovs.Protocol, fields ...goovs.Match) match {
	var sb strings.Builder
	sb.WriteString(string(protocol))
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
	return match{protocol: protocol, fields: fields, key: sb.String()}
}

// direction adds the flows of one direction of p: each rule's, each
// isolated attachment's drop, and the network's default that lets through
// what no policy isolates.
func (b *builder) direction(p fabric.NetworkPolicy, d direction) error {
	network := goovs.TunnelID(uint64(p.VNI))
	// The matches of attachments and peers, each made once.
	locals, peers := map[netip.Addr]match{}, map[netip.Prefix]match{}
	local := func(ip netip.Addr) match {
		m, ok := locals[ip]
		if !ok {
			m = newMatch(goovs.ProtocolIPv4, network, d.local(ip))
			locals[ip] = m
		}
		return m
	}
	peer := func(pr netip.Prefix) match {
		m, ok := peers[pr]
		if !ok {
			m = newMatch(goovs.ProtocolIPv4, network, d.peer(pr))
			peers[pr] = m
		}
		return m
	}
	isolated := map[netip.Addr]bool{}
	rules := 0
	for _, pol := range p.Policies {
		if !d.isolates(pol) || len(pol.Selected) == 0 {
			continue
		}
		selected := make([]match, 0, len(pol.Selected))
		for _, ip := range sortedUnique(pol.Selected, netip.Addr.Compare) {
			isolated[ip] = true
			selected = append(selected, local(ip))
		}
		for i, r := range d.rules(pol) {
			allowed, anyPeer := peerMatches(r.Peers, peer)
			if !anyPeer && len(allowed) == 0 {
				continue // the rule allows nothing
			}
			dims := [][]match{selected}
			if !anyPeer {
				dims = append(dims, allowed)
			}
			if len(r.Ports) > 0 {
				dims = append(dims, portMatches(r.Ports, network))
			}
			if len(dims) == 1 {
				for _, m := range selected {
					b.add(d.table, directPriority, m, d.next...)
				}
				continue
			}
			rules++
			if rules > MaxRules {
				return fmt.Errorf("the policy of VNI %d has more than %d rules in one direction", p.VNI, MaxRules)
			}
			id := p.VNI<<conjIDBits | uint32(rules)
			b.rules[conjKey{d.egress, id}] = RuleRef{Policy: pol.Name, Egress: d.egress, Index: i}
			for k, dim := range dims {
				for _, m := range dim {
					b.conjoin(d.table, m, id, k+1, len(dims))
				}
			}
			// ct(commit) needs the match to say the packet is IPv4.
			b.add(d.table, conjPriority, newMatch(goovs.ProtocolIPv4, goovs.ConjunctionID(id)), d.next...)
		}
	}
	for ip := range isolated {
		b.add(d.table, IsolatedPriority, local(ip), goovs.Drop())
	}
	b.add(d.table, openPriority, newMatch(goovs.ProtocolIPv4, network), d.next...)
	return nil
}

// peerMatches returns the matches of a rule's peers, each prefix once;
// anyPeer is true when some peer is every address.
func peerMatches(peers []fabric.Peer, peer func(netip.Prefix) match) (ms []match, anyPeer bool) {
	if allowsEveryPeer(peers) {
		return nil, true
	}
	var prefixes []netip.Prefix
	for _, p := range peers {
		prefixes = append(prefixes, Subtract(p.Prefix, p.Except)...)
	}
	for _, pr := range sortedUnique(prefixes, comparePrefixes) {
		ms = append(ms, peer(pr))
	}
	return ms, false
}

// allowsEveryPeer reports whether some peer is every address.
func allowsEveryPeer(peers []fabric.Peer) bool {
	for _, p := range peers {
		if p.Prefix.Bits() == 0 && len(Subtract(p.Prefix, p.Except)) == 1 {
			return true
		}
	}
	return false
}

// portMatches returns the matches of a rule's ports, each once, and one
// that lets through the later fragments of a datagram, which carry no
// ports: only its first fragment is checked. That is enough: a receiver
// cannot reassemble a datagram whose first fragment was dropped, and Open
// vSwitch's conntrack drops fragments that overlap or are too small to
// hide a header. (The kernel datapath's conntrack reassembles a datagram
// before the policy tables see it; the userspace one passes each fragment
// on, with its own headers.)
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
	ms := make([]match, 0, len(keys)+1)
	for _, k := range keys {
		fields := []goovs.Match{network}
		switch {
		case k.all:
		case k.port.Mask == 0xffff:
			fields = append(fields, goovs.TransportDestinationPort(k.port.Value))
		default:
			fields = append(fields, goovs.TransportDestinationMaskedPort(k.port.Value, k.port.Mask))
		}
		ms = append(ms, newMatch(k.proto, fields...))
	}
	return append(ms, newMatch(goovs.ProtocolIPv4, network, goovs.IPFrag(goovs.IPFragFlagLater)))
}

// builder collects flows. Flows of one table, priority and match are one
// flow: a flow that several rules share carries a conjunction action for
// each.
type builder struct {
	pl    Pipeline
	flows map[flowID]*entry
	// rules says which rule each conjunction stands for.
	rules map[conjKey]RuleRef
}

// conjKey is a conjunction: an ID is one rule's in one direction's table.
type conjKey struct {
	egress bool
	id     uint32
}

// flowID tells flows apart.
type flowID struct {
	table, priority int
	match           string
}

type entry struct {
	flow *goovs.Flow
	// conj holds the conjunctions (ID, dimension) the flow is in.
	conj map[[2]uint32]bool
}

func newBuilder(pl Pipeline) *builder {
	return &builder{pl: pl, flows: map[flowID]*entry{}, rules: map[conjKey]RuleRef{}}
}

func (b *builder) entry(table, priority int, m match) *entry {
	id := flowID{table, priority, m.key}
	e, ok := b.flows[id]
	if !ok {
		e = &entry{flow: &goovs.Flow{
			Table:    table,
			Priority: priority,
			Protocol: m.protocol,
			Matches:  slices.Clone(m.fields),
			Cookie:   b.pl.Cookie,
		}}
		b.flows[id] = e
	}
	return e
}

// add adds a flow unless it is there. A table, priority and match always
// come with the same actions here, so the first to come stays.
func (b *builder) add(table, priority int, m match, actions ...goovs.Action) {
	if e := b.entry(table, priority, m); len(e.flow.Actions) == 0 {
		e.flow.Actions = slices.Clone(actions)
	}
}

// conjoin makes the flow of m in table a clause of dimension k of n of
// conjunction id.
func (b *builder) conjoin(table int, m match, id uint32, k, n int) {
	e := b.entry(table, conjPriority, m)
	if e.conj == nil {
		e.conj = map[[2]uint32]bool{}
	}
	if c := [2]uint32{id, uint32(k)}; !e.conj[c] {
		e.conj[c] = true
		e.flow.Actions = append(e.flow.Actions, goovs.Conjunction(int(id), k, n))
	}
}

// sorted returns the flows by table, descending priority, then match.
func (b *builder) sorted() []*goovs.Flow {
	ids := make([]flowID, 0, len(b.flows))
	for id := range b.flows {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(x, y flowID) int {
		return cmp.Or(cmp.Compare(x.table, y.table), cmp.Compare(y.priority, x.priority), strings.Compare(x.match, y.match))
	})
	out := make([]*goovs.Flow, 0, len(ids))
	for _, id := range ids {
		out = append(out, b.flows[id].flow)
	}
	return out
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
