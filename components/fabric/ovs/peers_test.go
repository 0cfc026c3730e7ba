package ovs

import (
	"context"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kos-sdn/kos/components/fabric"
)

// recordingFilter remembers each Set.
type recordingFilter struct{ sets [][]netip.Addr }

func (r *recordingFilter) Set(_ context.Context, _ int, hosts []netip.Addr) error {
	r.sets = append(r.sets, hosts)
	return nil
}

// TestPeers checks when the filter is set and with which hosts: a host
// joins before the first of its remote attachments and leaves after the
// last, and what the switch holds is learnt once, at first need.
func TestPeers(t *testing.T) {
	h1, h2 := netip.MustParseAddr("192.168.0.1"), netip.MustParseAddr("192.168.0.2")
	r := func(ip string, host netip.Addr) fabric.RemoteAttachment {
		return fabric.RemoteAttachment{VNI: 7, IP: netip.MustParseAddr(ip), HostIP: host}
	}
	learnt := 0
	learn := func(context.Context) (map[remoteKey]netip.Addr, error) {
		learnt++
		return map[remoteKey]netip.Addr{{7, netip.MustParseAddr("10.0.0.9")}: h2}, nil
	}
	f := &recordingFilter{}
	p := newPeers(f)
	ctx := t.Context()
	steps := []struct {
		name string
		do   func() error
		want [][]netip.Addr // the Sets it makes
	}{
		{"a new host", func() error { return p.admit(ctx, 4789, []fabric.RemoteAttachment{r("10.0.0.1", h1)}, learn) },
			[][]netip.Addr{{h1, h2}}},
		{"a known host", func() error { return p.admit(ctx, 4789, []fabric.RemoteAttachment{r("10.0.0.2", h1)}, learn) }, nil},
		{"one of two attachments of a host", func() error { return p.forget(ctx, 4789, []fabric.RemoteAttachment{r("10.0.0.1", h1)}) }, nil},
		{"the last attachment of a host", func() error { return p.forget(ctx, 4789, []fabric.RemoteAttachment{r("10.0.0.2", h1)}) },
			[][]netip.Addr{{h2}}},
		{"an attachment that moved host", func() error { return p.admit(ctx, 4789, []fabric.RemoteAttachment{r("10.0.0.9", h1)}, learn) },
			[][]netip.Addr{{h1}}},
		{"ensure", func() error { return p.ensure(ctx, 4789, learn) }, [][]netip.Addr{{h1}}},
	}
	for _, s := range steps {
		f.sets = nil
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if diff := cmp.Diff(s.want, f.sets, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
			t.Errorf("%s: Sets differ (-want +got):\n%s", s.name, diff)
		}
	}
	if learnt != 1 {
		t.Errorf("learnt from the switch %d times, want once", learnt)
	}

	// Without a filter nothing is learnt or set.
	none := newPeers(nil)
	if err := none.admit(ctx, 4789, []fabric.RemoteAttachment{r("10.0.0.1", h1)}, learn); err != nil {
		t.Fatal(err)
	}
	if learnt != 1 {
		t.Errorf("a fabric without a filter read the switch")
	}
}
