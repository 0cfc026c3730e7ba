package ovs

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/fabric"
	"github.com/kos-sdn/kos/tools/ovsenv"
)

// probePort is the UDP port guests listen on for the probes of these tests.
const probePort = 5000

// listenUDP opens a UDP socket on probePort inside ns.
func listenUDP(t *testing.T, ns *ovsenv.Netns) *net.UDPConn {
	t.Helper()
	var conn *net.UDPConn
	if err := ns.Do(func() error {
		var err error
		conn, err = net.ListenUDP("udp4", &net.UDPAddr{Port: probePort})
		return err
	}); err != nil {
		t.Fatalf("listening in %s: %v", ns.Name, err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// received counts the datagrams conn receives until it has been quiet for
// wait.
func received(t *testing.T, conn *net.UDPConn, wait time.Duration) int {
	t.Helper()
	buf := make([]byte, 2048)
	n := 0
	for {
		if err := conn.SetReadDeadline(time.Now().Add(wait)); err != nil {
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

// sendUDP sends count datagrams from inside ns, from address src (which
// must be one of ns's), to dst's probePort.
func sendUDP(t *testing.T, ns *ovsenv.Netns, src, dst netip.Addr, count int) {
	t.Helper()
	conn := dialNoChecksum(t, ns, &net.UDPAddr{IP: src.AsSlice()}, &net.UDPAddr{IP: dst.AsSlice(), Port: probePort})
	defer conn.Close()
	for range count {
		// A datagram the kernel cannot send yet (its neighbour is not
		// resolved) is no failure of the test: it is counted as not
		// received.
		_, _ = conn.Write([]byte("kos probe"))
		time.Sleep(20 * time.Millisecond)
	}
}

// dialNoChecksum opens a UDP socket inside ns that sends with UDP checksum
// 0 (SO_NO_CHECK; valid in IPv4). A checksum the kernel leaves to a veth's
// offload arrives unfinished through the userspace datapath: a guest drops
// such datagrams, and OVS drops such VXLAN packets (tunnel_pop_error).
func dialNoChecksum(t *testing.T, ns *ovsenv.Netns, laddr, raddr *net.UDPAddr) *net.UDPConn {
	t.Helper()
	var conn *net.UDPConn
	if err := ns.Do(func() error {
		var err error
		conn, err = net.DialUDP("udp4", laddr, raddr)
		if err != nil {
			return err
		}
		raw, err := conn.SyscallConn()
		if err != nil {
			return err
		}
		var serr error
		if err := raw.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_NO_CHECK, 1)
		}); err != nil {
			return err
		}
		return serr
	}); err != nil {
		t.Fatalf("opening a UDP socket in %s: %v", ns.Name, err)
	}
	return conn
}

// vxlanFrame is the UDP payload of a VXLAN packet for vni carrying an
// Ethernet frame from srcMAC to dstMAC that holds an IPv4 UDP datagram from
// srcIP to dstIP's probePort.
func vxlanFrame(vni uint32, srcMAC, dstMAC net.HardwareAddr, srcIP, dstIP netip.Addr) []byte {
	payload := []byte("kos injected probe")
	udp := make([]byte, 8+len(payload))
	binary.BigEndian.PutUint16(udp[0:], 40000)
	binary.BigEndian.PutUint16(udp[2:], probePort)
	binary.BigEndian.PutUint16(udp[4:], uint16(len(udp)))
	copy(udp[8:], payload) // checksum 0: none, valid in IPv4
	ip := make([]byte, 20, 20+len(udp))
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(20+len(udp)))
	ip[8] = 64
	ip[9] = syscall.IPPROTO_UDP
	s, d := srcIP.As4(), dstIP.As4()
	copy(ip[12:], s[:])
	copy(ip[16:], d[:])
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
	ip = append(ip, udp...)
	frame := make([]byte, 0, 8+14+len(ip))
	frame = append(frame, 0x08, 0, 0, 0, byte(vni>>16), byte(vni>>8), byte(vni), 0)
	frame = append(frame, dstMAC...)
	frame = append(frame, srcMAC...)
	frame = append(frame, 0x08, 0x00)
	return append(frame, ip...)
}

// injectVXLAN sends frame count times from inside ns to the VXLAN port of
// the node at dst.
func injectVXLAN(t *testing.T, ns *ovsenv.Netns, dst netip.Addr, frame []byte, count int) {
	t.Helper()
	injectVXLANTo(t, ns, dst, fabric.DefaultTunnelPort, frame, count)
}

// injectVXLANTo sends frame count times from inside ns to UDP port port of
// the node at dst.
func injectVXLANTo(t *testing.T, ns *ovsenv.Netns, dst netip.Addr, port int, frame []byte, count int) {
	t.Helper()
	conn := dialNoChecksum(t, ns, nil, &net.UDPAddr{IP: dst.AsSlice(), Port: port})
	defer conn.Close()
	for range count {
		if _, err := conn.Write(frame); err != nil {
			t.Fatalf("injecting from %s: %v", ns.Name, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func drops(t *testing.T, f *Fabric) fabric.Drops {
	t.Helper()
	d, err := f.Drops(t.Context())
	if err != nil {
		t.Fatalf("Drops: %v", err)
	}
	return d
}

// dropsRise waits for a drop count of f (which picks it) to reach
// before+want and returns how much it rose. OVS updates the counts of its
// flows from the datapath's about once a second, so a drop shows late.
func dropsRise(t *testing.T, f *Fabric, which func(fabric.Drops) uint64, before, want uint64) uint64 {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		got := which(drops(t, f)) - before
		if got >= want || time.Now().After(deadline) {
			return got
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func tunnelDrops(d fabric.Drops) uint64  { return d.Tunnel }
func spoofedDrops(d fabric.Drops) uint64 { return d.Spoofed }

// TestIntegrationTunnelIngress checks that a node takes tunnel packets of a
// VNI only from the nodes of its remote attachments in that VNI, sent with
// their MACs: frames injected from a host that is no node, from a node with
// no attachment of the VNI, or with another source MAC reach no guest and
// are counted, while legitimate traffic flows, also as remote attachments
// come and go.
func TestIntegrationTunnelIngress(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	nsA, nsB, nsX := ovsenv.NetnsT(t), ovsenv.NetnsT(t), ovsenv.NetnsT(t)
	if err := ovsenv.AddVethPair(ctx, nsA, "ul0", nsB, "ul0"); err != nil {
		t.Fatal(err)
	}
	mtu, err := fabric.AttachmentMTU(underlayMTU)
	if err != nil {
		t.Fatal(err)
	}
	a := startNode(t, ctx, nsA, "192.168.100.1", mtu)
	b := startNode(t, ctx, nsB, "192.168.100.2", mtu)
	a.knowNeighbour(t, ctx, b)
	b.knowNeighbour(t, ctx, a)
	// X is a host on the underlay that is no node: it hangs off node B's
	// underlay bridge.
	if err := ovsenv.AddVethPair(ctx, nsB, "ul1", nsX, "ul0"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ovs.Run(ctx, "ovs-vsctl", "add-port", "br-ul", "ul1"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		ns  *ovsenv.Netns
		cmd []string
	}{
		{nsB, []string{"ip", "link", "set", "ul1", "up"}},
		{nsB, []string{"sysctl", "-qw", "net.ipv4.conf.ul1.arp_ignore=1"}},
		{nsX, []string{"ip", "addr", "add", "192.168.100.9" + underlayPrefix, "dev", "ul0"}},
		{nsX, []string{"ip", "link", "set", "ul0", "up"}},
	} {
		if _, err := c.ns.Run(ctx, c.cmd[0], c.cmd[1:]...); err != nil {
			t.Fatal(err)
		}
	}

	attA := fabric.LocalAttachment{VNI: 7, IP: netip.MustParseAddr("10.7.0.1")}
	attB := fabric.LocalAttachment{VNI: 7, IP: netip.MustParseAddr("10.7.0.2")}
	attB2 := fabric.LocalAttachment{VNI: 7, IP: netip.MustParseAddr("10.7.0.3")}
	// attD's VNI has no attachment on node B.
	attD := fabric.LocalAttachment{VNI: 9, IP: netip.MustParseAddr("10.7.0.4")}
	guestA := a.attachGuest(t, ctx, attA)
	guestB := b.attachGuest(t, ctx, attB)
	b.attachGuest(t, ctx, attB2)
	guestD := a.attachGuest(t, ctx, attD)
	remoteOf := func(att fabric.LocalAttachment, on *node) fabric.RemoteAttachment {
		return fabric.RemoteAttachment{VNI: att.VNI, IP: att.IP, HostIP: on.hostIP}
	}
	if err := a.fabric.CreateRemote(ctx, remoteOf(attB, b), remoteOf(attB2, b)); err != nil {
		t.Fatal(err)
	}
	if err := b.fabric.CreateRemote(ctx, remoteOf(attA, a)); err != nil {
		t.Fatal(err)
	}
	listenA, listenD := listenUDP(t, guestA), listenUDP(t, guestD)

	const n = 5
	// The injector works: node B, which holds attB, reaches guest A with
	// attB's MAC in VNI 7.
	injectVXLAN(t, nsB, a.hostIP, vxlanFrame(attA.VNI, attB.MAC(), attA.MAC(), attB.IP, attA.IP), n)
	if got := received(t, listenA, 500*time.Millisecond); got != n {
		t.Fatalf("guest A received %d of %d frames node B sent as attB, want all", got, n)
	}
	if got := drops(t, a.fabric).Tunnel; got != 0 {
		t.Errorf("tunnel drops after legitimate frames = %d, want 0", got)
	}

	injections := []struct {
		name   string
		from   *ovsenv.Netns
		frame  []byte
		listen *net.UDPConn
	}{
		{"from a host that is no node, posing as attB", nsX, vxlanFrame(attA.VNI, attB.MAC(), attA.MAC(), attB.IP, attA.IP), listenA},
		{"from a node without an attachment of the VNI", nsB, vxlanFrame(attD.VNI, attB.MAC(), attD.MAC(), attB.IP, attD.IP), listenD},
		{"from the right node with a MAC that is none of its attachments'", nsB,
			vxlanFrame(attA.VNI, v1alpha1.MACAddress(attA.VNI, netip.MustParseAddr("10.7.0.50")), attA.MAC(), netip.MustParseAddr("10.7.0.50"), attA.IP), listenA},
	}
	for _, in := range injections {
		before := drops(t, a.fabric).Tunnel
		injectVXLAN(t, in.from, a.hostIP, in.frame, n)
		if got := received(t, in.listen, 500*time.Millisecond); got != 0 {
			t.Errorf("%s: the guest received %d of %d injected frames, want none", in.name, got, n)
		}
		if got := dropsRise(t, a.fabric, tunnelDrops, before, n); got < n {
			t.Errorf("%s: tunnel drops rose by %d, want at least %d", in.name, got, n)
		}
	}

	// Legitimate traffic flows, and keeps flowing while another remote
	// attachment on the same node comes and goes.
	reaches := func(from *ovsenv.Netns, to netip.Addr) {
		t.Helper()
		if got, err := from.Ping(ctx, to, 3, time.Second); err != nil || got != 3 {
			t.Errorf("ping from %s to %v: %d of 3 replies (%v), want 3", from.Name, to, got, err)
		}
	}
	reaches(guestA, attB.IP)
	reaches(guestB, attA.IP)
	if err := a.fabric.DeleteRemote(ctx, remoteOf(attB2, b)); err != nil {
		t.Fatal(err)
	}
	reaches(guestB, attA.IP)
	if err := a.fabric.CreateRemote(ctx, remoteOf(attB2, b)); err != nil {
		t.Fatal(err)
	}
	reaches(guestB, attA.IP)

	// Once node A forgets attB, attB's frames are dropped there.
	if err := a.fabric.DeleteRemote(ctx, remoteOf(attB, b)); err != nil {
		t.Fatal(err)
	}
	before := drops(t, a.fabric).Tunnel
	injectVXLAN(t, nsB, a.hostIP, vxlanFrame(attA.VNI, attB.MAC(), attA.MAC(), attB.IP, attA.IP), n)
	if got := received(t, listenA, 500*time.Millisecond); got != 0 {
		t.Errorf("guest A received %d frames of a forgotten remote attachment, want none", got)
	}
	if got := dropsRise(t, a.fabric, tunnelDrops, before, n); got < n {
		t.Errorf("tunnel drops rose by %d for a forgotten remote attachment, want at least %d", got, n)
	}

	if inv := list(t, a.fabric); len(inv.PartialLocal)+len(inv.PartialRemote) != 0 {
		t.Errorf("List found partial attachments: %+v", inv)
	}
	flows, err := a.fabric.ovs.dumpFlows(ctx, DefaultBridge, attachmentFlows())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("node A holds %d KOS flows for 2 local attachments and 1 remote one", len(flows))
}

// TestIntegrationAntiSpoofing checks that local ports, a plugged veth as a
// pod has and an internal port, may send only with their attachment's MAC
// and IPv4 address: a guest that takes another address or MAC reaches
// nothing, and its frames are counted.
func TestIntegrationAntiSpoofing(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	// One node suffices; its underlay leads to a namespace of nothing.
	ns := ovsenv.NetnsT(t)
	if err := ovsenv.AddVethPair(ctx, ns, "ul0", ovsenv.NetnsT(t), "ul0"); err != nil {
		t.Fatal(err)
	}
	node := startNode(t, ctx, ns, "192.168.100.1", 0)
	attA := fabric.LocalAttachment{VNI: 7, IP: netip.MustParseAddr("10.7.0.1")}
	attP := fabric.LocalAttachment{VNI: 7, IP: netip.MustParseAddr("10.7.0.2")}
	guestA := node.attachGuest(t, ctx, attA)
	pod := plugGuest(t, ctx, node.fabric, node.ovs, attP, "pod")
	listenA := listenUDP(t, guestA)
	spoofed := func() uint64 { return drops(t, node.fabric).Spoofed }
	rise := func(before, want uint64) uint64 { return dropsRise(t, node.fabric, spoofedDrops, before, want) }

	const n = 5
	// The pod reaches guest A with its own addresses.
	if got, err := pod.Ping(ctx, attA.IP, 3, time.Second); err != nil || got != 3 {
		t.Fatalf("ping from the pod: %d of 3 replies (%v), want 3", got, err)
	}
	sendUDP(t, pod, attP.IP, attA.IP, n)
	if got := received(t, listenA, 300*time.Millisecond); got != n {
		t.Fatalf("guest A received %d of %d datagrams the pod sent as itself, want all", got, n)
	}

	// Another source IPv4 address: the neighbour is known from the ping,
	// so the datagrams themselves go out, and are dropped.
	before := spoofed()
	if _, err := pod.Run(ctx, "ip", "addr", "add", "10.7.0.99/24", "dev", "net1"); err != nil {
		t.Fatal(err)
	}
	sendUDP(t, pod, netip.MustParseAddr("10.7.0.99"), attA.IP, n)
	if got := received(t, listenA, 300*time.Millisecond); got != 0 {
		t.Errorf("guest A received %d datagrams from a spoofed IP, want none", got)
	}
	if got := rise(before, n); got < n {
		t.Errorf("spoofed drops rose by %d for another source IP, want at least %d", got, n)
	}

	// ARP with another sender address: the pod asks for guest A as
	// 10.7.0.99, which guest A never hears.
	if _, err := pod.Run(ctx, "ip", "neigh", "flush", "all"); err != nil {
		t.Fatal(err)
	}
	before = spoofed()
	sendUDP(t, pod, netip.MustParseAddr("10.7.0.99"), attA.IP, 1)
	if got := rise(before, 1); got < 1 {
		t.Errorf("spoofed drops rose by %d for ARP from another sender address, want at least 1", got)
	}
	if out, err := guestA.Run(ctx, "ip", "neigh", "show", "10.7.0.99"); err != nil || out != "" {
		t.Errorf("guest A learned the spoofed sender: %q (%v)", out, err)
	}
	if _, err := pod.Run(ctx, "ip", "addr", "del", "10.7.0.99/24", "dev", "net1"); err != nil {
		t.Fatal(err)
	}

	// Another source MAC, on the pod's veth and on guest A's internal
	// port: nothing gets through, not even to ping.
	for _, g := range []struct {
		name string
		ns   *ovsenv.Netns
		ifc  string
		from fabric.LocalAttachment
		to   netip.Addr
	}{
		{"pod", pod, "net1", attP, attA.IP},
		{"guest A", guestA, attA.InterfaceName(), attA, attP.IP},
	} {
		for _, cmd := range [][]string{
			{"ip", "link", "set", g.ifc, "address", "06:00:00:99:00:07"},
			{"ip", "neigh", "flush", "all"},
		} {
			if _, err := g.ns.Run(ctx, cmd[0], cmd[1:]...); err != nil {
				t.Fatal(err)
			}
		}
		before = spoofed()
		if got, err := g.ns.Ping(ctx, g.to, 2, 700*time.Millisecond); err != nil || got != 0 {
			t.Errorf("ping from the %s with another MAC: %d of 2 replies (%v), want none", g.name, got, err)
		}
		if got := rise(before, 1); got < 1 {
			t.Errorf("spoofed drops rose by %d for the %s's other MAC, want some", got, g.name)
		}
	}
	if got := drops(t, node.fabric).Tunnel; got != 0 {
		t.Errorf("tunnel drops = %d on a node nobody tunnelled to, want 0", got)
	}
}

// TestIntegrationFlowCounts counts the flows a node holds for N remote
// hosts × M VNIs, with one local attachment per VNI and K remote ones per
// (host, VNI), and checks them against what flows.go makes: 4 defaults, 4
// per local and 3 per remote attachment (before the filters: 2, 3 and 2).
func TestIntegrationFlowCounts(t *testing.T) {
	f, inst := startFabric(t)
	ctx := t.Context()
	const hosts, vnis, perPair = 4, 5, 2
	var locals []fabric.LocalAttachment
	var remotes []fabric.RemoteAttachment
	for v := range vnis {
		vni := uint32(100 + v)
		locals = append(locals, fabric.LocalAttachment{VNI: vni, IP: netip.AddrFrom4([4]byte{10, 0, 0, 1})})
		for h := range hosts {
			for k := range perPair {
				remotes = append(remotes, fabric.RemoteAttachment{
					VNI:    vni,
					IP:     netip.AddrFrom4([4]byte{10, 0, byte(1 + h), byte(1 + k)}),
					HostIP: netip.AddrFrom4([4]byte{192, 168, 100, byte(2 + h)}),
				})
			}
		}
	}
	if err := f.CreateLocal(ctx, locals...); err != nil {
		t.Fatal(err)
	}
	if err := f.CreateRemote(ctx, remotes...); err != nil {
		t.Fatal(err)
	}
	got := strings.Count(dumpFlows(t, inst), "cookie=")
	want := 4 + 4*len(locals) + 3*len(remotes)
	before := 2 + 3*len(locals) + 2*len(remotes)
	if got != want {
		t.Errorf("%d flows, want %d", got, want)
	}
	t.Logf("%d hosts × %d VNIs, %d local and %d remote attachments: %d flows (%d before the filters)", hosts, vnis, len(locals), len(remotes), got, before)
	if inv := list(t, f); len(inv.Local) != len(locals) || len(inv.Remote) != len(remotes) {
		t.Errorf("List found %d local and %d remote attachments whole, want %d and %d", len(inv.Local), len(inv.Remote), len(locals), len(remotes))
	}
}
