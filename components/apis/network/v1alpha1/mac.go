package v1alpha1

import (
	"encoding/hex"
	"net"
	"net/netip"
)

// MACAddress returns the MAC address of the attachment with IPv4 address ip
// in virtual network vni. It is a function of the two so that every node
// computes it alike and no one needs to store it:
//
//	byte 0: bits 16–20 of the VNI in its top five bits, bit 1 of the IP's
//	        first byte in bit 2, and the locally-administered bit (0x02)
//	bytes 1–3: the IP's last three bytes
//	bytes 4–5: the VNI's low 16 bits
//
// Within RFC 1918 space, bit 1 of the first byte tells 10/8 from 172.16/12
// and 192.168/16, and the second byte tells those two apart, so distinct
// (VNI, IP) pairs get distinct addresses. MACAddress returns nil when ip is
// not an IPv4 address.
func MACAddress(vni uint32, ip netip.Addr) net.HardwareAddr {
	if !ip.Is4() {
		return nil
	}
	b := ip.As4()
	return net.HardwareAddr{
		byte(vni>>13)&0xF8 | (b[0]&2)<<1 | 2,
		b[1], b[2], b[3],
		byte(vni >> 8), byte(vni),
	}
}

// InterfaceName returns the name of the network interface of a local
// attachment with MAC address mac: "kos" and the address's twelve hex
// digits, 15 characters, the most Linux allows.
func InterfaceName(mac net.HardwareAddr) string {
	return "kos" + hex.EncodeToString(mac)
}
