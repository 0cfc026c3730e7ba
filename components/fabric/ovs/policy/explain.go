package policy

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/fabric"
)

// RuleRef names one rule of a network's policy, as a conjunction ID of its
// flows stands for it.
type RuleRef struct {
	// Policy is the policy's Name.
	Policy string
	// Egress says the rule is one of the policy's EgressRules; otherwise
	// of its IngressRules.
	Egress bool
	// Index is the rule's index in them.
	Index int
}

// String names the rule as a person reads the NodeNetworkPolicy, such as
// shop/web ingress[0].
func (r RuleRef) String() string {
	return fmt.Sprintf("%s %s[%d]", r.Policy, directionName(r.Egress), r.Index)
}

func directionName(egress bool) string {
	if egress {
		return "egress"
	}
	return "ingress"
}

// traceTablePattern finds a flow that ovs-appctl ofproto/trace says a
// packet met: its table, match and priority, such as
// " 3. conj_id=636929,ip, priority 100, cookie 0x6b8001...".
var traceTablePattern = regexp.MustCompile(`(?m)^\s*(\d+)\. (?:(.*), )?priority (\d+)(?:, cookie 0x[0-9a-f]+)?\s*$`)

var (
	conjIDPattern = regexp.MustCompile(`\bconj_id=(\d+)`)
	macPattern    = regexp.MustCompile(`\bdl_(?:src|dst)=([0-9a-f:]{17})`)
)

// Explain reads what ovs-appctl ofproto/trace printed for a packet from
// src to dst that met p's flows in pipeline pl, and says, one sentence a
// line, what each table of the policy did with it: which rule of which
// policy allowed it, or which policies isolate the attachment that no
// rule let it reach or leave. It reads the flows the trace names, not p's
// semantics: what it says is what the switch did, named by p, which must
// be the policy whose flows the switch held.
func Explain(trace string, p fabric.NetworkPolicy, pl Pipeline, src, dst netip.Addr) []string {
	b, err := compile(p, pl)
	if err != nil {
		return []string{fmt.Sprintf("The policy of VNI %d does not compile (%v): its flows cannot be named.", p.VNI, err)}
	}
	if b == nil {
		return []string{fmt.Sprintf("The policy of VNI %d isolates no attachment of this node: it has no flows here.", p.VNI)}
	}
	var lines []string
	for _, m := range traceTablePattern.FindAllStringSubmatch(trace, -1) {
		table, err1 := strconv.Atoi(m[1])
		priority, err2 := strconv.Atoi(m[3])
		if err1 != nil || err2 != nil {
			continue
		}
		match := m[2]
		var line string
		switch table {
		case pl.State:
			line = explainState(priority)
		case pl.Egress:
			line = b.explainDirection(p, true, src, priority, match)
		case pl.Ingress:
			line = b.explainDirection(p, false, dst, priority, match)
		}
		if line != "" {
			lines = append(lines, line)
		}
	}
	if len(lines) == 0 {
		lines = append(lines, "The packet met no flow of the policy: only IPv4 is checked (ARP always passes).")
	}
	return lines
}

func explainState(priority int) string {
	switch priority {
	case invalidPriority:
		return "Dropped: conntrack finds the packet invalid."
	case passPriority:
		return "Passed as part of an established (or related) connection, which no rule checks again."
	case untrackPriority:
		return "Dropped: conntrack did not track the packet."
	}
	return ""
}

// explainDirection says what the egress (of src) or ingress (of dst) table
// did with a packet that met the flow of priority and match there.
func (b *builder) explainDirection(p fabric.NetworkPolicy, egress bool, addr netip.Addr, priority int, match string) string {
	name := directionName(egress)
	switch priority {
	case conjPriority:
		m := conjIDPattern.FindStringSubmatch(match)
		if m == nil {
			return ""
		}
		id, err := strconv.ParseUint(m[1], 10, 32)
		if err != nil {
			return ""
		}
		if r, ok := b.rules[conjKey{egress, uint32(id)}]; ok {
			return fmt.Sprintf("The %s of %v is allowed by %v.", name, addr, r)
		}
		return fmt.Sprintf("The %s of %v is allowed by conjunction %d, which the policy the agent set has not: the switch holds another policy.", name, addr, id)
	case directPriority:
		ip, ok := selectedByMAC(p, match)
		if !ok {
			return ""
		}
		rules := allowingEvery(p, egress, ip)
		if len(rules) == 0 {
			return fmt.Sprintf("The %s of %v is allowed by a rule of every peer and port, which the policy the agent set has not: the switch holds another policy.", name, ip)
		}
		return fmt.Sprintf("The %s of %v is allowed by %s (a rule of every peer and port).", name, ip, strings.Join(rules, ", "))
	case IsolatedPriority:
		ip, ok := selectedByMAC(p, match)
		if !ok {
			return ""
		}
		return fmt.Sprintf("Dropped: the %s of %v is isolated by %s, and no rule of theirs allows the packet.", name, ip, strings.Join(Isolating(p, egress, ip), ", "))
	case openPriority:
		if egress {
			return fmt.Sprintf("The egress of %v is not isolated: no policy selects it for egress.", addr)
		}
		return fmt.Sprintf("The ingress of %v is not isolated on this node: no policy here selects it for ingress (another node's attachment has its ingress checked there).", addr)
	}
	return ""
}

// selectedByMAC returns the selected address whose MAC the match names.
func selectedByMAC(p fabric.NetworkPolicy, match string) (netip.Addr, bool) {
	m := macPattern.FindStringSubmatch(match)
	if m == nil {
		return netip.Addr{}, false
	}
	for _, pol := range p.Policies {
		for _, ip := range pol.Selected {
			if v1alpha1.MACAddress(p.VNI, ip).String() == m[1] {
				return ip, true
			}
		}
	}
	return netip.Addr{}, false
}

// Isolating returns the names of the policies of p that isolate the
// local attachment ip for egress (or ingress), sorted, each once.
func Isolating(p fabric.NetworkPolicy, egress bool, ip netip.Addr) []string {
	var names []string
	for _, pol := range p.Policies {
		if (egress && pol.Egress || !egress && pol.Ingress) && slices.Contains(pol.Selected, ip) {
			names = append(names, pol.Name)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// allowingEvery returns the rules of p that allow ip every peer and port
// in a direction.
func allowingEvery(p fabric.NetworkPolicy, egress bool, ip netip.Addr) []string {
	var names []string
	for _, pol := range p.Policies {
		rules := pol.IngressRules
		if egress {
			rules = pol.EgressRules
		}
		if !(egress && pol.Egress || !egress && pol.Ingress) || !slices.Contains(pol.Selected, ip) {
			continue
		}
		for i, r := range rules {
			if len(r.Ports) == 0 && allowsEveryPeer(r.Peers) {
				names = append(names, RuleRef{Policy: pol.Name, Egress: egress, Index: i}.String())
			}
		}
	}
	return names
}
