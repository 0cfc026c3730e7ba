package policy

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/fabric"
)

func TestExplain(t *testing.T) {
	web, db := ip("10.0.0.5"), ip("10.0.0.6")
	p := fabric.NetworkPolicy{VNI: 7, Policies: []fabric.Policy{
		{Name: "a/web", Selected: []netip.Addr{web}, Ingress: true,
			IngressRules: []fabric.Rule{{Peers: []fabric.Peer{host("10.0.0.9")}}, {Peers: []fabric.Peer{host("10.0.0.6")}, Ports: []fabric.Port{tcp(80)}}}},
		{Name: "a/deny", Selected: []netip.Addr{web, db}, Ingress: true},
		{Name: "a/out", Selected: []netip.Addr{db}, Egress: true, EgressRules: []fabric.Rule{{Peers: []fabric.Peer{everyone}}}},
	}}
	mac := func(a netip.Addr) string { return v1alpha1.MACAddress(7, a).String() }
	// step is one flow of a trace, as ofproto/trace prints it.
	step := func(table int, match string, priority int) string {
		return fmt.Sprintf(" %d. %s, priority %d, cookie 0x6b8000070000000\n    resubmit(,%d)\n", table, match, priority, table+1)
	}
	front := " 0. in_port=1, priority 100, cookie 0x6b40000700000005\n    resubmit(,1)\n 1. ip,tun_id=0x7,reg0=0/0x1, priority 200, cookie 0x6b8000070000000\n    ct(table=2,zone=7)\n"
	newConn := step(2, "ct_state=+new+trk,ip,tun_id=0x7", 90)
	for _, tt := range []struct {
		name     string
		trace    string
		src, dst netip.Addr
		want     []string
	}{{
		name:  "a conjunction allows, egress open",
		trace: front + newConn + step(3, "ip,tun_id=0x7", 10) + step(4, "conj_id=14338,ip", 100),
		src:   db, dst: web,
		want: []string{
			"The egress of 10.0.0.6 is not isolated: no policy selects it for egress.",
			"The ingress of 10.0.0.5 is allowed by a/web ingress[1].",
		},
	}, {
		name:  "isolated by two, egress by a rule of every peer",
		trace: front + newConn + step(3, "ip,tun_id=0x7,dl_src="+mac(db), 110) + step(4, "ip,tun_id=0x7,dl_dst="+mac(web), 50),
		src:   db, dst: web,
		want: []string{
			"The egress of 10.0.0.6 is allowed by a/out egress[0] (a rule of every peer and port).",
			"Dropped: the ingress of 10.0.0.5 is isolated by a/deny, a/web, and no rule of theirs allows the packet.",
		},
	}, {
		name:  "established",
		trace: front + step(2, "ct_state=+est+trk,ip,tun_id=0x7", 100),
		src:   db, dst: web,
		want: []string{"Passed as part of an established (or related) connection, which no rule checks again."},
	}, {
		name:  "invalid",
		trace: front + step(2, "ct_state=+inv+trk,ip,tun_id=0x7", 110),
		want:  []string{"Dropped: conntrack finds the packet invalid."},
	}, {
		name:  "a conjunction of another policy",
		trace: front + newConn + step(3, "ip,tun_id=0x7", 10) + step(4, "conj_id=14399,ip", 100),
		src:   db, dst: web,
		want: []string{
			"The egress of 10.0.0.6 is not isolated: no policy selects it for egress.",
			"The ingress of 10.0.0.5 is allowed by conjunction 14399, which the policy the agent set has not: the switch holds another policy.",
		},
	}, {
		name:  "ARP",
		trace: " 0. arp,in_port=1, priority 100, cookie 0x6b40000700000005\n    resubmit(,1)\n 1. tun_id=0x7,dl_dst=ff:ff:ff:ff:ff:ff, priority 100\n",
		want:  []string{"The packet met no flow of the policy: only IPv4 is checked (ARP always passes)."},
	}} {
		t.Run(tt.name, func(t *testing.T) {
			got := Explain(tt.trace, p, testPipeline, tt.src, tt.dst)
			if diff := cmp.Diff(got, tt.want); diff != "" {
				t.Errorf("Explain (-got +want):\n%s", diff)
			}
		})
	}
}

func TestRules(t *testing.T) {
	p := fabric.NetworkPolicy{VNI: 7, Policies: []fabric.Policy{
		{Name: "a/web", Selected: []netip.Addr{ip("10.0.0.5")}, Ingress: true,
			IngressRules: []fabric.Rule{{Peers: []fabric.Peer{everyone}}, {Peers: []fabric.Peer{host("10.0.0.6")}}}},
		{Name: "a/out", Selected: []netip.Addr{ip("10.0.0.5")}, Egress: true, EgressRules: []fabric.Rule{{Ports: []fabric.Port{tcp(53)}, Peers: []fabric.Peer{everyone}}}},
	}}
	b, err := compile(p, testPipeline)
	if err != nil {
		t.Fatal(err)
	}
	// The rule of every peer and port needs no conjunction: it takes no
	// number.
	// IDs count each direction's rules apart: each table has its own.
	want := map[conjKey]RuleRef{{true, 7<<11 | 1}: {Policy: "a/out", Egress: true, Index: 0}, {false, 7<<11 | 1}: {Policy: "a/web", Index: 1}}
	if diff := cmp.Diff(b.rules, want); diff != "" {
		t.Errorf("rules (-got +want):\n%s", diff)
	}
}
