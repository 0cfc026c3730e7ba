package policy

import (
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestPortMasks(t *testing.T) {
	tests := []struct {
		first, last uint16
		want        []MaskedPort
	}{
		{80, 80, []MaskedPort{{80, 0xffff}}},
		{0, 65535, []MaskedPort{{0, 0}}},
		{8000, 8003, []MaskedPort{{8000, 0xfffc}}},
		{8000, 8004, []MaskedPort{{8000, 0xfffc}, {8004, 0xffff}}},
		{1024, 65535, []MaskedPort{{1024, 0xfc00}, {2048, 0xf800}, {4096, 0xf000}, {8192, 0xe000}, {16384, 0xc000}, {32768, 0x8000}}},
		{1, 6, []MaskedPort{{1, 0xffff}, {2, 0xfffe}, {4, 0xfffe}, {6, 0xffff}}},
		{65535, 65535, []MaskedPort{{65535, 0xffff}}},
		{65534, 65535, []MaskedPort{{65534, 0xfffe}}},
	}
	for _, tt := range tests {
		got := PortMasks(tt.first, tt.last)
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("PortMasks(%d, %d) differs (-want +got):\n%s", tt.first, tt.last, diff)
		}
	}
}

// TestPortMasksCover checks, for random ranges, that the pairs match every
// port of the range and no other, and that no two overlap.
func TestPortMasksCover(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 40 {
		a, b := uint16(r.IntN(65536)), uint16(r.IntN(65536))
		if a > b {
			a, b = b, a
		}
		masks := PortMasks(a, b)
		if len(masks) > 32 {
			t.Errorf("PortMasks(%d, %d) = %d pairs, want at most 32", a, b, len(masks))
		}
		for p := 0; p < 65536; p++ {
			n := 0
			for _, m := range masks {
				if uint16(p)&m.Mask == m.Value {
					n++
				}
			}
			want := 0
			if p >= int(a) && p <= int(b) {
				want = 1
			}
			if n != want {
				t.Fatalf("PortMasks(%d, %d) = %v matches port %d %d times, want %d", a, b, masks, p, n, want)
			}
		}
	}
}

func TestSubtract(t *testing.T) {
	pfx := netip.MustParsePrefix
	tests := []struct {
		name   string
		prefix string
		except []string
		want   []netip.Prefix
	}{
		{"nothing", "10.0.0.0/16", nil, []netip.Prefix{pfx("10.0.0.0/16")}},
		{"outside", "10.0.0.0/16", []string{"10.1.0.0/24"}, []netip.Prefix{pfx("10.0.0.0/16")}},
		{"all", "10.0.0.0/16", []string{"10.0.0.0/8"}, nil},
		{"itself", "10.0.0.0/16", []string{"10.0.0.0/16"}, nil},
		{"one half", "10.0.0.0/16", []string{"10.0.128.0/17"}, []netip.Prefix{pfx("10.0.0.0/17")}},
		{"one address", "10.0.0.0/30", []string{"10.0.0.2/32"},
			[]netip.Prefix{pfx("10.0.0.0/31"), pfx("10.0.0.3/32")}},
		{"two", "10.0.0.0/24", []string{"10.0.0.0/26", "10.0.0.192/26"},
			[]netip.Prefix{pfx("10.0.0.64/26"), pfx("10.0.0.128/26")}},
		{"everything but one", "0.0.0.0/0", []string{"192.168.0.0/16"},
			[]netip.Prefix{pfx("0.0.0.0/1"), pfx("128.0.0.0/2"), pfx("192.0.0.0/9"), pfx("192.128.0.0/11"),
				pfx("192.160.0.0/13"), pfx("192.169.0.0/16"), pfx("192.170.0.0/15"), pfx("192.172.0.0/14"),
				pfx("192.176.0.0/12"), pfx("192.192.0.0/10"), pfx("193.0.0.0/8"), pfx("194.0.0.0/7"),
				pfx("196.0.0.0/6"), pfx("200.0.0.0/5"), pfx("208.0.0.0/4"), pfx("224.0.0.0/3")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var except []netip.Prefix
			for _, e := range tt.except {
				except = append(except, pfx(e))
			}
			got := Subtract(pfx(tt.prefix), except)
			if diff := cmp.Diff(tt.want, got, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
				t.Errorf("Subtract differs (-want +got):\n%s", diff)
			}
		})
	}
}
