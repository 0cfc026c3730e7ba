package ovs

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	goovs "github.com/digitalocean/go-openvswitch/ovs"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/kos-sdn/kos/components/fabric"
)

// TestIntegrationConcurrentCalls creates and deletes remote attachments one
// per call from many goroutines, which the fabric merges into fewer bundles,
// and checks that the switch ends up exactly as if the calls ran one by one.
func TestIntegrationConcurrentCalls(t *testing.T) {
	f, _ := startFabric(t)
	ctx := t.Context()
	const workers, each = 8, 40
	var wg sync.WaitGroup
	var want []fabric.RemoteAttachment
	for w := range workers {
		for i := range each {
			if i%4 != 0 {
				want = append(want, remoteForTest(w, i))
			}
		}
		wg.Go(func() {
			for i := range each {
				r := remoteForTest(w, i)
				if err := f.CreateRemote(ctx, r); err != nil {
					t.Error(err)
				}
				if i%4 == 0 {
					if err := f.DeleteRemote(ctx, r); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
	wg.Wait()
	inv := list(t, f)
	wantInv := &fabric.Inventory{Remote: want}
	wantInv.Sort()
	if diff := diffInventory(wantInv, inv); diff != "" {
		t.Errorf("List differs (-want +got):\n%s", diff)
	}
}

func remoteForTest(w, i int) fabric.RemoteAttachment {
	return fabric.RemoteAttachment{
		VNI:    uint32(1 + w),
		IP:     netip.AddrFrom4([4]byte{10, 9, byte(w), byte(i)}),
		HostIP: netip.AddrFrom4([4]byte{192, 168, 100, byte(1 + i%7)}),
	}
}

// TestIntegrationBatchFailure merges a good and a bad change into one batch
// and checks that only the bad one fails.
func TestIntegrationBatchFailure(t *testing.T) {
	f, _ := startFabric(t)
	ctx := t.Context()
	b := f.flows
	good := remoteFlows(fabric.RemoteAttachment{VNI: 1, IP: netip.MustParseAddr("10.0.0.1"), HostIP: netip.MustParseAddr("192.168.0.1")}, 1)
	// A flow without actions cannot even be written down.
	bad := []*goovs.Flow{{Table: forwardTable, Priority: 1, Cookie: cookie(kindRemote, 1, netip.MustParseAddr("10.0.0.2"))}}

	// Pretend a batch is being applied, so that both changes queue up.
	b.mu.Lock()
	b.running = true
	b.mu.Unlock()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, adds := range [][]*goovs.Flow{good, bad} {
		wg.Go(func() { errs[i] = b.apply(ctx, nil, adds) })
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		b.mu.Lock()
		n := len(b.pending)
		b.mu.Unlock()
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d changes pending, want 2", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.run()
	wg.Wait()
	if errs[0] != nil {
		t.Errorf("good change: %v", errs[0])
	}
	if errs[1] == nil {
		t.Errorf("bad change succeeded")
	}
	got, err := f.ovs.dumpFlows(ctx, f.bridge, flowsWithCookie(good[0].Cookie))
	if err != nil {
		t.Fatal(err)
	}
	if !sameFlows(got, good) {
		t.Errorf("the good change's flows are not in the switch: %s", fmt.Sprint(got))
	}
}

// TestIntegrationConcurrentPlugs plugs veth pairs as the ports of many
// attachments, one per call from as many goroutines, as a node's CNI ADDs
// at the same time do, beside one call whose interface does not exist:
// the fabric runs the calls that arrive together as one, and the bad one
// fails alone. Every good plug ends up whole and plugged, each with its
// owner.
func TestIntegrationConcurrentPlugs(t *testing.T) {
	f, inst := startFabric(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	const n = 12
	var plugs []fabric.Plug
	var atts []fabric.LocalAttachment
	for i := range n {
		att := fabric.LocalAttachment{VNI: 9, IP: netip.AddrFrom4([4]byte{10, 9, 0, byte(1 + i)})}
		newGuest(t, ctx, inst, att)
		atts = append(atts, att)
		plugs = append(plugs, fabric.Plug{LocalAttachment: att, Owner: fmt.Sprintf("c%d/net1", i)})
	}
	missing := fabric.Plug{LocalAttachment: fabric.LocalAttachment{VNI: 9, IP: netip.MustParseAddr("10.9.0.200")}, Owner: "gone/net1"}
	errs := make([]error, n+1)
	var wg sync.WaitGroup
	for i, p := range append(slices.Clone(plugs), missing) {
		wg.Go(func() { errs[i] = f.PlugLocal(ctx, p) })
	}
	wg.Wait()
	for i, err := range errs[:n] {
		if err != nil {
			t.Errorf("PlugLocal of %v: %v", plugs[i], err)
		}
	}
	if errs[n] == nil {
		t.Errorf("PlugLocal of %v, whose interface does not exist, succeeded", missing)
	}
	got, err := f.Plugs(ctx, atts...)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(got, plugs, cmpopts.EquateComparable(netip.Addr{}), cmpopts.SortSlices(func(a, b fabric.Plug) bool { return a.IP.Less(b.IP) })); diff != "" {
		t.Errorf("Plugs (-got +want):\n%s", diff)
	}
	inv := list(t, f)
	for _, att := range atts {
		if !slices.Contains(inv.Local, att) {
			t.Errorf("List: %v is not whole: %+v", att, inv)
		}
	}
}
