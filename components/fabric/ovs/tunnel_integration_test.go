package ovs

import (
	"context"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kos-sdn/kos/components/fabric"
	"github.com/kos-sdn/kos/tools/ovsenv"
)

// tunnelOption returns an option of the tunnel port's Interface row, such
// as dst_port, "" when it is not set.
func tunnelOption(t *testing.T, n *node, key string) string {
	t.Helper()
	out, err := n.ovs.Run(t.Context(), "ovs-vsctl", "--if-exists", "get", "Interface", TunnelPort, "options:"+key)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Trim(out, `"`)
}

func ofport(t *testing.T, n *node, ifc string) string {
	t.Helper()
	out, err := n.ovs.Run(t.Context(), "ovs-vsctl", "get", "Interface", ifc, "ofport")
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// twoNodes starts two nodes joined by a veth underlay, each with a guest
// of VNI 7, the other's attachment created as remote, with fabrics that
// configure changes.
func twoNodes(t *testing.T, ctx context.Context, configure func(*node, *Config)) (a, b *node, guestA, guestB *ovsenv.Netns, attA, attB fabric.LocalAttachment) {
	t.Helper()
	nsA, nsB := ovsenv.NetnsT(t), ovsenv.NetnsT(t)
	if err := ovsenv.AddVethPair(ctx, nsA, "ul0", nsB, "ul0"); err != nil {
		t.Fatal(err)
	}
	mtu, err := fabric.AttachmentMTU(underlayMTU)
	if err != nil {
		t.Fatal(err)
	}
	start := func(ns *ovsenv.Netns, ip string) *node {
		n := &node{hostIP: netip.MustParseAddr(ip)}
		return startNodeWith(t, ctx, ns, ip, func(cfg *Config) {
			cfg.MTU = mtu
			configure(n, cfg)
		})
	}
	a = start(nsA, "192.168.100.1")
	b = start(nsB, "192.168.100.2")
	a.knowNeighbour(t, ctx, b)
	b.knowNeighbour(t, ctx, a)
	attA = fabric.LocalAttachment{VNI: 7, IP: netip.MustParseAddr("10.7.0.1")}
	attB = fabric.LocalAttachment{VNI: 7, IP: netip.MustParseAddr("10.7.0.2")}
	guestA, guestB = a.attachGuest(t, ctx, attA), b.attachGuest(t, ctx, attB)
	if err := a.fabric.CreateRemote(ctx, fabric.RemoteAttachment{VNI: attB.VNI, IP: attB.IP, HostIP: b.hostIP}); err != nil {
		t.Fatal(err)
	}
	if err := b.fabric.CreateRemote(ctx, fabric.RemoteAttachment{VNI: attA.VNI, IP: attA.IP, HostIP: a.hostIP}); err != nil {
		t.Fatal(err)
	}
	return a, b, guestA, guestB, attA, attB
}

// TestIntegrationTunnelPort checks that the tunnel port sends and receives
// on the fabric's UDP port: two nodes on 4790 reach each other, a node
// moved to another port no longer reaches the other, and moving it back
// with SetTunnelPort and Ensure joins them again, the tunnel port keeping
// its OpenFlow number, so every flow stays.
func TestIntegrationTunnelPort(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	const port = 4790
	a, b, guestA, _, _, attB := twoNodes(t, ctx, func(_ *node, cfg *Config) { cfg.TunnelPort = port })
	for _, n := range []*node{a, b} {
		if got := tunnelOption(t, n, "dst_port"); got != strconv.Itoa(port) {
			t.Errorf("options:dst_port of %s = %q, want %d", TunnelPort, got, port)
		}
	}
	pings := func(want int) {
		t.Helper()
		wait := time.Second
		if want == 0 {
			wait = 700 * time.Millisecond
		}
		if got, err := guestA.Ping(ctx, attB.IP, 2, wait); err != nil || got != want {
			t.Errorf("ping across the tunnel: %d of 2 replies (%v), want %d", got, err, want)
		}
	}
	pings(2)

	vtep := ofport(t, b, TunnelPort)
	b.fabric.SetTunnelPort(fabric.DefaultTunnelPort)
	if _, err := b.fabric.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if got := tunnelOption(t, b, "dst_port"); got != strconv.Itoa(fabric.DefaultTunnelPort) {
		t.Errorf("options:dst_port after the move = %q, want %d", got, fabric.DefaultTunnelPort)
	}
	pings(0)

	b.fabric.SetTunnelPort(port)
	lost, err := b.fabric.Ensure(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if lost {
		t.Errorf("Ensure after moving the tunnel port reported the flows lost")
	}
	if got := ofport(t, b, TunnelPort); got != vtep {
		t.Errorf("OpenFlow port of %s = %s after two moves, want %s kept", TunnelPort, got, vtep)
	}
	pings(2)
}

// underlayDrops reads the drop count of n's underlay filter.
func underlayDrops(t *testing.T, f *UnderlayFilter) uint64 {
	t.Helper()
	d, err := f.Drops(t.Context())
	if err != nil {
		t.Fatalf("Drops: %v", err)
	}
	return d
}

// TestIntegrationUnderlayFilter checks the tunnel filter of the userspace
// datapath: with it, a host on the underlay that is no node, sending VXLAN
// to node A's tunnel port with a remote attachment's MAC, is dropped on the
// underlay bridge before the tunnel (the bridge's tunnel drops do not rise,
// the filter's do), while node B, which holds remote attachments on A,
// passes; once A has no remote attachment on B, B is dropped there too,
// and admitted again with the next one; flows someone deletes come back
// with Ensure; Remove deletes them.
func TestIntegrationUnderlayFilter(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	filters := map[*node]*UnderlayFilter{}
	a, b, guestA, guestB, attA, attB := twoNodes(t, ctx, func(n *node, cfg *Config) {
		f, err := NewUnderlayFilter(UnderlayFilterConfig{Address: n.hostIP, RunDir: cfg.RunDir})
		if err != nil {
			t.Fatal(err)
		}
		filters[n] = f
		cfg.Filter = f
	})
	var filterA *UnderlayFilter
	for n, f := range filters {
		if n.hostIP == a.hostIP {
			filterA = f
		}
	}
	// X is a host on the underlay that is no node: it hangs off node B's
	// underlay bridge.
	nsX := ovsenv.NetnsT(t)
	if err := ovsenv.AddVethPair(ctx, b.ns, "ul1", nsX, "ul0"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ovs.Run(ctx, "ovs-vsctl", "add-port", "br-ul", "ul1"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		ns  *ovsenv.Netns
		cmd []string
	}{
		{b.ns, []string{"ip", "link", "set", "ul1", "up"}},
		{b.ns, []string{"sysctl", "-qw", "net.ipv4.conf.ul1.arp_ignore=1"}},
		{nsX, []string{"ip", "addr", "add", "192.168.100.9" + underlayPrefix, "dev", "ul0"}},
		{nsX, []string{"ip", "link", "set", "ul0", "up"}},
	} {
		if _, err := c.ns.Run(ctx, c.cmd[0], c.cmd[1:]...); err != nil {
			t.Fatal(err)
		}
	}

	// Legitimate traffic crosses both filters.
	for _, p := range []struct {
		from *ovsenv.Netns
		to   netip.Addr
	}{{guestA, attB.IP}, {guestB, attA.IP}} {
		if got, err := p.from.Ping(ctx, p.to, 3, time.Second); err != nil || got != 3 {
			t.Errorf("ping from %s to %v with the filters: %d of 3 replies (%v), want 3", p.from.Name, p.to, got, err)
		}
	}

	listenA := listenUDP(t, guestA)
	frame := vxlanFrame(attA.VNI, attB.MAC(), attA.MAC(), attB.IP, attA.IP)
	const n = 5
	// inject sends n frames from a namespace and checks how many guest
	// A received and how many the filter dropped; the bridge's tunnel
	// drops rise by wantTunnelDrops, none while the filter works.
	inject := func(step string, from *ovsenv.Netns, want int, wantUnderlayDrops, wantTunnelDrops uint64) {
		t.Helper()
		tunnelBefore, underlayBefore := drops(t, a.fabric).Tunnel, underlayDrops(t, filterA)
		injectVXLAN(t, from, a.hostIP, frame, n)
		if got := received(t, listenA, 500*time.Millisecond); got != want {
			t.Errorf("%s: guest A received %d of %d frames, want %d", step, got, n, want)
		}
		if wantUnderlayDrops > 0 {
			deadline := time.Now().Add(3 * time.Second)
			for underlayDrops(t, filterA)-underlayBefore < wantUnderlayDrops && time.Now().Before(deadline) {
				time.Sleep(100 * time.Millisecond)
			}
		}
		if got := underlayDrops(t, filterA) - underlayBefore; got < wantUnderlayDrops || (wantUnderlayDrops == 0 && got != 0) {
			t.Errorf("%s: the underlay filter's drops rose by %d, want %d", step, got, wantUnderlayDrops)
		}
		if wantTunnelDrops > 0 {
			dropsRise(t, a.fabric, tunnelDrops, tunnelBefore, wantTunnelDrops)
		}
		if got := drops(t, a.fabric).Tunnel - tunnelBefore; got != wantTunnelDrops {
			t.Errorf("%s: the bridge's tunnel drops rose by %d, want %d", step, got, wantTunnelDrops)
		}
	}
	inject("from node B, a peer", b.ns, n, 0, 0)
	inject("from a host that is no node", nsX, 0, n, 0)
	if got, want := drops(t, a.fabric).Filtered, underlayDrops(t, filterA); got != want || got == 0 {
		t.Errorf("Drops().Filtered = %d, want the filter's count %d", got, want)
	}

	// Once node A has no remote attachment on B, B is dropped on the
	// underlay too; the next one admits it again.
	remoteB := fabric.RemoteAttachment{VNI: attB.VNI, IP: attB.IP, HostIP: b.hostIP}
	if err := a.fabric.DeleteRemote(ctx, remoteB); err != nil {
		t.Fatal(err)
	}
	inject("from node B without remote attachments", b.ns, 0, n, 0)
	if err := a.fabric.CreateRemote(ctx, remoteB); err != nil {
		t.Fatal(err)
	}
	inject("from node B with a remote attachment again", b.ns, n, 0, 0)

	// Someone deletes the filter's flows: the stranger's frames reach
	// the tunnel, whose flows drop them; Ensure puts the filter back.
	if _, err := a.ovs.Run(ctx, "ovs-ofctl", "del-flows", "br-ul", "cookie=0x"+strconv.FormatUint(cookie(kindUnderlay, 0, netip.Addr{}), 16)+"/-1"); err != nil {
		t.Fatal(err)
	}
	inject("from a host that is no node, with the filter deleted", nsX, 0, 0, n)
	if _, err := a.fabric.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	inject("from a host that is no node, the filter repaired", nsX, 0, n, 0)

	// A fabric started afresh (a restarted agent) learns the peers from
	// the switch: B stays admitted.
	restarted := New(Config{RunDir: a.ovs.RunDir, DatapathType: "netdev", MTU: a.fabric.MTU(), Filter: filterA})
	if _, err := restarted.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	inject("from node B after a restart", b.ns, n, 0, 0)

	// The agent removes the filter as it stops; the next Ensure makes it
	// again.
	if removed, err := restarted.RemoveTunnelFilter(ctx); err != nil || !removed {
		t.Fatalf("RemoveTunnelFilter = %v, %v; want true", removed, err)
	}
	inject("from a host that is no node, the filter removed", nsX, 0, 0, n)
	if _, err := restarted.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	inject("from a host that is no node, the filter set again", nsX, 0, n, 0)
	inject("from node B, the filter set again", b.ns, n, 0, 0)

	if removed, err := filterA.Remove(ctx); err != nil || !removed {
		t.Fatalf("Remove = %v, %v; want true", removed, err)
	}
	out, err := a.ovs.Run(ctx, "ovs-ofctl", "dump-flows", "br-ul")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "tp_dst=4789") {
		t.Errorf("flows of the filter left after Remove:\n%s", out)
	}
	if removed, err := filterA.Remove(ctx); err != nil || removed {
		t.Errorf("second Remove = %v, %v; want false", removed, err)
	}
	gone, err := NewUnderlayFilter(UnderlayFilterConfig{Bridge: "br-none", Address: a.hostIP, RunDir: a.ovs.RunDir})
	if err != nil {
		t.Fatal(err)
	}
	if removed, err := gone.Remove(ctx); err != nil || removed {
		t.Errorf("Remove on a bridge that does not exist = %v, %v; want false, nil", removed, err)
	}
}
