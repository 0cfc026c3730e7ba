package fabric

import (
	"net/netip"
	"testing"

	"github.com/kos-sdn/kos/components/apis/network"
)

// TestLocalAttachmentInterfaceName checks that an attachment's names are
// the API's functions of its VNI and address.
func TestLocalAttachmentInterfaceName(t *testing.T) {
	att := LocalAttachment{VNI: 1, IP: netip.MustParseAddr("10.0.0.5")}
	if got, want := att.MAC().String(), "06:00:00:05:00:01"; got != want {
		t.Errorf("MAC() = %s, want %s", got, want)
	}
	if got, want := att.InterfaceName(), "kos060000050001"; got != want {
		t.Errorf("InterfaceName() = %s, want %s", got, want)
	}
}

func TestValidate(t *testing.T) {
	ip := netip.MustParseAddr("10.0.0.5")
	host := netip.MustParseAddr("192.168.0.2")
	tests := []struct {
		name    string
		att     interface{ Validate() error }
		wantErr bool
	}{
		{"local ok", LocalAttachment{VNI: 1, IP: ip}, false},
		{"local highest VNI", LocalAttachment{VNI: network.MaxVNI, IP: ip}, false},
		{"local VNI 0", LocalAttachment{VNI: 0, IP: ip}, true},
		{"local VNI too big", LocalAttachment{VNI: network.MaxVNI + 1, IP: ip}, true},
		{"local no IP", LocalAttachment{VNI: 1}, true},
		{"local IPv6", LocalAttachment{VNI: 1, IP: netip.MustParseAddr("fd00::5")}, true},
		{"remote ok", RemoteAttachment{VNI: 1, IP: ip, HostIP: host}, false},
		{"remote no host", RemoteAttachment{VNI: 1, IP: ip}, true},
		{"remote IPv6 host", RemoteAttachment{VNI: 1, IP: ip, HostIP: netip.MustParseAddr("fd00::2")}, true},
		{"remote VNI 0", RemoteAttachment{VNI: 0, IP: ip, HostIP: host}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.att.Validate()
			if got := err != nil; got != tt.wantErr {
				t.Errorf("Validate() = %v, want error: %t", err, tt.wantErr)
			}
		})
	}
}
