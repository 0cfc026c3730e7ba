package policy

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	goovs "github.com/digitalocean/go-openvswitch/ovs"

	"github.com/kos-sdn/kos/components/apis/network"
	"github.com/kos-sdn/kos/components/fabric"
	"github.com/kos-sdn/kos/tools/golden"
)

// testPipeline is the OVS fabric's pipeline, with a cookie that shows.
var testPipeline = Pipeline{Forward: 1, State: 2, Egress: 3, Ingress: 4, Cookie: 0x6b8000070000000}

var (
	ip  = netip.MustParseAddr
	pfx = netip.MustParsePrefix
)

// host is a peer of one address.
func host(s string) fabric.Peer { return fabric.Peer{Prefix: netip.PrefixFrom(ip(s), 32)} }

// everyone is the peer of a rule without from or to.
var everyone = fabric.Peer{Prefix: pfx("0.0.0.0/0")}

func tcp(port uint16) fabric.Port { return fabric.Port{Protocol: fabric.ProtocolTCP, Port: port} }

// flowLines is the text ovs-ofctl add-flows takes, one flow a line.
func flowLines(t *testing.T, flows []*goovs.Flow) string {
	t.Helper()
	var b strings.Builder
	for _, f := range flows {
		text, err := f.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		b.Write(text)
		b.WriteByte('\n')
	}
	return b.String()
}

func TestCompileGolden(t *testing.T) {
	tests := []struct {
		name string
		p    fabric.NetworkPolicy
	}{{
		// Ports 10.7.0.1 and .2 are isolated for ingress with no rule:
		// nothing new reaches them; .3 is not isolated.
		name: "deny-ingress",
		p: fabric.NetworkPolicy{VNI: 7, Policies: []fabric.Policy{
			{Name: "default-deny", Selected: []netip.Addr{ip("10.7.0.1"), ip("10.7.0.2")}, Ingress: true},
		}},
	}, {
		// The integration test's: TCP 8080 to .1 from .2 only.
		name: "allow-tcp-from-peer",
		p: fabric.NetworkPolicy{VNI: 7, Policies: []fabric.Policy{{
			Name: "web", Selected: []netip.Addr{ip("10.7.0.1")}, Ingress: true,
			IngressRules: []fabric.Rule{{Peers: []fabric.Peer{host("10.7.0.2")}, Ports: []fabric.Port{tcp(8080)}}},
		}}},
	}, {
		// Egress to a CIDR less a subnet, on a TCP range, UDP 53 and
		// all of SCTP; and ingress from anyone on any port, which
		// needs no conjunction.
		name: "egress-ipblock-range",
		p: fabric.NetworkPolicy{VNI: network.MaxVNI, Policies: []fabric.Policy{{
			Name:     "out",
			Selected: []netip.Addr{ip("10.7.0.1")},
			Egress:   true,
			EgressRules: []fabric.Rule{{
				Peers: []fabric.Peer{{Prefix: pfx("10.8.0.0/16"), Except: []netip.Prefix{pfx("10.8.128.0/17"), pfx("10.8.0.0/24")}}},
				Ports: []fabric.Port{
					{Protocol: fabric.ProtocolTCP, Port: 1000, EndPort: 1100},
					{Protocol: fabric.ProtocolUDP, Port: 53},
					{Protocol: fabric.ProtocolSCTP},
				},
			}},
			Ingress:      true,
			IngressRules: []fabric.Rule{{Peers: []fabric.Peer{everyone}}},
		}}},
	}, {
		// Two policies that share selected ports and peers: the shared
		// flows carry a conjunction action for each rule. A rule whose
		// peers are all excepted allows nothing.
		name: "shared",
		p: fabric.NetworkPolicy{VNI: 7, Policies: []fabric.Policy{{
			Name: "a", Selected: []netip.Addr{ip("10.7.0.1"), ip("10.7.0.2")}, Ingress: true,
			IngressRules: []fabric.Rule{
				{Peers: []fabric.Peer{host("10.7.0.3"), host("10.7.0.4")}, Ports: []fabric.Port{tcp(80)}},
				{Peers: []fabric.Peer{{Prefix: pfx("10.9.0.0/16"), Except: []netip.Prefix{pfx("10.9.0.0/16")}}}},
			},
		}, {
			Name: "b", Selected: []netip.Addr{ip("10.7.0.2")}, Ingress: true, Egress: true,
			IngressRules: []fabric.Rule{{Peers: []fabric.Peer{host("10.7.0.4")}, Ports: []fabric.Port{tcp(80), tcp(443)}}},
			EgressRules:  []fabric.Rule{{Peers: []fabric.Peer{host("10.7.0.3")}}},
		}}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			flows, err := Compile(tt.p, testPipeline)
			if err != nil {
				t.Fatalf("Compile: %v", err)
			}
			golden.Check(t, "compile-"+tt.name+".golden", flowLines(t, flows))
		})
	}
}

func TestCompileNothingIsolated(t *testing.T) {
	for _, p := range []fabric.NetworkPolicy{
		{VNI: 7},
		{VNI: 7, Policies: []fabric.Policy{{Name: "selects-nothing", Ingress: true, Egress: true}}},
		{VNI: 7, Policies: []fabric.Policy{{Name: "no-types", Selected: []netip.Addr{ip("10.7.0.1")},
			IngressRules: []fabric.Rule{{Peers: []fabric.Peer{everyone}}}}}},
	} {
		flows, err := Compile(p, testPipeline)
		if err != nil || flows != nil {
			t.Errorf("Compile(%+v) = %d flows, %v; want none, nil", p, len(flows), err)
		}
	}
}

func TestCompileInvalid(t *testing.T) {
	tests := []struct {
		name string
		p    fabric.NetworkPolicy
		want []string
	}{
		{"VNI", fabric.NetworkPolicy{VNI: 0}, []string{"VNI 0 is not in"}},
		{"everything at once", fabric.NetworkPolicy{VNI: 7, Policies: []fabric.Policy{{
			Name: "bad", Selected: []netip.Addr{ip("fd00::1")}, Ingress: true,
			IngressRules: []fabric.Rule{{
				Peers: []fabric.Peer{{Prefix: pfx("fd00::/64")}, {Prefix: pfx("10.0.0.0/16"), Except: []netip.Prefix{pfx("10.1.0.0/24")}}},
				Ports: []fabric.Port{{Protocol: "ICMP"}, {Protocol: fabric.ProtocolTCP, Port: 90, EndPort: 80}, {Protocol: fabric.ProtocolUDP, EndPort: 80}},
			}},
		}}}, []string{
			"policy bad selects fd00::1, which is not an IPv4 address",
			"policy bad has peer fd00::/64, which is not an IPv4 prefix",
			"policy bad has peer 10.0.0.0/16 with except 10.1.0.0/24, which is not an IPv4 prefix within it",
			`policy bad has port of protocol "ICMP", want TCP, UDP or SCTP`,
			"policy bad has port range 90-80",
			"policy bad has port range 0-80",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Compile(tt.p, testPipeline)
			if err == nil {
				t.Fatal("Compile succeeded, want an error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Compile error %q does not say %q", err, w)
				}
			}
		})
	}
}

// TestCompileTooManyRules checks that a network cannot have so many rules
// that conjunction IDs would run into the next network's.
func TestCompileTooManyRules(t *testing.T) {
	rules := make([]fabric.Rule, MaxRules+1)
	for i := range rules {
		rules[i] = fabric.Rule{Peers: []fabric.Peer{host("10.7.0.2")}, Ports: []fabric.Port{tcp(uint16(i + 1))}}
	}
	pol := fabric.Policy{Name: "big", Selected: []netip.Addr{ip("10.7.0.1")}, Ingress: true}
	pol.IngressRules = rules[:MaxRules]
	if _, err := Compile(fabric.NetworkPolicy{VNI: 7, Policies: []fabric.Policy{pol}}, testPipeline); err != nil {
		t.Errorf("Compile with %d rules: %v", MaxRules, err)
	}
	pol.IngressRules = rules
	if _, err := Compile(fabric.NetworkPolicy{VNI: 7, Policies: []fabric.Policy{pol}}, testPipeline); err == nil {
		t.Errorf("Compile with %d rules succeeded, want an error", len(rules))
	}
}

// TestCompileGrowth checks that flows grow with policies plus addresses,
// not with their product: P policies each selecting all of N local
// attachments and allowing TCP 80 from all of M peers make about N + M + P
// flows in the ingress table (plus the fixed ones), where one flow per
// (selected, peer) pair would make N·M·P.
func TestCompileGrowth(t *testing.T) {
	for _, c := range []struct{ n, m, p int }{{10, 10, 1}, {100, 100, 10}, {1000, 1000, 100}} {
		var selected []netip.Addr
		var peers []fabric.Peer
		for i := range c.n {
			selected = append(selected, netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}))
		}
		for i := range c.m {
			peers = append(peers, host(netip.AddrFrom4([4]byte{10, 2, byte(i >> 8), byte(i)}).String()))
		}
		np := fabric.NetworkPolicy{VNI: 9}
		for i := range c.p {
			np.Policies = append(np.Policies, fabric.Policy{
				Name: fmt.Sprintf("p%d", i), Selected: selected, Ingress: true,
				IngressRules: []fabric.Rule{{Peers: peers, Ports: []fabric.Port{tcp(uint16(80 + i))}}},
			})
		}
		flows, err := Compile(np, testPipeline)
		if err != nil {
			t.Fatal(err)
		}
		// Fixed: the gate, 5 in State, the defaults of Egress and
		// Ingress. In Ingress: N selected (conjunctions), N isolated
		// drops, M peers, P ports and the later fragments, P conj_id
		// flows.
		want := 1 + 5 + 2 + 2*c.n + c.m + 2*c.p + 1
		if len(flows) != want {
			t.Errorf("%d attachments, %d peers, %d policies: %d flows, want %d", c.n, c.m, c.p, len(flows), want)
		}
	}
}

// BenchmarkCompile measures compiling the policy of TestCompileGrowth's
// largest case: 1,000 selected attachments × 1,000 peers × 100 policies.
func BenchmarkCompile(b *testing.B) {
	var selected []netip.Addr
	var peers []fabric.Peer
	for i := range 1000 {
		selected = append(selected, netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}))
		peers = append(peers, host(netip.AddrFrom4([4]byte{10, 2, byte(i >> 8), byte(i)}).String()))
	}
	np := fabric.NetworkPolicy{VNI: 9}
	for i := range 100 {
		np.Policies = append(np.Policies, fabric.Policy{
			Name: fmt.Sprintf("p%d", i), Selected: selected, Ingress: true,
			IngressRules: []fabric.Rule{{Peers: peers, Ports: []fabric.Port{tcp(uint16(80 + i))}}},
		})
	}
	for b.Loop() {
		if _, err := Compile(np, testPipeline); err != nil {
			b.Fatal(err)
		}
	}
}
