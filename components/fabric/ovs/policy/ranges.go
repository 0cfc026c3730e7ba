package policy

import (
	"net/netip"
	"slices"
)

// MaskedPort is a set of ports as OpenFlow matches it: the ports p with
// p&Mask == Value.
type MaskedPort struct {
	Value, Mask uint16
}

// PortMasks returns the fewest value/mask pairs whose union is the ports
// first through last, in ascending order: each is the largest aligned
// block of ports that starts where the previous ended and does not pass
// last. A range of n ports takes at most 2·log2(n) pairs (1024-65535
// takes 6).
func PortMasks(first, last uint16) []MaskedPort {
	var out []MaskedPort
	lo, hi := uint32(first), uint32(last)
	for lo <= hi {
		// The largest block size 2^k with lo aligned to it that stays
		// within [lo, hi].
		size := uint32(1)
		for size < 1<<16 && lo&(size*2-1) == 0 && lo+size*2-1 <= hi {
			size *= 2
		}
		out = append(out, MaskedPort{Value: uint16(lo), Mask: uint16(^(size - 1))})
		lo += size
	}
	return out
}

// Subtract returns prefix less the addresses of except, as the fewest
// prefixes that split prefix along its bits, sorted by address. It is
// empty when except covers prefix.
func Subtract(prefix netip.Prefix, except []netip.Prefix) []netip.Prefix {
	prefix = prefix.Masked()
	var overlapping []netip.Prefix
	for _, e := range except {
		e = e.Masked()
		if !e.Overlaps(prefix) {
			continue
		}
		if e.Bits() <= prefix.Bits() {
			return nil // e covers prefix
		}
		overlapping = append(overlapping, e)
	}
	if len(overlapping) == 0 {
		return []netip.Prefix{prefix}
	}
	// Some except lies strictly within prefix: split prefix in halves
	// and subtract from each.
	low := netip.PrefixFrom(prefix.Addr(), prefix.Bits()+1)
	high := netip.PrefixFrom(lastOf(low).Next(), prefix.Bits()+1)
	return slices.Concat(Subtract(low, overlapping), Subtract(high, overlapping))
}

// lastOf returns the last address of an IPv4 prefix.
func lastOf(p netip.Prefix) netip.Addr {
	a := p.Addr().As4()
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	v |= uint32(1)<<(32-p.Bits()) - 1
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}
