package ipam

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/kos-sdn/kos/components/apis/network"
)

// lockNamePrefix starts the name of every IPLock; the "1" is the version of
// the naming scheme.
const lockNamePrefix = "v1-"

// LockName returns the name of the IPLock that holds addr on vni:
// v1-<vni>-<a>-<b>-<c>-<d>, such as v1-1-10-0-0-5.
func LockName(vni uint32, addr netip.Addr) string {
	a := addr.As4()
	return fmt.Sprintf("%s%d-%d-%d-%d-%d", lockNamePrefix, vni, a[0], a[1], a[2], a[3])
}

// ParseLockName returns the VNI and address that an IPLock's name encodes. It
// accepts exactly what LockName writes: decimal numbers without sign or
// leading zeros, a VNI a Subnet may use, and four octets.
func ParseLockName(name string) (vni uint32, addr netip.Addr, err error) {
	rest, ok := strings.CutPrefix(name, lockNamePrefix)
	if !ok {
		return 0, netip.Addr{}, fmt.Errorf("IP lock name %q does not start with %q", name, lockNamePrefix)
	}
	parts := strings.Split(rest, "-")
	if len(parts) != 5 {
		return 0, netip.Addr{}, fmt.Errorf("IP lock name %q: want v1-<vni>-<a>-<b>-<c>-<d>", name)
	}
	n, err := parseDecimal(parts[0], network.MaxVNI)
	if err != nil || n < network.MinVNI {
		return 0, netip.Addr{}, fmt.Errorf("IP lock name %q: VNI %q is not a decimal in [%d,%d]", name, parts[0], network.MinVNI, network.MaxVNI)
	}
	var octets [4]byte
	for i, p := range parts[1:] {
		o, err := parseDecimal(p, 255)
		if err != nil {
			return 0, netip.Addr{}, fmt.Errorf("IP lock name %q: octet %q is not a decimal in [0,255]", name, p)
		}
		octets[i] = byte(o)
	}
	return uint32(n), netip.AddrFrom4(octets), nil
}

// parseDecimal parses a plain decimal: digits only, no leading zero unless
// the number is 0, at most max.
func parseDecimal(s string, max uint64) (uint64, error) {
	if s == "" || (len(s) > 1 && s[0] == '0') {
		return 0, errors.New("not canonical")
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, errors.New("not a decimal")
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n > max {
		return 0, errors.New("out of range")
	}
	return n, nil
}

// addrRange is an inclusive range of IPv4 addresses, as numbers.
type addrRange struct {
	first, last uint32
}

// size returns how many addresses the range holds; up to 2^32, hence uint64.
func (r addrRange) size() uint64 { return uint64(r.last) - uint64(r.first) + 1 }

// contains reports whether a lies in the range.
func (r addrRange) contains(a uint32) bool { return a >= r.first && a <= r.last }

// assignableRange returns the addresses of an IPv4 block that IPAM gives out.
// In blocks of 5 or more addresses it leaves out the network address, the
// one after it (customarily the gateway) and the broadcast address; smaller
// blocks (/30, /31, /32) have no room to spare and give out every address.
func assignableRange(block netip.Prefix) (addrRange, error) {
	if !block.Addr().Is4() {
		return addrRange{}, fmt.Errorf("%s is not an IPv4 block", block)
	}
	block = block.Masked()
	first := addrToUint32(block.Addr())
	size := uint64(1) << (32 - block.Bits())
	last := uint32(uint64(first) + size - 1)
	if size >= 5 {
		return addrRange{first: first + 2, last: last - 1}, nil
	}
	return addrRange{first: first, last: last}, nil
}

func addrToUint32(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func uint32ToAddr(n uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
}

// probes is how many random addresses pickFree tries before it lists the
// free ones: with at least half the range free, the chance that all of them
// are taken is below one in a billion.
const probes = 32

// pickFree returns an address of r, chosen uniformly at random among those
// for which taken is false, or false when there is none. nTaken is how many
// addresses of r are taken; intN(n) returns a random number in [0,n).
func pickFree(r addrRange, nTaken uint64, taken func(uint32) bool, intN func(uint64) uint64) (uint32, bool) {
	size := r.size()
	if nTaken >= size {
		return 0, false
	}
	// Rejection sampling is uniform over the free addresses and, in a range
	// at most half taken, quick; a fuller range is listed instead.
	if nTaken <= size/2 {
		for range probes {
			a := r.first + uint32(intN(size))
			if !taken(a) {
				return a, true
			}
		}
	}
	// A range fuller than half has at most 2*nTaken addresses to walk, and
	// nTaken is bounded by the locks in the cache.
	var free []uint32
	for a := uint64(r.first); a <= uint64(r.last); a++ {
		if !taken(uint32(a)) {
			free = append(free, uint32(a))
		}
	}
	if len(free) == 0 {
		return 0, false
	}
	return free[intN(uint64(len(free)))], true
}
