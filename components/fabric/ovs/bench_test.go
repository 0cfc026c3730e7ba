package ovs

import (
	"errors"
	"net/netip"
	"sync"
	"testing"

	"github.com/kos-sdn/kos/components/fabric"
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
