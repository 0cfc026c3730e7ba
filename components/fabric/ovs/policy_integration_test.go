package ovs

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kos-sdn/kos/components/fabric"
	"github.com/kos-sdn/kos/tools/ovsenv"
)

// serveTCP listens on port inside ns and echoes each line it reads on each
// connection, until the test ends.
func serveTCP(t *testing.T, ns *ovsenv.Netns, port int) {
	t.Helper()
	var l net.Listener
	if err := ns.Do(func() error {
		var err error
		l, err = net.Listen("tcp4", fmt.Sprintf(":%d", port))
		return err
	}); err != nil {
		t.Fatalf("listening in %s: %v", ns.Name, err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
}

// tcpTimeout is how long a connection may take to open before it counts
// as denied: on one switch an allowed one opens in well under a second.
const tcpTimeout = 1500 * time.Millisecond

// dialTCP opens a TCP connection from inside ns to dst:port.
func dialTCP(ns *ovsenv.Netns, dst netip.Addr, port int) (net.Conn, error) {
	var c net.Conn
	err := ns.Do(func() error {
		var err error
		c, err = net.DialTimeout("tcp4", netip.AddrPortFrom(dst, uint16(port)).String(), tcpTimeout)
		return err
	})
	return c, err
}

// echo sends a line on c and waits for it to come back.
func echo(c net.Conn, line string) error {
	if err := c.SetDeadline(time.Now().Add(tcpTimeout)); err != nil {
		return err
	}
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		return err
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(got) != line {
		return fmt.Errorf("echoed %q, want %q", got, line)
	}
	return nil
}

// TestIntegrationPolicy enforces policy between three guests of one
// network on one switch: A is isolated for ingress and admits only TCP
// 8080 from B, C is isolated for egress and may only send UDP to B. It
// probes what passes over TCP, UDP, ICMP and ARP, then checks that
// connections older than the policy are kept or cut as it says, that an
// established connection survives policy updates, that updates leave no
// window, and that lifting the policy opens everything again.
func TestIntegrationPolicy(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	ns := ovsenv.NetnsT(t)
	if err := ovsenv.AddVethPair(ctx, ns, "ul0", ovsenv.NetnsT(t), "ul0"); err != nil {
		t.Fatal(err)
	}
	node := startNode(t, ctx, ns, "192.168.100.1", 0)
	const vni = 7
	attA := fabric.LocalAttachment{VNI: vni, IP: netip.MustParseAddr("10.7.0.1")}
	attB := fabric.LocalAttachment{VNI: vni, IP: netip.MustParseAddr("10.7.0.2")}
	attC := fabric.LocalAttachment{VNI: vni, IP: netip.MustParseAddr("10.7.0.3")}
	guestA := node.attachGuest(t, ctx, attA)
	guestB := node.attachGuest(t, ctx, attB)
	guestC := node.attachGuest(t, ctx, attC)
	for _, g := range []*ovsenv.Netns{guestA, guestB, guestC} {
		serveTCP(t, g, 8080)
		serveTCP(t, g, 9090)
	}
	udpA, udpB := listenUDP(t, guestA), listenUDP(t, guestB)

	web := fabric.Policy{
		Name: "web", Selected: []netip.Addr{attA.IP}, Ingress: true,
		IngressRules: []fabric.Rule{{
			Peers: []fabric.Peer{{Prefix: netip.PrefixFrom(attB.IP, 32)}},
			Ports: []fabric.Port{{Protocol: fabric.ProtocolTCP, Port: 8080}},
		}},
	}
	cOut := fabric.Policy{
		Name: "c-out", Selected: []netip.Addr{attC.IP}, Egress: true,
		EgressRules: []fabric.Rule{{
			Peers: []fabric.Peer{{Prefix: netip.MustParsePrefix("10.7.0.0/24"), Except: []netip.Prefix{netip.PrefixFrom(attA.IP, 32)}}},
			Ports: []fabric.Port{{Protocol: fabric.ProtocolUDP, Port: probePort - 10, EndPort: probePort + 10}},
		}},
	}
	// setPolicy sets the network's policy and waits until it is in
	// force: until the datapath's flow cache has been revalidated (see
	// SetPolicy). Without the wait, 1 to 3 of 10 flips between allowing
	// and denying a new flow saw the old policy.
	setPolicy := func(pols ...fabric.Policy) {
		t.Helper()
		if err := node.fabric.SetPolicy(ctx, fabric.NetworkPolicy{VNI: vni, Policies: pols}); err != nil {
			t.Fatalf("SetPolicy: %v", err)
		}
		if _, err := node.fabric.ovs.appctl(ctx, "revalidator/wait"); err != nil {
			t.Fatal(err)
		}
	}
	opens := func(from *ovsenv.Netns, to netip.Addr, port int) net.Conn {
		t.Helper()
		c, err := dialTCP(from, to, port)
		if err != nil {
			t.Errorf("TCP from %s to %v:%d: %v, want a connection", from.Name, to, port, err)
			return nil
		}
		t.Cleanup(func() { c.Close() })
		if err := echo(c, "hello"); err != nil {
			t.Errorf("TCP from %s to %v:%d: %v", from.Name, to, port, err)
		}
		return c
	}
	refused := func(from *ovsenv.Netns, to netip.Addr, port int) {
		t.Helper()
		c, err := dialTCP(from, to, port)
		if err == nil {
			c.Close()
			t.Errorf("TCP from %s to %v:%d opened, want it denied", from.Name, to, port)
		} else if !errors.Is(err, context.DeadlineExceeded) && !strings.Contains(err.Error(), "timeout") {
			t.Errorf("TCP from %s to %v:%d: %v, want a timeout", from.Name, to, port, err)
		}
	}
	pings := func(from *ovsenv.Netns, to netip.Addr, want bool) {
		t.Helper()
		n := 2
		if !want {
			n = 0
		}
		if got, err := from.Ping(ctx, to, 2, 700*time.Millisecond); err != nil || got != n {
			t.Errorf("ping from %s to %v: %d of 2 replies (%v), want %d", from.Name, to, got, err, n)
		}
	}
	udp := func(from *ovsenv.Netns, src, dst netip.Addr, conn *net.UDPConn, want int) {
		t.Helper()
		sendUDP(t, from, src, dst, 3)
		if got := received(t, conn, 300*time.Millisecond); got != want {
			t.Errorf("UDP from %v to %v: %d of 3 datagrams arrived, want %d", src, dst, got, want)
		}
	}
	// bigUDP sends datagrams of 4,000 bytes, which leave in fragments.
	bigUDP := func(from *ovsenv.Netns, src, dst netip.Addr, conn *net.UDPConn, want int) {
		t.Helper()
		c := dialNoChecksum(t, from, &net.UDPAddr{IP: src.AsSlice()}, &net.UDPAddr{IP: dst.AsSlice(), Port: probePort})
		defer c.Close()
		for range 3 {
			_, _ = c.Write(make([]byte, 4000))
			time.Sleep(20 * time.Millisecond)
		}
		if got := received(t, conn, 300*time.Millisecond); got != want {
			t.Errorf("UDP in fragments from %v to %v: %d of 3 datagrams arrived, want %d", src, dst, got, want)
		}
	}

	// Before any policy, everything passes.
	pings(guestC, attA.IP, true)
	bigUDP(guestC, attC.IP, attB.IP, udpB, 3)

	// Connections older than the first policy, which conntrack has not
	// seen, are picked up mid-stream as new and checked: B's to A's 8080
	// is allowed and stays, C's to A's 8080 is not and is cut.
	olderAllowed := opens(guestB, attA.IP, 8080)
	olderDenied := opens(guestC, attA.IP, 8080)
	setPolicy(web, cOut)
	if olderAllowed != nil {
		if err := echo(olderAllowed, "older"); err != nil {
			t.Errorf("a connection from B to A's 8080 older than the policy that allows it: %v", err)
		}
	}
	if olderDenied != nil {
		if err := echo(olderDenied, "older"); err == nil {
			t.Errorf("a connection from C to A's 8080 older than the policy that denies it still passes")
		}
	}
	if inv := list(t, node.fabric); len(inv.Local) != 3 || fmt.Sprint(inv.Policies) != "[7]" {
		t.Errorf("List = %+v, want 3 whole local attachments and the policy of VNI 7", inv)
	}
	// ofproto/trace (kubectl kos trace) follows a new connection through
	// the policy tables: B's to A's 9090 drops at A's ingress, C's to A's
	// 8080 at C's egress, and B's to A's 8080 is committed and delivered;
	// ExplainPolicy names the policies and the rule.
	for _, tr := range []struct {
		from fabric.LocalAttachment
		port int
		want []string
	}{
		{attB, 9090, []string{"ct(table=2,zone=7)", fmt.Sprintf("%d. ip,tun_id=0x7,dl_dst=%s, priority 50", ingressTable, attA.MAC()), "Datapath actions: drop",
			"  The egress of 10.7.0.2 is not isolated: no policy selects it for egress.\n  Dropped: the ingress of 10.7.0.1 is isolated by web, and no rule of theirs allows the packet.\n"}},
		{attC, 8080, []string{fmt.Sprintf("%d. ip,tun_id=0x7,dl_src=%s, priority 50", egressTable, attC.MAC()), "Datapath actions: drop",
			"  Dropped: the egress of 10.7.0.3 is isolated by c-out, and no rule of theirs allows the packet.\n"}},
		{attB, 8080, []string{fmt.Sprintf("%d. conj_id=", ingressTable), "Datapath actions: ct(commit,zone=7),",
			"  The ingress of 10.7.0.1 is allowed by web ingress[0].\n"}},
	} {
		p := Packet{From: tr.from, To: attA.IP, Protocol: TraceTCP, Port: tr.port}
		out, err := node.fabric.Trace(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		out += ExplainPolicy(out, p, fabric.NetworkPolicy{VNI: vni, Policies: []fabric.Policy{web, cOut}})
		for _, w := range tr.want {
			if !strings.Contains(out, w) {
				t.Errorf("trace from %v to A's %d does not say %q:\n%s", tr.from, tr.port, w, out)
			}
		}
	}
	// A admits TCP 8080 from B, and nothing else new.
	established := opens(guestB, attA.IP, 8080)
	refused(guestB, attA.IP, 9090)
	refused(guestC, attA.IP, 8080)
	pings(guestB, attA.IP, false)
	udp(guestB, attB.IP, attA.IP, udpA, 0)
	// A itself is not isolated for egress, and the replies to what it
	// opens pass, though it is isolated for ingress; ARP works both ways.
	if _, err := guestA.Run(ctx, "ip", "neigh", "flush", "all"); err != nil {
		t.Fatal(err)
	}
	pings(guestA, attB.IP, true)
	opens(guestA, attB.IP, 9090)
	// C may send only UDP near probePort, and not to A; fragments of an
	// allowed datagram all pass.
	udp(guestC, attC.IP, attB.IP, udpB, 3)
	bigUDP(guestC, attC.IP, attB.IP, udpB, 3)
	udp(guestC, attC.IP, attA.IP, udpA, 0)
	bigUDP(guestC, attC.IP, attA.IP, udpA, 0)
	refused(guestC, attB.IP, 8080)
	pings(guestC, attB.IP, false)
	// B is not isolated: C's egress policy does not stop B reaching C.
	opens(guestB, attC.IP, 8080)
	// What was dropped is counted at A's ingress and C's egress, and
	// nowhere else. Open vSwitch updates the counts about once a second.
	type dropKey struct {
		mac    string
		egress bool
	}
	var counted map[dropKey]uint64
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		drops, err := node.fabric.PolicyDrops(ctx)
		if err != nil {
			t.Fatalf("PolicyDrops: %v", err)
		}
		counted = map[dropKey]uint64{}
		for _, d := range drops {
			if d.VNI != vni {
				t.Errorf("PolicyDrops has %+v, of another network", d)
			}
			counted[dropKey{d.MAC.String(), d.Egress}] += d.Packets
		}
		if counted[dropKey{attA.MAC().String(), false}] > 0 && counted[dropKey{attC.MAC().String(), true}] > 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(counted) != 2 || counted[dropKey{attA.MAC().String(), false}] == 0 || counted[dropKey{attC.MAC().String(), true}] == 0 {
		t.Errorf("PolicyDrops counted %v, want drops at A's ingress and C's egress only", counted)
	}
	// The network's own read has the same drop flows; another network's
	// has none.
	if drops, err := node.fabric.NetworkPolicyDrops(ctx, vni); err != nil || len(drops) != 2 {
		t.Errorf("NetworkPolicyDrops(%d) = %+v, %v; want A's ingress and C's egress", vni, drops, err)
	}
	if drops, err := node.fabric.NetworkPolicyDrops(ctx, vni+1); err != nil || len(drops) != 0 {
		t.Errorf("NetworkPolicyDrops(%d) = %+v, %v; want none", vni+1, drops, err)
	}

	// An update that still allows the established connection, and now
	// allows C to A's 9090 (C's egress with it).
	web2 := web
	web2.IngressRules = append(web2.IngressRules[:1:1], fabric.Rule{
		Peers: []fabric.Peer{{Prefix: netip.PrefixFrom(attC.IP, 32)}},
		Ports: []fabric.Port{{Protocol: fabric.ProtocolTCP, Port: 9000, EndPort: 9999}},
	})
	cOut2 := cOut
	cOut2.EgressRules = append(cOut2.EgressRules[:1:1], fabric.Rule{
		Peers: []fabric.Peer{{Prefix: netip.PrefixFrom(attA.IP, 32)}},
		Ports: []fabric.Port{{Protocol: fabric.ProtocolTCP, Port: 9090}},
	})
	setPolicy(web2, cOut2)
	if established != nil {
		if err := echo(established, "still there"); err != nil {
			t.Errorf("the established connection from B to A after an update that allows it: %v", err)
		}
	}
	opens(guestC, attA.IP, 9090)
	refused(guestC, attA.IP, 8080)
	opens(guestB, attA.IP, 8080)

	// Updates leave no window: while the policy flips between two that
	// both deny B's UDP to A, none of a steady stream arrives. (Deleting
	// the old flows before adding the new ones, in two steps, would let
	// it through.)
	conn := dialNoChecksum(t, guestB, &net.UDPAddr{IP: attB.IP.AsSlice()}, &net.UDPAddr{IP: attA.IP.AsSlice(), Port: probePort})
	stop := make(chan struct{})
	sent := make(chan int)
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				sent <- n
				return
			default:
			}
			if _, err := conn.Write([]byte("kos probe")); err == nil {
				n++
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	for i := range 20 {
		pols := []fabric.Policy{web2, cOut2}
		if i%2 == 0 {
			pols[0] = web
		}
		if err := node.fabric.SetPolicy(ctx, fabric.NetworkPolicy{VNI: vni, Policies: pols}); err != nil {
			t.Fatalf("SetPolicy: %v", err)
		}
	}
	close(stop)
	n := <-sent
	conn.Close()
	if got := received(t, udpA, 300*time.Millisecond); got != 0 || n == 0 {
		t.Errorf("while the policy changed 20 times, A received %d of %d datagrams B sent, want none of some", got, n)
	}

	// Each update is in force once setPolicy returns: UDP from B to A's
	// probePort, from a new source port each time, is allowed and denied
	// in turn.
	udpFromB := fabric.Policy{
		Name: "udp-from-b", Selected: []netip.Addr{attA.IP}, Ingress: true,
		IngressRules: []fabric.Rule{{
			Peers: []fabric.Peer{{Prefix: netip.PrefixFrom(attB.IP, 32)}},
			Ports: []fabric.Port{{Protocol: fabric.ProtocolUDP, Port: probePort}},
		}},
	}
	var late []int
	for range 5 {
		setPolicy(web, udpFromB)
		sendUDP(t, guestB, attB.IP, attA.IP, 1)
		setPolicy(web)
		sendUDP(t, guestB, attB.IP, attA.IP, 1)
		if got := received(t, udpA, 100*time.Millisecond); got != 1 {
			late = append(late, got)
		}
	}
	if len(late) != 0 {
		t.Errorf("in %d of 5 flips, A received other than the one datagram sent after allowing and none of the one after denying: %v", len(late), late)
	}

	// An update that denies B to A: new connections are refused; the
	// established one is not cut (see docs/policy.md).
	setPolicy(fabric.Policy{Name: "web", Selected: []netip.Addr{attA.IP}, Ingress: true}, cOut2)
	refused(guestB, attA.IP, 8080)
	if established != nil {
		if err := echo(established, "not cut"); err != nil {
			t.Errorf("the established connection from B to A after an update that denies it: %v", err)
		}
	}

	// Lifting the policy opens everything.
	setPolicy()
	opens(guestC, attA.IP, 8080)
	pings(guestB, attA.IP, true)
	udp(guestC, attC.IP, attA.IP, udpA, 3)
	if inv := list(t, node.fabric); len(inv.Local) != 3 || len(inv.Policies) != 0 {
		t.Errorf("List = %+v, want 3 whole local attachments and no policy", inv)
	}
	if out := dumpFlows(t, node.ovs); strings.Contains(out, "ct(") || strings.Contains(out, "conj") {
		t.Errorf("policy flows are left after lifting the policy:\n%s", out)
	}
}

// TestIntegrationPolicyAcrossNodes enforces policy on traffic through the
// VXLAN tunnel between two simulated nodes: guest A on node A admits TCP
// 8080 from guest B1 on node B only; guest B2 on node B is isolated for
// egress and may reach nothing. Each node enforces its own guests' side,
// and replies cross the tunnel as established traffic.
func TestIntegrationPolicyAcrossNodes(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	nsA, nsB := ovsenv.NetnsT(t), ovsenv.NetnsT(t)
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
	const vni = 9
	attA := fabric.LocalAttachment{VNI: vni, IP: netip.MustParseAddr("10.9.0.1")}
	attB1 := fabric.LocalAttachment{VNI: vni, IP: netip.MustParseAddr("10.9.0.2")}
	attB2 := fabric.LocalAttachment{VNI: vni, IP: netip.MustParseAddr("10.9.0.3")}
	guestA := a.attachGuest(t, ctx, attA)
	guestB1 := b.attachGuest(t, ctx, attB1)
	guestB2 := b.attachGuest(t, ctx, attB2)
	remote := func(att fabric.LocalAttachment, on *node) fabric.RemoteAttachment {
		return fabric.RemoteAttachment{VNI: att.VNI, IP: att.IP, HostIP: on.hostIP}
	}
	if err := a.fabric.CreateRemote(ctx, remote(attB1, b), remote(attB2, b)); err != nil {
		t.Fatal(err)
	}
	if err := b.fabric.CreateRemote(ctx, remote(attA, a)); err != nil {
		t.Fatal(err)
	}
	for _, g := range []*ovsenv.Netns{guestA, guestB1, guestB2} {
		serveTCP(t, g, 8080)
	}
	set := func(n *node, pols ...fabric.Policy) {
		t.Helper()
		if err := n.fabric.SetPolicy(ctx, fabric.NetworkPolicy{VNI: vni, Policies: pols}); err != nil {
			t.Fatalf("SetPolicy: %v", err)
		}
		if _, err := n.fabric.ovs.appctl(ctx, "revalidator/wait"); err != nil {
			t.Fatal(err)
		}
	}
	opens := func(from *ovsenv.Netns, to netip.Addr) {
		t.Helper()
		c, err := dialTCP(from, to, 8080)
		if err != nil {
			t.Errorf("TCP from %s to %v:8080: %v, want a connection", from.Name, to, err)
			return
		}
		defer c.Close()
		if err := echo(c, "hello"); err != nil {
			t.Errorf("TCP from %s to %v:8080: %v", from.Name, to, err)
		}
	}
	refused := func(from *ovsenv.Netns, to netip.Addr) {
		t.Helper()
		if c, err := dialTCP(from, to, 8080); err == nil {
			c.Close()
			t.Errorf("TCP from %s to %v:8080 opened, want it denied", from.Name, to)
		}
	}

	// Node A holds A's ingress policy, node B holds B2's egress policy.
	set(a, fabric.Policy{
		Name: "web", Selected: []netip.Addr{attA.IP}, Ingress: true,
		IngressRules: []fabric.Rule{{
			Peers: []fabric.Peer{{Prefix: netip.PrefixFrom(attB1.IP, 32)}},
			Ports: []fabric.Port{{Protocol: fabric.ProtocolTCP, Port: 8080}},
		}},
	})
	set(b, fabric.Policy{Name: "b2-silent", Selected: []netip.Addr{attB2.IP}, Egress: true})

	opens(guestB1, attA.IP)
	refused(guestB2, attA.IP)
	// A is not isolated for egress and B1 not for ingress: A reaches B1,
	// and B1's replies pass A's ingress policy as established.
	opens(guestA, attB1.IP)
	if got, err := guestA.Ping(ctx, attB1.IP, 2, time.Second); err != nil || got != 2 {
		t.Errorf("ping from A to B1: %d of 2 replies (%v), want 2", got, err)
	}
	// B2 is isolated for egress only: A reaches it, as B2's replies are
	// established traffic for node B, though B2 may open nothing.
	opens(guestA, attB2.IP)
	// Only node B stops B2: without node B's policy, A's ingress rule
	// still refuses B2.
	set(b)
	refused(guestB2, attA.IP)
	// And without node A's, B2 reaches A.
	set(a)
	opens(guestB2, attA.IP)
}

// TestIntegrationPolicyGates checks what SetPolicy keeps of the networks'
// gates, which spares it a read of the switch per call: it follows
// SetPolicy's calls, is forgotten when Ensure finds the switch lost its
// flows, and, for one network, when List finds the switch says otherwise.
func TestIntegrationPolicyGates(t *testing.T) {
	f, inst := startFabric(t)
	ctx := t.Context()
	isolating := func(vni uint32) fabric.NetworkPolicy {
		return fabric.NetworkPolicy{VNI: vni, Policies: []fabric.Policy{{Name: "ns/deny", Ingress: true,
			Selected: []netip.Addr{netip.MustParseAddr("10.0.0.5")}}}}
	}
	gates := func() map[uint32]bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return maps.Clone(f.gates)
	}
	for _, p := range []fabric.NetworkPolicy{isolating(1), isolating(2), {VNI: 3}} {
		if err := f.SetPolicy(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff(gates(), map[uint32]bool{1: true, 2: true, 3: false}); diff != "" {
		t.Errorf("gates after SetPolicy (-got +want):\n%s", diff)
	}
	// Someone else lifts network 2's policy: List sees it and forgets
	// network 2 alone, so that its next SetPolicy reads the switch.
	if _, err := inst.Run(ctx, "ovs-ofctl", "-O", "OpenFlow14", "del-flows", DefaultBridge, fmt.Sprintf("cookie=%#x/-1", policyCookie(2))); err != nil {
		t.Fatal(err)
	}
	if _, err := f.List(ctx); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(gates(), map[uint32]bool{1: true, 3: false}); diff != "" {
		t.Errorf("gates after List (-got +want):\n%s", diff)
	}
	// The switch loses every flow, as when ovs-vswitchd restarts.
	if _, err := inst.Run(ctx, "ovs-ofctl", "-O", "OpenFlow14", "del-flows", DefaultBridge); err != nil {
		t.Fatal(err)
	}
	if lost, err := f.Ensure(ctx); err != nil || !lost {
		t.Fatalf("Ensure after the flows went: lost %v, %v; want lost", lost, err)
	}
	if got := gates(); len(got) != 0 {
		t.Errorf("gates after Ensure found the flows lost: %v, want none", got)
	}
	if err := f.SetPolicy(ctx, isolating(1)); err != nil {
		t.Fatal(err)
	}
	inv, err := f.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(inv.Policies, []uint32{1}); diff != "" {
		t.Errorf("networks with policy (-got +want):\n%s", diff)
	}
}
