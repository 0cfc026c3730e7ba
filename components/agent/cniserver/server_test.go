package cniserver

import (
	"net"
	"net/http"
	"net/netip"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
)

func TestCheckRequestedIPs(t *testing.T) {
	has := netip.MustParseAddr("10.0.0.5")
	tests := []struct {
		name    string
		ips     []string
		wantErr bool
	}{
		{"none asked", nil, false},
		{"the address", []string{"10.0.0.5"}, false},
		{"the address with a prefix", []string{"10.0.0.5/24"}, false},
		{"one of several", []string{"10.0.0.9", "10.0.0.5"}, false},
		{"another", []string{"10.0.0.9"}, true},
		{"not an address", []string{"ten"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkRequestedIPs(tt.ips, has)
			if got := err != nil; got != tt.wantErr {
				t.Errorf("checkRequestedIPs(%q) = %v, want an error: %t", tt.ips, err, tt.wantErr)
			}
		})
	}
}

func TestCheckPrevResult(t *testing.T) {
	addr := netip.MustParsePrefix("10.0.0.5/24")
	result := func(ip string) string {
		return `{"cniVersion":"1.0.0","ips":[{"address":"` + ip + `"}]}`
	}
	tests := []struct {
		name    string
		raw     string
		wantErr bool
	}{
		{"no previous result", "", false},
		{"the address", result("10.0.0.5/24"), false},
		{"another prefix length", result("10.0.0.5/16"), true},
		{"another address", result("10.0.0.6/24"), true},
		{"not a result", `{"cniVersion":`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkPrevResult([]byte(tt.raw), addr)
			if got := err != nil; got != tt.wantErr {
				t.Errorf("checkPrevResult(%s) = %v, want an error: %t", tt.raw, err, tt.wantErr)
			}
		})
	}
}

func TestHTTPStatus(t *testing.T) {
	for code, want := range map[uint]int{
		types.ErrTryAgainLater:        http.StatusServiceUnavailable,
		types.ErrPluginNotAvailable:   http.StatusServiceUnavailable,
		types.ErrInternal:             http.StatusInternalServerError,
		types.ErrInvalidNetworkConfig: http.StatusBadRequest,
	} {
		if got := httpStatus(code); got != want {
			t.Errorf("httpStatus(%d) = %d, want %d", code, got, want)
		}
	}
}

func TestCheckRequestedMAC(t *testing.T) {
	has := net.HardwareAddr{0x06, 0x14, 0x00, 0x05, 0x00, 0x07}
	for _, tt := range []struct {
		mac     string
		wantErr bool
	}{
		{"", false},
		{"06:14:00:05:00:07", false},
		{"06-14-00-05-00-07", false},
		{"02:00:00:00:00:01", true},
		{"not a mac", true},
	} {
		err := checkRequestedMAC(tt.mac, has)
		if got := err != nil; got != tt.wantErr {
			t.Errorf("checkRequestedMAC(%q) = %v, want an error: %t", tt.mac, err, tt.wantErr)
		}
	}
}
