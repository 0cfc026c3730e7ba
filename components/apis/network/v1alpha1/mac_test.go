package v1alpha1

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/kos-sdn/kos/components/apis/network"
)

func TestMACAddressAndInterfaceName(t *testing.T) {
	tests := []struct {
		name     string
		vni      uint32
		ip       string
		wantMAC  string
		wantName string
	}{
		{"the documented example", 1, "10.0.0.5", "06:00:00:05:00:01", "kos060000050001"},
		{"lowest VNI, start of 10/8", 1, "10.0.0.0", "06:00:00:00:00:01", "kos060000000001"},
		{"lowest VNI, end of 10/8", 1, "10.255.255.255", "06:ff:ff:ff:00:01", "kos06ffffff0001"},
		{"lowest VNI, start of 172.16/12", 1, "172.16.0.0", "02:10:00:00:00:01", "kos021000000001"},
		{"lowest VNI, end of 172.16/12", 1, "172.31.255.255", "02:1f:ff:ff:00:01", "kos021fffff0001"},
		{"lowest VNI, start of 192.168/16", 1, "192.168.0.0", "02:a8:00:00:00:01", "kos02a800000001"},
		{"lowest VNI, end of 192.168/16", 1, "192.168.255.255", "02:a8:ff:ff:00:01", "kos02a8ffff0001"},
		{"highest VNI, start of 10/8", network.MaxVNI, "10.0.0.0", "fe:00:00:00:ff:ff", "kosfe000000ffff"},
		{"highest VNI, end of 10/8", network.MaxVNI, "10.255.255.255", "fe:ff:ff:ff:ff:ff", "kosfeffffffffff"},
		{"highest VNI, start of 172.16/12", network.MaxVNI, "172.16.0.0", "fa:10:00:00:ff:ff", "kosfa100000ffff"},
		{"highest VNI, end of 172.16/12", network.MaxVNI, "172.31.255.255", "fa:1f:ff:ff:ff:ff", "kosfa1fffffffff"},
		{"highest VNI, start of 192.168/16", network.MaxVNI, "192.168.0.0", "fa:a8:00:00:ff:ff", "kosfaa80000ffff"},
		{"highest VNI, end of 192.168/16", network.MaxVNI, "192.168.255.255", "fa:a8:ff:ff:ff:ff", "kosfaa8ffffffff"},
		{"VNI bits 8-15 go to byte 4", 0x1234, "10.1.2.3", "06:01:02:03:12:34", "kos060102031234"},
		{"VNI bit 16 goes to byte 0", 1 << 16, "10.0.0.5", "0e:00:00:05:00:00", "kos0e0000050000"},
		{"VNI bit 20 goes to byte 0", 1 << 20, "192.168.1.1", "82:a8:01:01:00:00", "kos82a801010000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ip := netip.MustParseAddr(tt.ip)
			gotMAC := MACAddress(tt.vni, ip)
			if got := gotMAC.String(); got != tt.wantMAC {
				t.Errorf("MACAddress(%d, %s) = %s, want %s", tt.vni, tt.ip, got, tt.wantMAC)
			}
			if got := InterfaceName(gotMAC); got != tt.wantName {
				t.Errorf("InterfaceName(%s) = %s, want %s", gotMAC, got, tt.wantName)
			}
			if got := len(tt.wantName); got > 15 {
				t.Errorf("interface name %s has %d characters, Linux allows 15", tt.wantName, got)
			}
		})
	}
}

func TestMACAddressNotIPv4(t *testing.T) {
	for _, ip := range []netip.Addr{{}, netip.MustParseAddr("fd00::1")} {
		if got := MACAddress(1, ip); got != nil {
			t.Errorf("MACAddress(1, %v) = %v, want nil", ip, got)
		}
	}
}

// TestMACAddressDistinct checks that distinct attachments get distinct MAC
// addresses across the corners of the VNI range and the RFC 1918 blocks.
func TestMACAddressDistinct(t *testing.T) {
	vnis := []uint32{1, 2, 255, 256, 8191, 8192, 65535, 65536, 1 << 20, network.MaxVNI - 1, network.MaxVNI}
	var ips []netip.Addr
	for _, s := range []string{
		"10.0.0.0", "10.0.0.1", "10.16.0.1", "10.168.0.1", "10.255.255.255",
		"172.16.0.0", "172.16.0.1", "172.31.255.255",
		"192.168.0.0", "192.168.0.1", "192.168.255.255",
	} {
		ips = append(ips, netip.MustParseAddr(s))
	}
	seen := map[string]string{}
	for _, vni := range vnis {
		for _, ip := range ips {
			mac := MACAddress(vni, ip).String()
			this := fmt.Sprintf("%d/%s", vni, ip)
			if prev, ok := seen[mac]; ok {
				t.Errorf("%s and %s share MAC %s", this, prev, mac)
			}
			seen[mac] = this
		}
	}
}
