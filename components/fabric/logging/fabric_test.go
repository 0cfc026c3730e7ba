package logging

import (
	"net/netip"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/kos-sdn/kos/components/apis/network"
	"github.com/kos-sdn/kos/components/fabric"
)

var (
	l1 = fabric.LocalAttachment{VNI: 1, IP: netip.MustParseAddr("10.0.0.5")}
	l2 = fabric.LocalAttachment{VNI: 2, IP: netip.MustParseAddr("10.0.0.5")}
	r1 = fabric.RemoteAttachment{VNI: 1, IP: netip.MustParseAddr("10.0.0.6"), HostIP: netip.MustParseAddr("192.168.100.2")}
	r2 = fabric.RemoteAttachment{VNI: 1, IP: netip.MustParseAddr("10.0.0.7"), HostIP: netip.MustParseAddr("192.168.100.3")}
	// r1Moved is r1 on another node.
	r1Moved = fabric.RemoteAttachment{VNI: 1, IP: r1.IP, HostIP: netip.MustParseAddr("192.168.100.4")}
	// rOverL1 is a remote attachment with l1's VNI and IP.
	rOverL1 = fabric.RemoteAttachment{VNI: 1, IP: l1.IP, HostIP: netip.MustParseAddr("192.168.100.2")}
)

func TestFabric(t *testing.T) {
	f := New()
	ctx := t.Context()
	steps := []struct {
		name     string
		do       func() error
		wantLost bool // what Ensure reports after the step
		want     *fabric.Inventory
	}{{
		name:     "new",
		do:       func() error { return nil },
		wantLost: true,
		want:     &fabric.Inventory{},
	}, {
		name: "created",
		do: func() error {
			if err := f.CreateLocal(ctx, l2, l1); err != nil {
				return err
			}
			return f.CreateRemote(ctx, r2, r1)
		},
		want: &fabric.Inventory{Local: []fabric.LocalAttachment{l1, l2}, Remote: []fabric.RemoteAttachment{r1, r2}},
	}, {
		name: "updated",
		do: func() error {
			if err := f.CreateLocal(ctx, l1); err != nil {
				return err
			}
			return f.CreateRemote(ctx, r1Moved)
		},
		want: &fabric.Inventory{Local: []fabric.LocalAttachment{l1, l2}, Remote: []fabric.RemoteAttachment{r1Moved, r2}},
	}, {
		name: "remote over a local",
		do:   func() error { return f.CreateRemote(ctx, rOverL1) },
		want: &fabric.Inventory{
			Local:        []fabric.LocalAttachment{l2},
			PartialLocal: []fabric.LocalAttachment{l1},
			Remote:       []fabric.RemoteAttachment{rOverL1, r1Moved, r2},
		},
	}, {
		name: "local over a remote",
		do:   func() error { return f.CreateLocal(ctx, l1) },
		want: &fabric.Inventory{Local: []fabric.LocalAttachment{l1, l2}, Remote: []fabric.RemoteAttachment{r1Moved, r2}},
	}, {
		name: "flows lost",
		do: func() error {
			f.LoseFlows()
			return nil
		},
		wantLost: true,
		want:     &fabric.Inventory{PartialLocal: []fabric.LocalAttachment{l1, l2}},
	}, {
		name: "repaired",
		do: func() error {
			if err := f.CreateLocal(ctx, l1, l2); err != nil {
				return err
			}
			return f.CreateRemote(ctx, r1, r2)
		},
		want: &fabric.Inventory{Local: []fabric.LocalAttachment{l1, l2}, Remote: []fabric.RemoteAttachment{r1, r2}},
	}, {
		name: "MTU changed",
		do: func() error {
			f.SetMTU(1400)
			return nil
		},
		want: &fabric.Inventory{PartialLocal: []fabric.LocalAttachment{l1, l2}, Remote: []fabric.RemoteAttachment{r1, r2}},
	}, {
		name: "MTU repaired",
		do:   func() error { return f.CreateLocal(ctx, l1, l2) },
		want: &fabric.Inventory{Local: []fabric.LocalAttachment{l1, l2}, Remote: []fabric.RemoteAttachment{r1, r2}},
	}, {
		name: "deleted",
		do: func() error {
			if err := f.DeleteLocal(ctx, l2, l2); err != nil {
				return err
			}
			return f.DeleteRemote(ctx, fabric.RemoteAttachment{VNI: r2.VNI, IP: r2.IP})
		},
		want: &fabric.Inventory{Local: []fabric.LocalAttachment{l1}, Remote: []fabric.RemoteAttachment{r1}},
	}}
	for _, step := range steps {
		if err := step.do(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		got, err := f.List(ctx)
		if err != nil {
			t.Fatalf("%s: List: %v", step.name, err)
		}
		if diff := cmp.Diff(step.want, got, cmpopts.EquateComparable(netip.Addr{}), cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%s: List differs (-want +got):\n%s", step.name, diff)
		}
		lost, err := f.Ensure(ctx)
		if err != nil || lost != step.wantLost {
			t.Errorf("%s: Ensure = %t, %v; want %t, nil", step.name, lost, err, step.wantLost)
		}
	}
}

func TestFabricInvalid(t *testing.T) {
	f := New()
	ctx := t.Context()
	tests := []struct {
		name string
		do   func() error
	}{
		{"local VNI 0", func() error { return f.CreateLocal(ctx, l1, fabric.LocalAttachment{IP: l1.IP}) }},
		{"local without IP", func() error { return f.DeleteLocal(ctx, fabric.LocalAttachment{VNI: 1}) }},
		{"remote without host", func() error { return f.CreateRemote(ctx, fabric.RemoteAttachment{VNI: 1, IP: r1.IP}) }},
		{"remote VNI too big", func() error {
			return f.DeleteRemote(ctx, fabric.RemoteAttachment{VNI: network.MaxVNI + 1, IP: r1.IP})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.do(); err == nil {
				t.Errorf("succeeded, want an error")
			}
		})
	}
	got, err := f.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&fabric.Inventory{}, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("invalid calls changed the fabric (-want +got):\n%s", diff)
	}
}

func TestFabricConcurrent(t *testing.T) {
	f := New()
	ctx := t.Context()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 100 {
				ip := netip.AddrFrom4([4]byte{10, byte(w), 0, byte(i)})
				if err := f.CreateRemote(ctx, fabric.RemoteAttachment{VNI: 1, IP: ip, HostIP: r1.HostIP}); err != nil {
					t.Error(err)
				}
				if i%2 == 0 {
					if err := f.DeleteRemote(ctx, fabric.RemoteAttachment{VNI: 1, IP: ip}); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
	wg.Wait()
	got, err := f.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(got.Remote); n != 8*50 {
		t.Errorf("%d remote attachments, want %d", n, 8*50)
	}
}

// TestFabricPlugs checks that a plugged interface stays plugged until its
// attachment is deleted: creating the attachment again, losing the flows or
// changing the MTU repairs only the flows.
func TestFabricPlugs(t *testing.T) {
	f := New()
	ctx := t.Context()
	p1 := fabric.Plug{LocalAttachment: l1, Owner: "c1/net1"}
	steps := []struct {
		name      string
		do        func() error
		want      *fabric.Inventory
		wantPlugs []fabric.Plug
	}{{
		name: "internal",
		do:   func() error { return f.CreateLocal(ctx, l1, l2) },
		want: &fabric.Inventory{Local: []fabric.LocalAttachment{l1, l2}},
	}, {
		name: "internal port deleted",
		do:   func() error { return f.DeletePorts(ctx, l1) },
		want: &fabric.Inventory{Local: []fabric.LocalAttachment{l2}, PartialLocal: []fabric.LocalAttachment{l1}},
	}, {
		name:      "plugged",
		do:        func() error { return f.PlugLocal(ctx, p1) },
		want:      &fabric.Inventory{Local: []fabric.LocalAttachment{l1, l2}},
		wantPlugs: []fabric.Plug{p1},
	}, {
		name: "flows lost",
		do: func() error {
			f.LoseFlows()
			return nil
		},
		want:      &fabric.Inventory{PartialLocal: []fabric.LocalAttachment{l1, l2}},
		wantPlugs: []fabric.Plug{p1},
	}, {
		name:      "repaired with another MTU",
		do:        func() error { f.SetMTU(1400); return f.CreateLocal(ctx, l1, l2) },
		want:      &fabric.Inventory{Local: []fabric.LocalAttachment{l1, l2}},
		wantPlugs: []fabric.Plug{p1},
	}, {
		name: "plugged port deleted",
		do:   func() error { return f.DeletePorts(ctx, l1) },
		want: &fabric.Inventory{Local: []fabric.LocalAttachment{l2}, PartialLocal: []fabric.LocalAttachment{l1}},
	}, {
		name: "internal port again",
		do:   func() error { return f.CreateLocal(ctx, l1) },
		want: &fabric.Inventory{Local: []fabric.LocalAttachment{l1, l2}},
	}, {
		name: "deleted",
		do:   func() error { return f.DeleteLocal(ctx, l1) },
		want: &fabric.Inventory{Local: []fabric.LocalAttachment{l2}},
	}}
	for _, step := range steps {
		if err := step.do(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		got, err := f.List(ctx)
		if err != nil {
			t.Fatalf("%s: List: %v", step.name, err)
		}
		if diff := cmp.Diff(got, step.want, cmpopts.EquateComparable(netip.Addr{}), cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%s: List (-got +want):\n%s", step.name, diff)
		}
		plugs, err := f.Plugs(ctx, l1, l2)
		if err != nil {
			t.Fatalf("%s: Plugs: %v", step.name, err)
		}
		if diff := cmp.Diff(plugs, step.wantPlugs, cmpopts.EquateComparable(netip.Addr{}), cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%s: Plugs (-got +want):\n%s", step.name, diff)
		}
	}
	if err := f.PlugLocal(ctx, fabric.Plug{LocalAttachment: l1}); err == nil {
		t.Errorf("PlugLocal without an owner succeeded, want an error")
	}
}

// TestFabricPolicy checks that the fabric lists the networks whose policy
// isolates something, refuses invalid policies, and forgets policies with
// its flows.
func TestFabricPolicy(t *testing.T) {
	f := New()
	ctx := t.Context()
	isolating := fabric.NetworkPolicy{VNI: 3, Policies: []fabric.Policy{{Name: "deny", Selected: []netip.Addr{l1.IP}, Ingress: true}}}
	for _, p := range []fabric.NetworkPolicy{
		isolating,
		{VNI: 1, Policies: []fabric.Policy{{Name: "deny", Selected: []netip.Addr{l1.IP}, Egress: true}}},
		// Selects nothing on this node: nothing to hold.
		{VNI: 2, Policies: []fabric.Policy{{Name: "elsewhere", Ingress: true}}},
	} {
		if err := f.SetPolicy(ctx, p); err != nil {
			t.Fatalf("SetPolicy(%v): %v", p, err)
		}
	}
	if got, ok := f.Policy(3); !ok || !cmp.Equal(got, isolating, cmpopts.EquateComparable(netip.Addr{})) {
		t.Errorf("Policy(3) = %+v, %v; want %+v", got, ok, isolating)
	}
	if err := f.SetPolicy(ctx, fabric.NetworkPolicy{VNI: 0}); err == nil {
		t.Error("SetPolicy of VNI 0 succeeded, want an error")
	}
	if diff := cmp.Diff([]uint32{1, 3}, list(t, f).Policies); diff != "" {
		t.Errorf("Policies differ (-want +got):\n%s", diff)
	}
	if err := f.SetPolicy(ctx, fabric.NetworkPolicy{VNI: 1}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]uint32{3}, list(t, f).Policies); diff != "" {
		t.Errorf("after clearing VNI 1, Policies differ (-want +got):\n%s", diff)
	}
	f.LoseFlows()
	if got := list(t, f).Policies; len(got) != 0 {
		t.Errorf("after LoseFlows, Policies = %v, want none", got)
	}
}

func list(t *testing.T, f *Fabric) *fabric.Inventory {
	t.Helper()
	inv, err := f.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return inv
}
