package ovs

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"

	"github.com/kos-sdn/kos/components/fabric"
	"github.com/kos-sdn/kos/components/fabric/ovs/policy"
	"github.com/kos-sdn/kos/tools/ovsenv"
)

// BenchmarkRemoteAttachments measures programming 1,000 remote attachments
// (2,000 flows) on one node's real Open vSwitch (userspace datapath): in one
// bundle, in one call per attachment (as an agent handling one event at a
// time would) from one caller and from eight at once, and with one
// ovs-ofctl add-flow per flow.
//
//	go test -run '^$' -bench RemoteAttachments -benchtime 3x ./components/fabric/ovs
func BenchmarkRemoteAttachments(b *testing.B) {
	const n = 1000
	inst := ovsenv.StartT(b, ovsenv.Options{})
	f := New(Config{RunDir: inst.RunDir, DatapathType: "netdev"})
	ctx := b.Context()
	if _, err := f.Ensure(ctx); err != nil {
		b.Fatal(err)
	}
	atts := make([]fabric.RemoteAttachment, n)
	for i := range atts {
		atts[i] = fabric.RemoteAttachment{
			VNI:    uint32(1 + i%10),
			IP:     netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}),
			HostIP: netip.AddrFrom4([4]byte{192, 168, 100, byte(2 + i%50)}),
		}
	}
	vtep, err := f.tunnelPortNumber(ctx)
	if err != nil {
		b.Fatal(err)
	}

	cases := []struct {
		name    string
		program func() error
	}{
		{"one-bundle", func() error { return f.CreateRemote(ctx, atts...) }},
		{"bundle-per-attachment", func() error {
			for _, a := range atts {
				if err := f.CreateRemote(ctx, a); err != nil {
					return err
				}
			}
			return nil
		}},
		{"bundle-per-attachment-8-callers", func() error {
			// Eight callers, as eight agent workers would be, whose
			// calls the fabric merges into shared bundles.
			var wg sync.WaitGroup
			errs := make([]error, 8)
			for w := range 8 {
				wg.Go(func() {
					for i := w; i < len(atts); i += 8 {
						if err := f.CreateRemote(ctx, atts[i]); err != nil {
							errs[w] = err
							return
						}
					}
				})
			}
			wg.Wait()
			return errors.Join(errs...)
		}},
		{"add-flow-per-flow", func() error {
			of := f.ovs.lib(ctx).OpenFlow
			for _, a := range atts {
				for _, fl := range remoteFlows(a, vtep) {
					if err := of.AddFlow(f.bridge, fl); err != nil {
						return err
					}
				}
			}
			return nil
		}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				if err := c.program(); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				inv, err := f.List(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if len(inv.Remote) != n || len(inv.PartialRemote) != 0 {
					b.Fatalf("%d whole and %d partial remote attachments, want %d and 0", len(inv.Remote), len(inv.PartialRemote), n)
				}
				if err := f.DeleteRemote(ctx, atts...); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*n), "µs/attachment")
		})
	}
}

// benchPolicy is the policy of one network of n attachments, the first
// local of them on this node, with p policies: policy j selects the tenth
// of the attachments whose index ends in j%10 (those on this node are its
// Selected), admits TCP port 8000+j from another tenth (wherever they
// are), and lets them out to 10.2.0.0/16 less a /24 on TCP 1000-1999 and
// UDP 53.
func benchPolicy(vni uint32, n, local, p int) fabric.NetworkPolicy {
	addr := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}) }
	np := fabric.NetworkPolicy{VNI: vni}
	for j := range p {
		var selected []netip.Addr
		var peers []fabric.Peer
		for i := range n {
			if i%10 == j%10 && i < local {
				selected = append(selected, addr(i))
			}
			if (i/10)%10 == j%10 {
				peers = append(peers, fabric.Peer{Prefix: netip.PrefixFrom(addr(i), 32)})
			}
		}
		np.Policies = append(np.Policies, fabric.Policy{
			Name:     fmt.Sprintf("p%d", j),
			Selected: selected,
			Ingress:  true,
			IngressRules: []fabric.Rule{{
				Peers: peers,
				Ports: []fabric.Port{{Protocol: fabric.ProtocolTCP, Port: uint16(8000 + j)}},
			}},
			Egress: true,
			EgressRules: []fabric.Rule{{
				Peers: []fabric.Peer{{Prefix: netip.MustParsePrefix("10.2.0.0/16"), Except: []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 2, byte(j), 0}), 24)}}},
				Ports: []fabric.Port{{Protocol: fabric.ProtocolTCP, Port: 1000, EndPort: 1999}, {Protocol: fabric.ProtocolUDP, Port: 53}},
			}},
		})
	}
	return np
}

// BenchmarkPolicy measures programming a network's policy on one node's
// real Open vSwitch (userspace datapath): n attachments of the network,
// local of them on the node, × p policies, from none ("set") and as a
// change of one policy's port ("update", which rewrites the network's
// flows in one bundle), both including compiling it, which "compile"
// measures alone.
// It reports the flows the policy takes; the ports themselves are not
// made, as policy flows name MACs, not ports.
//
//	go test -run '^$' -bench Policy -benchtime 3x ./components/fabric/ovs
func BenchmarkPolicy(b *testing.B) {
	inst := ovsenv.StartT(b, ovsenv.Options{})
	f := New(Config{RunDir: inst.RunDir, DatapathType: "netdev"})
	ctx := b.Context()
	if _, err := f.Ensure(ctx); err != nil {
		b.Fatal(err)
	}
	for _, size := range []struct{ n, local, p int }{{100, 100, 10}, {1000, 100, 100}, {1000, 1000, 100}, {2000, 2000, 200}} {
		np := benchPolicy(5, size.n, size.local, size.p)
		changed := benchPolicy(5, size.n, size.local, size.p)
		changed.Policies[0].IngressRules[0].Ports[0].Port = 7999
		flows, err := policy.Compile(np, policyPipeline(policyCookie(5)))
		if err != nil {
			b.Fatal(err)
		}
		clear := func() {
			if err := f.SetPolicy(ctx, fabric.NetworkPolicy{VNI: 5}); err != nil {
				b.Fatal(err)
			}
		}
		name := fmt.Sprintf("%d-attachments-%d-local-%d-policies", size.n, size.local, size.p)
		b.Run(name+"/compile", func(b *testing.B) {
			for range b.N {
				if _, err := policy.Compile(np, policyPipeline(policyCookie(5))); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(flows)), "flows")
		})
		b.Run(name+"/set", func(b *testing.B) {
			for range b.N {
				if err := f.SetPolicy(ctx, np); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if inv := listT(b, f); len(inv.Policies) != 1 {
					b.Fatalf("List found policies %v, want VNI 5's", inv.Policies)
				}
				clear()
				b.StartTimer()
			}
			b.ReportMetric(float64(len(flows)), "flows")
		})
		b.Run(name+"/update", func(b *testing.B) {
			if err := f.SetPolicy(ctx, np); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := range b.N {
				next := np
				if i%2 == 0 {
					next = changed
				}
				if err := f.SetPolicy(ctx, next); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			clear()
			b.ReportMetric(float64(len(flows)), "flows")
		})
	}
}

func listT(b *testing.B, f *Fabric) *fabric.Inventory {
	b.Helper()
	inv, err := f.List(b.Context())
	if err != nil {
		b.Fatal(err)
	}
	return inv
}
