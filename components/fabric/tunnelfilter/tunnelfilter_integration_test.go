package tunnelfilter

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kos-sdn/kos/tools/ovsenv"
)

// tunnelPort is the UDP port the test's node listens on, as the kernel's
// VXLAN socket does on a node of the kernel datapath.
const tunnelPort = 4789

// Addresses of the test's namespaces, which exist only there.
var (
	nodeIP     = netip.MustParseAddr("192.168.100.1")
	peerIP     = netip.MustParseAddr("192.168.100.2")
	strangerIP = netip.MustParseAddr("192.168.100.9")
)

// setup makes a node namespace whose underlay interface ul0 leads to a
// namespace holding a peer's and a stranger's address, and a pod
// namespace joined to the node by a veth (pod0 on the node), which also
// holds the peer's address, as a pod whose primary network does not stop
// spoofing may; the node routes to the pod's address through pod0.
func setup(t *testing.T) (node, underlay, pod *ovsenv.Netns) {
	t.Helper()
	ctx := t.Context()
	node, underlay, pod = ovsenv.NetnsT(t), ovsenv.NetnsT(t), ovsenv.NetnsT(t)
	if err := ovsenv.AddVethPair(ctx, node, "ul0", underlay, "ul0"); err != nil {
		t.Fatal(err)
	}
	if err := ovsenv.AddVethPair(ctx, node, "pod0", pod, "eth0"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		ns  *ovsenv.Netns
		cmd []string
	}{
		{node, []string{"ip", "addr", "add", nodeIP.String() + "/24", "dev", "ul0"}},
		{node, []string{"ip", "link", "set", "ul0", "up"}},
		{node, []string{"ip", "addr", "add", "10.244.0.1/24", "dev", "pod0"}},
		{node, []string{"ip", "link", "set", "pod0", "up"}},
		{underlay, []string{"ip", "addr", "add", peerIP.String() + "/24", "dev", "ul0"}},
		{underlay, []string{"ip", "addr", "add", strangerIP.String() + "/24", "dev", "ul0"}},
		{underlay, []string{"ip", "link", "set", "ul0", "up"}},
		{pod, []string{"ip", "addr", "add", "10.244.0.5/24", "dev", "eth0"}},
		{pod, []string{"ip", "addr", "add", peerIP.String() + "/32", "dev", "eth0"}},
		{pod, []string{"ip", "link", "set", "eth0", "up"}},
		{pod, []string{"ip", "route", "add", nodeIP.String() + "/32", "dev", "eth0"}},
		// The node routes the pod's packets to the underlay.
		{pod, []string{"ip", "route", "add", strangerIP.String() + "/32", "via", "10.244.0.1"}},
		{node, []string{"sysctl", "-qw", "net.ipv4.ip_forward=1"}},
		{underlay, []string{"ip", "route", "add", "10.244.0.0/24", "via", nodeIP.String()}},
	} {
		if _, err := c.ns.Run(ctx, c.cmd[0], c.cmd[1:]...); err != nil {
			t.Fatal(err)
		}
	}
	return node, underlay, pod
}

// listen opens a UDP socket on port in ns.
func listen(t *testing.T, ns *ovsenv.Netns, port int) *net.UDPConn {
	t.Helper()
	var conn *net.UDPConn
	if err := ns.Do(func() error {
		var err error
		conn, err = net.ListenUDP("udp4", &net.UDPAddr{Port: port})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// received counts the datagrams conn receives until it is quiet for
// 300 ms.
func received(t *testing.T, conn *net.UDPConn) int {
	t.Helper()
	buf := make([]byte, 2048)
	n := 0
	for {
		if err := conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		if _, _, err := conn.ReadFrom(buf); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return n
			}
			t.Fatal(err)
		}
		n++
	}
}

// send sends count datagrams from ns, from src, to the node's port.
func send(t *testing.T, ns *ovsenv.Netns, src netip.Addr, port, count int) {
	t.Helper()
	sendTo(t, ns, src, nodeIP, port, count)
}

// sendTo sends count datagrams from ns, from src, to dst's port.
func sendTo(t *testing.T, ns *ovsenv.Netns, src, dst netip.Addr, port, count int) {
	t.Helper()
	if err := ns.Do(func() error {
		var laddr *net.UDPAddr
		if src.IsValid() {
			laddr = &net.UDPAddr{IP: src.AsSlice()}
		}
		conn, err := net.DialUDP("udp4", laddr, &net.UDPAddr{IP: dst.AsSlice(), Port: port})
		if err != nil {
			return err
		}
		defer conn.Close()
		for range count {
			// A datagram the kernel cannot send yet (ARP pending)
			// counts as not received.
			_, _ = conn.Write([]byte("tunnel probe"))
			time.Sleep(10 * time.Millisecond)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestIntegrationTunnelFilter checks the filter on a node's network
// namespace: before it, the peer, a stranger on the underlay and a pod
// forging the peer's address all reach the tunnel port; with it, only the
// peer does, through the underlay interface, and the others are counted;
// peers come and go, the port moves, a deleted table is made again, and
// Remove leaves the port open as before.
func TestIntegrationTunnelFilter(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	node, underlay, pod := setup(t)
	conn := listen(t, node, tunnelPort)
	const n = 5

	type sender struct {
		name string
		ns   *ovsenv.Netns
		src  netip.Addr
	}
	peer := sender{"the peer", underlay, peerIP}
	stranger := sender{"a stranger on the underlay", underlay, strangerIP}
	forger := sender{"a pod with the peer's address", pod, peerIP}
	expect := func(step string, port int, conn *net.UDPConn, s sender, want int) {
		t.Helper()
		send(t, s.ns, s.src, port, n)
		if got := received(t, conn); got != want {
			t.Errorf("%s: the node received %d of %d datagrams from %s, want %d", step, got, n, s.name, want)
		}
	}
	// Warm up ARP both ways, so that no datagram waits for it.
	for _, s := range []sender{peer, stranger, forger} {
		send(t, s.ns, s.src, tunnelPort, 1)
	}
	received(t, conn)

	for _, s := range []sender{peer, stranger, forger} {
		expect("without the filter", tunnelPort, conn, s, n)
	}
	// What the node forwards from the pod to another host's tunnel port,
	// and what it sends there itself.
	far := listen(t, underlay, tunnelPort)
	podIP := netip.MustParseAddr("10.244.0.5")
	sendTo(t, pod, podIP, strangerIP, tunnelPort, 1)
	received(t, far)
	forwarded := func(step string, want int) {
		t.Helper()
		sendTo(t, pod, podIP, strangerIP, tunnelPort, n)
		if got := received(t, far); got != want {
			t.Errorf("%s: the stranger received %d of %d datagrams the node forwarded from the pod, want %d", step, got, n, want)
		}
		sendTo(t, node, nodeIP, strangerIP, tunnelPort, n)
		if got := received(t, far); got != n {
			t.Errorf("%s: the stranger received %d of %d datagrams the node sent itself, want all", step, got, n)
		}
	}
	forwarded("without the filter", n)

	f := New(Config{Interface: "ul0", NetNS: filepath.Join("/run/netns", node.Name)})
	if err := f.Check(); err != nil {
		t.Fatalf("Check: %v", err)
	}
	drops := func() uint64 {
		t.Helper()
		d, err := f.Drops(ctx)
		if err != nil {
			t.Fatalf("Drops: %v", err)
		}
		return d
	}
	set := func(port int, hosts ...netip.Addr) {
		t.Helper()
		if err := f.Set(ctx, port, hosts); err != nil {
			t.Fatalf("Set(%d, %v): %v", port, hosts, err)
		}
	}
	set(tunnelPort, peerIP)
	expect("with the filter", tunnelPort, conn, peer, n)
	expect("with the filter", tunnelPort, conn, stranger, 0)
	expect("with the filter", tunnelPort, conn, forger, 0)
	if got := drops(); got < 2*n {
		t.Errorf("drops = %d after the stranger's and the pod's datagrams, want at least %d", got, 2*n)
	}
	// Setting the same again changes nothing: the count stays.
	before := drops()
	set(tunnelPort, peerIP)
	if got := drops(); got != before {
		t.Errorf("drops = %d after setting the same peers again, want %d kept", got, before)
	}

	// A new peer is admitted, and one that leaves is dropped, without
	// remaking the table (the count stays).
	forwarded("with the filter, the stranger no peer", n)
	set(tunnelPort, peerIP, strangerIP)
	expect("with the stranger a peer", tunnelPort, conn, stranger, n)
	expect("with the stranger a peer", tunnelPort, conn, forger, 0)
	forwarded("with the stranger a peer", 0)
	set(tunnelPort, strangerIP)
	expect("once the peer left", tunnelPort, conn, peer, 0)
	if got := drops(); got < before+3*n {
		t.Errorf("drops = %d, want at least %d: the count was reset by a change of peers", got, before+2*n)
	}

	// The port moves: the old one is open again, the new one filtered.
	const newPort = 4790
	conn2 := listen(t, node, newPort)
	set(newPort, peerIP)
	expect("after the move", newPort, conn2, peer, n)
	expect("after the move", newPort, conn2, stranger, 0)
	expect("after the move, on the old port", tunnelPort, conn, stranger, n)

	// Someone deletes the table: the next Set makes it again.
	if removed, err := Remove(f.cfg.NetNS); err != nil || !removed {
		t.Fatalf("Remove = %v, %v; want true", removed, err)
	}
	expect("without the table", newPort, conn2, stranger, n)
	set(newPort, peerIP)
	expect("after the repair", newPort, conn2, stranger, 0)
	expect("after the repair", newPort, conn2, peer, n)

	// Removed, the port is open as before, and a second Remove finds
	// nothing.
	if removed, err := Remove(f.cfg.NetNS); err != nil || !removed {
		t.Fatalf("Remove = %v, %v; want true", removed, err)
	}
	expect("after Remove", newPort, conn2, forger, n)
	if removed, err := Remove(f.cfg.NetNS); err != nil || removed {
		t.Errorf("second Remove = %v, %v; want false", removed, err)
	}
	if got := drops(); got != 0 {
		t.Errorf("drops = %d without a table, want 0", got)
	}
}
