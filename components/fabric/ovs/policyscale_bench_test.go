package ovs

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/kos-sdn/kos/components/fabric"
	"github.com/kos-sdn/kos/tools/ovsenv"
)

// BenchmarkPolicyScale measures what a network's policy costs one node as
// it grows, on a real Open vSwitch (userspace datapath): the network's
// remote attachments programmed in one call, then its policy (benchPolicy:
// each policy selects a tenth of the local attachments and admits a tenth
// of all of them), and the flows the bridge then holds beyond its
// defaults. The points run 1,000 local and 1,000 remote attachments with
// 100 policies, and smaller ones that vary one of attachments and policies
// at a time, to show how each grows. The local attachments' own ports and
// flows are not made (policy flows name addresses and MACs, not ports):
// their four flows each come on top.
//
//	go test -run '^$' -bench PolicyScale -benchtime 1x ./components/fabric/ovs
func BenchmarkPolicyScale(b *testing.B) {
	inst := ovsenv.StartT(b, ovsenv.Options{})
	f := New(Config{RunDir: inst.RunDir, DatapathType: "netdev"})
	ctx := b.Context()
	if _, err := f.Ensure(ctx); err != nil {
		b.Fatal(err)
	}
	base, err := f.FlowCount(ctx)
	if err != nil {
		b.Fatal(err)
	}
	const vni = 5
	for _, pt := range []struct{ local, remote, policies int }{
		{250, 250, 100}, {500, 500, 100}, {1000, 1000, 100},
		{1000, 1000, 25}, {1000, 1000, 50},
	} {
		name := fmt.Sprintf("%d-local-%d-remote-%d-policies", pt.local, pt.remote, pt.policies)
		b.Run(name, func(b *testing.B) {
			n := pt.local + pt.remote
			np := benchPolicy(vni, n, pt.local, pt.policies)
			remotes := make([]fabric.RemoteAttachment, 0, pt.remote)
			for i := pt.local; i < n; i++ {
				remotes = append(remotes, fabric.RemoteAttachment{
					VNI:    vni,
					IP:     netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}),
					HostIP: netip.AddrFrom4([4]byte{192, 168, 100, byte(2 + i%50)}),
				})
			}
			var remoteTook, policyTook time.Duration
			flows := 0
			for range b.N {
				began := time.Now()
				if err := f.CreateRemote(ctx, remotes...); err != nil {
					b.Fatal(err)
				}
				remoteTook += time.Since(began)
				began = time.Now()
				if err := f.SetPolicy(ctx, np); err != nil {
					b.Fatal(err)
				}
				policyTook += time.Since(began)
				b.StopTimer()
				count, err := f.FlowCount(ctx)
				if err != nil {
					b.Fatal(err)
				}
				flows = count - base
				inv := listT(b, f)
				if len(inv.Remote) != pt.remote || len(inv.Policies) != 1 {
					b.Fatalf("List found %d remote attachments and policies of %v, want %d and VNI %d's", len(inv.Remote), inv.Policies, pt.remote, vni)
				}
				if err := f.SetPolicy(ctx, fabric.NetworkPolicy{VNI: vni}); err != nil {
					b.Fatal(err)
				}
				if err := f.DeleteRemote(ctx, remotes...); err != nil {
					b.Fatal(err)
				}
				if count, err := f.FlowCount(ctx); err != nil || count != base {
					b.Fatalf("%d flows left after clearing, want %d (%v)", count, base, err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(flows), "flows")
			b.ReportMetric(float64(remoteTook.Milliseconds())/float64(b.N), "ms-remote")
			b.ReportMetric(float64(policyTook.Milliseconds())/float64(b.N), "ms-policy")
		})
	}
}
