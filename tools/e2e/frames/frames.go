// Package frames builds the packets the e2e tests send by hand: an IPv4
// UDP datagram with any source address (for a pod that spoofs one), and a
// VXLAN frame around an Ethernet frame (for traffic injected into a
// node's tunnel port from outside KOS).
package frames

import (
	"encoding/binary"
	"net"
	"net/netip"
)

// IPv4UDP returns an IPv4 packet holding a UDP datagram (no UDP checksum,
// which IPv4 allows).
func IPv4UDP(src, dst netip.Addr, sport, dport uint16, payload []byte) []byte {
	udp := make([]byte, 8+len(payload))
	binary.BigEndian.PutUint16(udp[0:], sport)
	binary.BigEndian.PutUint16(udp[2:], dport)
	binary.BigEndian.PutUint16(udp[4:], uint16(len(udp)))
	copy(udp[8:], payload)
	ip := make([]byte, 20, 20+len(udp))
	ip[0] = 0x45 // version 4, 5 words of header
	binary.BigEndian.PutUint16(ip[2:], uint16(20+len(udp)))
	ip[8] = 64 // TTL
	ip[9] = 17 // UDP
	s4, d4 := src.As4(), dst.As4()
	copy(ip[12:], s4[:])
	copy(ip[16:], d4[:])
	binary.BigEndian.PutUint16(ip[10:], checksum(ip))
	return append(ip, udp...)
}

// Ethernet returns an Ethernet frame of an IPv4 packet.
func Ethernet(dst, src net.HardwareAddr, ipv4 []byte) []byte {
	f := make([]byte, 14, 14+len(ipv4))
	copy(f[0:], dst)
	copy(f[6:], src)
	binary.BigEndian.PutUint16(f[12:], 0x0800)
	return append(f, ipv4...)
}

// VXLAN returns the UDP payload of a VXLAN packet of network vni carrying
// the Ethernet frame (RFC 7348: the I flag, the VNI, reserved bits zero).
func VXLAN(vni uint32, frame []byte) []byte {
	h := make([]byte, 8, 8+len(frame))
	h[0] = 0x08
	h[4], h[5], h[6] = byte(vni>>16), byte(vni>>8), byte(vni)
	return append(h, frame...)
}

func checksum(b []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}
