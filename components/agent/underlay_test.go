package agent

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/kos-sdn/kos/tools/ovsenv"
)

func TestValidateMTU(t *testing.T) {
	tests := []struct {
		mtu     int
		wantErr string
	}{
		{mtu: 0},
		{mtu: 576},
		{mtu: 1450},
		{mtu: 9216},
		{mtu: 575, wantErr: "--mtu 575: want 0 (from the underlay) or an MTU in [576,9216]"},
		{mtu: 9217, wantErr: "--mtu 9217: want 0 (from the underlay) or an MTU in [576,9216]"},
		{mtu: -1, wantErr: "--mtu -1: want 0 (from the underlay) or an MTU in [576,9216]"},
	}
	for _, tt := range tests {
		o := NewOptions()
		o.HostIP = "192.0.2.1"
		o.MTU = tt.mtu
		var got string
		if err := o.Validate(); err != nil {
			got = err.Error()
		}
		if got != tt.wantErr {
			t.Errorf("Validate with --mtu %d = %q, want %q", tt.mtu, got, tt.wantErr)
		}
	}
}

// TestIntegrationUnderlayMTU gives a network namespace an underlay of MTU
// 1400 that holds the node's address and checks the MTU the agent chooses
// for attachments there.
func TestIntegrationUnderlayMTU(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	node, peer := ovsenv.NetnsT(t), ovsenv.NetnsT(t)
	if err := ovsenv.AddVethPair(ctx, node, "ul0", peer, "ul0"); err != nil {
		t.Fatal(err)
	}
	hostIP := netip.MustParseAddr("192.168.60.1")
	late := netip.MustParseAddr("192.168.60.9")
	for _, cmd := range [][]string{
		{"ip", "link", "set", "ul0", "mtu", "1400", "up"},
		{"ip", "addr", "add", hostIP.String() + "/24", "dev", "ul0"},
		// Another interface, of another MTU, with another address.
		{"ip", "link", "add", "other", "mtu", "9000", "type", "veth", "peer", "name", "otherpeer"},
		{"ip", "addr", "add", "192.168.61.1/24", "dev", "other"},
	} {
		if _, err := node.Run(ctx, cmd[0], cmd[1:]...); err != nil {
			t.Fatal(err)
		}
	}

	tests := []struct {
		name    string
		given   int
		hostIP  netip.Addr
		wait    time.Duration
		before  func() // runs in the background as the agent looks
		want    int
		wantErr string
	}{
		{name: "from the underlay", hostIP: hostIP, wait: time.Second, want: 1350},
		{name: "from the underlay, looking once", hostIP: hostIP, want: 1350},
		{name: "given", given: 1300, hostIP: hostIP, wait: time.Second, want: 1300},
		{name: "given, more than the underlay carries", given: 1500, hostIP: hostIP, want: 1500},
		{name: "given, no underlay", given: 1300, hostIP: late, wait: time.Second, want: 1300},
		{name: "no underlay, looking once, is assumed Ethernet", hostIP: late, want: 1450},
		{name: "no underlay", hostIP: late, wait: time.Second,
			wantErr: "finding the underlay, the interface that holds --host-ip 192.168.60.9, for the MTU: waited 1s: no interface holds it; give --mtu"},
		{name: "an underlay that comes", hostIP: late, wait: 20 * time.Second, want: 1350,
			before: func() {
				time.Sleep(time.Second)
				if _, err := node.Run(ctx, "ip", "addr", "add", late.String()+"/32", "dev", "ul0"); err != nil {
					t.Error(err)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.before != nil {
				done := make(chan struct{})
				go func() {
					defer close(done)
					tt.before()
				}()
				defer func() { <-done }()
			}
			var got int
			err := node.Do(func() error {
				var err error
				got, err = attachmentMTU(ctx, tt.given, tt.hostIP, tt.wait)
				return err
			})
			var gotErr string
			if err != nil {
				gotErr = err.Error()
			}
			if got != tt.want || gotErr != tt.wantErr {
				t.Errorf("attachmentMTU(%d, %v, %s) = %d, %q; want %d, %q", tt.given, tt.hostIP, tt.wait, got, gotErr, tt.want, tt.wantErr)
			}
		})
	}
	var u underlay
	err := node.Do(func() error {
		var err error
		u, err = findUnderlay(netip.MustParseAddr("192.168.61.1"))
		return err
	})
	if want := (underlay{name: "other", mtu: 9000}); err != nil || u != want {
		t.Errorf("findUnderlay(192.168.61.1) = %+v, %v; want %+v, nil", u, err, want)
	}
}
