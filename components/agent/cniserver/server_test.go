package cniserver

import (
	"net"
	"net/http"
	"net/netip"
	"os"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/google/go-cmp/cmp"

	"github.com/kos-sdn/kos/components/cni"
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

func TestStaleSandboxes(t *testing.T) {
	devNull := func() *os.File {
		f, err := os.Open(os.DevNull)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	var s sandboxes
	s.byKey = map[string]*sandbox{
		"ns/web-0-net1": {req: cni.Request{ContainerID: "c0", IfName: "net1", Network: "blue", Subnet: "blue"}, netns: devNull()},
		"ns/web-1-net1": {req: cni.Request{ContainerID: "c1", IfName: "net1", Network: "blue", Subnet: "blue"}, netns: devNull()},
		"ns/web-1-net2": {req: cni.Request{ContainerID: "c1", IfName: "net2", Network: "red", Subnet: "red"}, netns: devNull()},
		"ns/web-2-net1": {req: cni.Request{ContainerID: "c2", IfName: "net1", Network: "blue", Subnet: "green"}, netns: devNull()},
	}
	for _, tt := range []struct {
		name            string
		network, subnet string
		valid           []cni.Attachment
		want            []string
	}{
		{"all valid", "blue", "blue", []cni.Attachment{{ContainerID: "c0", IfName: "net1"}, {ContainerID: "c1", IfName: "net1"}}, nil},
		{"one gone", "blue", "blue", []cni.Attachment{{ContainerID: "c1", IfName: "net1"}}, []string{"ns/web-0-net1"}},
		{"another interface of a valid sandbox", "blue", "blue", []cni.Attachment{{ContainerID: "c0", IfName: "net1"}, {ContainerID: "c1", IfName: "net2"}}, []string{"ns/web-1-net1"}},
		{"none valid", "blue", "blue", nil, []string{"ns/web-0-net1", "ns/web-1-net1"}},
		{"another network", "red", "red", nil, []string{"ns/web-1-net2"}},
		{"an unknown network", "black", "black", nil, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(s.stale(tt.network, tt.subnet, tt.valid), tt.want); diff != "" {
				t.Errorf("stale (-got +want):\n%s", diff)
			}
		})
	}
}

func TestGeneratedName(t *testing.T) {
	for name, want := range map[string]bool{"net1": true, "net12": true, "net": false, "data0": false, "eth0": false, "net1a": false} {
		if got := generatedName.MatchString(name); got != want {
			t.Errorf("generatedName.MatchString(%q) = %t, want %t", name, got, want)
		}
	}
}
