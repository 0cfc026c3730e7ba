package ipam

import (
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestLockNameRoundTrip(t *testing.T) {
	tests := []struct {
		vni  uint32
		addr string
		want string
	}{
		{1, "10.0.0.5", "v1-1-10-0-0-5"},
		{2097151, "192.168.255.254", "v1-2097151-192-168-255-254"},
		{300, "172.16.0.0", "v1-300-172-16-0-0"},
		{7, "0.0.0.0", "v1-7-0-0-0-0"},
		{7, "255.255.255.255", "v1-7-255-255-255-255"},
	}
	for _, tc := range tests {
		t.Run(tc.want, func(t *testing.T) {
			addr := netip.MustParseAddr(tc.addr)
			name := LockName(tc.vni, addr)
			if name != tc.want {
				t.Errorf("LockName(%d, %s) = %q, want %q", tc.vni, addr, name, tc.want)
			}
			vni, got, err := ParseLockName(name)
			if err != nil {
				t.Fatalf("ParseLockName(%q): %v", name, err)
			}
			if vni != tc.vni || got != addr {
				t.Errorf("ParseLockName(%q) = %d, %s; want %d, %s", name, vni, got, tc.vni, addr)
			}
		})
	}
}

func TestParseLockNameRejectsMalformed(t *testing.T) {
	for _, name := range []string{
		"",
		"v1-",
		"v2-1-10-0-0-5",
		"V1-1-10-0-0-5",
		"v1-1-10-0-0",
		"v1-1-10-0-0-5-6",
		"v1-0-10-0-0-5",          // VNI 0 is not a Subnet's
		"v1-2097152-10-0-0-5",    // above the largest VNI
		"v1-1-10-0-0-256",        // octet too large
		"v1-01-10-0-0-5",         // leading zero
		"v1-1-10-00-0-5",         // leading zero in an octet
		"v1-+1-10-0-0-5",         // sign
		"v1--1-10-0-0-5",         // empty VNI
		"v1-1-10-0--5",           // empty octet
		"v1-1-10-0-0-5 ",         // trailing space
		"v1-1-10-0-0-0x5",        // hex
		"v1-99999999999-1-2-3-4", // overflows uint32
		"x-v1-1-10-0-0-5",
	} {
		if vni, addr, err := ParseLockName(name); err == nil {
			t.Errorf("ParseLockName(%q) = %d, %s, nil; want an error", name, vni, addr)
		}
	}
}

func TestAssignableRange(t *testing.T) {
	tests := []struct {
		block       string
		first, last string
		size        uint64
	}{
		{"10.0.0.0/24", "10.0.0.2", "10.0.0.254", 253},
		{"10.0.0.8/29", "10.0.0.10", "10.0.0.14", 5},
		{"10.0.0.4/30", "10.0.0.4", "10.0.0.7", 4},
		{"10.0.0.6/31", "10.0.0.6", "10.0.0.7", 2},
		{"10.0.0.9/32", "10.0.0.9", "10.0.0.9", 1},
		// The ends of the IPv4 space: no wrap-around.
		{"255.255.255.0/24", "255.255.255.2", "255.255.255.254", 253},
		{"255.255.255.255/32", "255.255.255.255", "255.255.255.255", 1},
		{"255.255.255.252/30", "255.255.255.252", "255.255.255.255", 4},
		{"0.0.0.0/32", "0.0.0.0", "0.0.0.0", 1},
		{"0.0.0.0/0", "0.0.0.2", "255.255.255.254", 1<<32 - 3},
	}
	for _, tc := range tests {
		t.Run(tc.block, func(t *testing.T) {
			r, err := assignableRange(netip.MustParsePrefix(tc.block))
			if err != nil {
				t.Fatal(err)
			}
			got := []string{uint32ToAddr(r.first).String(), uint32ToAddr(r.last).String()}
			if diff := cmp.Diff(got, []string{tc.first, tc.last}); diff != "" {
				t.Errorf("range (-got +want):\n%s", diff)
			}
			if r.size() != tc.size {
				t.Errorf("size = %d, want %d", r.size(), tc.size)
			}
		})
	}
	if _, err := assignableRange(netip.MustParsePrefix("fd00::/64")); err == nil {
		t.Error("assignableRange of an IPv6 block: got no error")
	}
}

func TestAddressConversionAtTheEnds(t *testing.T) {
	for _, s := range []string{"0.0.0.0", "0.0.0.1", "127.255.255.255", "128.0.0.0", "255.255.255.254", "255.255.255.255"} {
		a := netip.MustParseAddr(s)
		if got := uint32ToAddr(addrToUint32(a)); got != a {
			t.Errorf("round trip of %s = %s", a, got)
		}
	}
	if got := addrToUint32(netip.MustParseAddr("255.255.255.255")); got != 1<<32-1 {
		t.Errorf("addrToUint32(255.255.255.255) = %d, want %d", got, uint32(1<<32-1))
	}
	if got := uint32ToAddr(0); got != netip.MustParseAddr("0.0.0.0") {
		t.Errorf("uint32ToAddr(0) = %s", got)
	}
}

func TestPickFreeCoversTheRange(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	intN := func(n uint64) uint64 { return rng.Uint64N(n) }
	tests := []struct {
		name  string
		block string
		taken []string
	}{
		{"empty /29", "10.0.0.8/29", nil},
		{"/30 with one taken", "10.0.0.4/30", []string{"10.0.0.5"}},
		{"/24 mostly taken", "10.1.0.0/24", nil}, // filled below
		{"top of the IPv4 space", "255.255.255.248/29", []string{"255.255.255.250"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := assignableRange(netip.MustParsePrefix(tc.block))
			if err != nil {
				t.Fatal(err)
			}
			taken := map[uint32]bool{}
			for _, s := range tc.taken {
				taken[addrToUint32(netip.MustParseAddr(s))] = true
			}
			if tc.taken == nil && r.size() > 100 {
				// Take all but 5 addresses, forcing the listing path.
				for a := r.first; a <= r.last-5; a++ {
					taken[a] = true
				}
			}
			want := map[uint32]bool{}
			for a := uint64(r.first); a <= uint64(r.last); a++ {
				if !taken[uint32(a)] {
					want[uint32(a)] = true
				}
			}
			got := map[uint32]bool{}
			for range 100 * len(want) {
				a, ok := pickFree(r, uint64(len(taken)), func(a uint32) bool { return taken[a] }, intN)
				if !ok {
					t.Fatal("pickFree found no free address")
				}
				if !want[a] {
					t.Fatalf("pickFree returned %s, which is taken or outside the range", uint32ToAddr(a))
				}
				got[a] = true
			}
			if diff := cmp.Diff(got, want); diff != "" {
				t.Errorf("addresses picked in %d tries (-got +want):\n%s", 100*len(want), diff)
			}
		})
	}
}

func TestPickFreeFull(t *testing.T) {
	r, err := assignableRange(netip.MustParsePrefix("10.0.0.4/30"))
	if err != nil {
		t.Fatal(err)
	}
	a, ok := pickFree(r, 4, func(uint32) bool { return true }, func(n uint64) uint64 { return 0 })
	if ok {
		t.Errorf("pickFree in a full range = %s, true; want false", uint32ToAddr(a))
	}
	// A stale count that claims room must not invent an address.
	a, ok = pickFree(r, 3, func(uint32) bool { return true }, func(n uint64) uint64 { return 0 })
	if ok {
		t.Errorf("pickFree with every address taken = %s, true; want false", uint32ToAddr(a))
	}
}
