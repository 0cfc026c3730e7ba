package frames

import (
	"encoding/binary"
	"net"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestIPv4UDP(t *testing.T) {
	src, dst := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	p := IPv4UDP(src, dst, 40000, 9999, []byte("abc"))
	if len(p) != 20+8+3 {
		t.Fatalf("length %d, want 31", len(p))
	}
	// A header with its checksum sums to all ones.
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(p[i:]))
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	if sum != 0xffff {
		t.Errorf("header sums to %#x, want 0xffff", sum)
	}
	got := []any{p[0], binary.BigEndian.Uint16(p[2:]), p[9], netip.AddrFrom4([4]byte(p[12:16])), netip.AddrFrom4([4]byte(p[16:20])),
		binary.BigEndian.Uint16(p[20:]), binary.BigEndian.Uint16(p[22:]), binary.BigEndian.Uint16(p[24:]), string(p[28:])}
	want := []any{byte(0x45), uint16(31), byte(17), src, dst, uint16(40000), uint16(9999), uint16(11), "abc"}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("fields (-want +got):\n%s", diff)
	}
}

func TestVXLANEthernet(t *testing.T) {
	dst, _ := net.ParseMAC("06:14:00:05:00:07")
	src, _ := net.ParseMAC("06:14:00:05:00:08")
	f := VXLAN(0x123456, Ethernet(dst, src, []byte{0x45}))
	want := []byte{0x08, 0, 0, 0, 0x12, 0x34, 0x56, 0, 6, 0x14, 0, 5, 0, 7, 6, 0x14, 0, 5, 0, 8, 0x08, 0x00, 0x45}
	if diff := cmp.Diff(want, f); diff != "" {
		t.Errorf("frame (-want +got):\n%s", diff)
	}
}
