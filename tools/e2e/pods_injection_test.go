package e2e

// This file holds the injection step of TestIntegrationPods: frames and
// datagrams that KOS must not deliver, and the counts on a node's wire, in a
// pod's sink and in the agents' drop counters that show it.

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	networkv1alpha1 "github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/tools/cluster"
	"github.com/kos-sdn/kos/tools/e2e/frames"
	"github.com/kos-sdn/kos/tools/ovsenv"
)

// sinkPort is where a pod counts the datagrams the injection step sends.
const sinkPort = 9999

// testPodsInjection sends datagrams to blue-2 (on the second node) that KOS
// must not deliver: VXLAN frames of blue's VNI from the host, which is no
// node, and of green's VNI, to green-1, from the third node, which has no
// green attachment; and datagrams blue-1 sends with blue-3's address or
// MAC address. Each is counted by a sink in the target pod, which must
// count none, while the same from where they belong (blue-1's node,
// blue-1's own addresses) arrive. The agents' drop counters rise.
func (p *podsTest) testPodsInjection(t *testing.T) {
	n1, n2, n3 := p.env.Nodes[0], p.env.Nodes[1], p.env.Nodes[2]
	blue1, blue2, green := p.attachmentsOf(t, p.blue[0])[0], p.attachmentsOf(t, p.blue[1])[0], p.attachmentsOf(t, p.green)[0]
	payload := []byte("injected")
	frameTo := func(to, from networkv1alpha1.NetworkAttachment) []byte {
		dst, err := net.ParseMAC(to.Status.MACAddress)
		if err != nil {
			t.Fatal(err)
		}
		src, err := net.ParseMAC(from.Status.MACAddress)
		if err != nil {
			t.Fatal(err)
		}
		ip := frames.IPv4UDP(netip.MustParseAddr(from.Status.IPv4), netip.MustParseAddr(to.Status.IPv4), 40000, sinkPort, payload)
		return frames.VXLAN(to.Status.AddressVNI, frames.Ethernet(dst, src, ip))
	}
	// inject sends the frame 20 times to node n2's tunnel port from addr,
	// in network namespace netns ("" for the test's own).
	inject := func(netns string, from netip.Addr, frame []byte) func() {
		return func() {
			send := func() error {
				// Unconnected: a port-unreachable from the node's
				// own stack must not fail the next write.
				c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(from, 0)))
				if err != nil {
					return err
				}
				defer c.Close()
				if err := zeroUDPChecksum(c); err != nil {
					return err
				}
				to := net.UDPAddrFromAddrPort(netip.AddrPortFrom(n2.IP, 4789))
				for range 20 {
					if _, err := c.WriteToUDP(frame, to); err != nil {
						return err
					}
					time.Sleep(10 * time.Millisecond)
				}
				return nil
			}
			// Count the frames on n2's wire, so that "none arrived" means
			// the switch refused them, not that they never reached the
			// node.
			wire := countOnWire(t, n2, from)
			var err error
			if netns == "" {
				err = send()
			} else {
				err = (&ovsenv.Netns{Name: netns}).Do(send)
			}
			if err != nil {
				t.Fatalf("injecting from %s: %v", from, err)
			}
			if got := wire(20); got < 20 {
				t.Errorf("injecting from %s: %d of 20 frames reached %s's eth0, so what the pods count says nothing of KOS's filter", from, got, n2.Name)
			}
		}
	}
	inPod := func(pod string, args ...string) func() {
		return func() { p.exec(t, pod, append([]string{podnetBin, "udp-send"}, args...)...) }
	}
	blue2At := netip.AddrPortFrom(p.ips[p.blue[1]], sinkPort).String()
	blue3 := p.attachmentsOf(t, p.blue[2])[0]
	// inPodFrame has blue-1 send whole frames to blue-2 with its own
	// address and the source MAC address mac.
	inPodFrame := func(mac string) func() {
		return func() {
			p.exec(t, p.blue[0], podnetBin, "frame-send", podsIfName, mac, blue2.Status.MACAddress, p.ips[p.blue[0]].String(), blue2At, "20")
		}
	}
	tunnelDrops := p.agentCounter(t, n2, "kos_agent_tunnel_drops_total")
	filterDrops := p.agentCounter(t, n2, "kos_agent_tunnel_filter_drops_total")
	spoofDrops := p.agentCounter(t, n1, "kos_agent_spoofed_drops_total")
	cases := []struct {
		name   string
		sink   string
		send   func()
		arrive bool
	}{
		{"blue from blue-1's node (the control)", p.blue[1], inject(n1.Netns, n1.IP, frameTo(blue2, blue1)), true},
		{"blue from the host, which is no node", p.blue[1], inject("", n1.HostIP, frameTo(blue2, blue1)), false},
		{"green from a node without green", p.green, inject(n3.Netns, n3.IP, frameTo(green, blue1)), false},
		{"blue-1's own address (the control)", p.blue[1], inPod(p.blue[0], blue2At, "20"), true},
		{"blue-1 with blue-3's address", p.blue[1], inPod(p.blue[0], "-src", p.ips[p.blue[2]].String(), blue2At, "20"), false},
		{"blue-1's own MAC in a frame of its own (the control)", p.blue[1], inPodFrame(blue1.Status.MACAddress), true},
		{"blue-1 with blue-3's MAC", p.blue[1], inPodFrame(blue3.Status.MACAddress), false},
	}
	for _, c := range cases {
		got := p.countAt(t, c.sink, c.send)
		t.Logf("%s: %d of 20 datagrams reached %s", c.name, got, c.sink)
		if c.arrive && got == 0 {
			t.Errorf("%s: nothing reached %s, so the check of the others shows nothing", c.name, c.sink)
		}
		if !c.arrive && got != 0 {
			t.Errorf("%s: %d datagrams reached %s, want none", c.name, got, c.sink)
		}
	}
	// The host's frames never reach the tunnel: the node's tunnel filter
	// (on br-ul, the userspace datapath's) drops them, as the host is no
	// node of n2's networks. The frames of the node without green, a peer
	// through blue, reach the switch's tunnel port (their checksum is
	// zero, see zeroUDPChecksum) and are dropped and counted there, by
	// KOS's flows.
	after := p.agentCounter(t, n2, "kos_agent_tunnel_drops_total")
	afterFilter := p.agentCounter(t, n2, "kos_agent_tunnel_filter_drops_total")
	t.Logf("%s's kos_agent_tunnel_drops_total: %v before, %v after; kos_agent_tunnel_filter_drops_total: %v before, %v after the 40 injected frames",
		n2.Name, tunnelDrops, after, filterDrops, afterFilter)
	if after < tunnelDrops+20 {
		t.Errorf("%s's kos_agent_tunnel_drops_total went from %v to %v, want at least the 20 frames of the node without green more", n2.Name, tunnelDrops, after)
	}
	if afterFilter < filterDrops+20 {
		t.Errorf("%s's kos_agent_tunnel_filter_drops_total went from %v to %v, want at least the 20 frames of the host more", n2.Name, filterDrops, afterFilter)
	}
	if after := p.agentCounter(t, n1, "kos_agent_spoofed_drops_total"); after < spoofDrops+40 {
		t.Errorf("%s's kos_agent_spoofed_drops_total went from %v to %v, want at least the 40 spoofed datagrams more", n1.Name, spoofDrops, after)
	}
}

// zeroUDPChecksum has c send its datagrams with a UDP checksum of zero
// (none, which IPv4 allows), as Linux's own VXLAN devices do by default.
// With a checksum the kernel leaves to offload, a datagram crosses the
// test's veth pairs unfinished, and the node's userspace Open vSwitch,
// which reads its eth0 with a packet socket, sees a checksum that fails:
// its decapsulation then drops the frame before any flow of KOS sees it,
// so an injected frame would test Open vSwitch's checksum check, not
// KOS's filter. (Frames a node sends pass through its own switch, which
// finishes the checksum; on a real wire the sender's NIC does.)
func zeroUDPChecksum(c *net.UDPConn) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_NO_CHECK, 1)
	}); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("asking for no UDP checksum (SO_NO_CHECK): %w", serr)
	}
	return nil
}

// countOnWire counts the VXLAN datagrams from src that reach node n's eth0,
// with a rule of the raw table's PREROUTING in the node's network namespace
// (which sees what arrives there before Open vSwitch's userspace datapath
// or the node's stack take it). It returns a function that waits up to 2 s
// for want of them (the last sent may still be on its way on a loaded
// machine), removes the rule and returns the count.
func countOnWire(t *testing.T, n *cluster.Node, src netip.Addr) func(want int) int {
	t.Helper()
	rule := []string{"PREROUTING", "-i", "eth0", "-s", src.String(), "-p", "udp", "--dport", "4789", "-m", "comment", "--comment", "kos-e2e-injection"}
	ipt := func(args ...string) string {
		out, err := exec.Command("ip", append([]string{"netns", "exec", n.Netns, "iptables", "-w", "-t", "raw"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("node %s: iptables -t raw %s: %v: %s", n.Name, strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	count := func() int {
		out := ipt("-L", "PREROUTING", "-v", "-x", "-n")
		for line := range strings.SplitSeq(out, "\n") {
			if f := strings.Fields(line); len(f) > 0 && strings.Contains(line, "kos-e2e-injection") {
				got, err := strconv.Atoi(f[0])
				if err != nil {
					t.Fatalf("node %s: no packet count in %q", n.Name, line)
				}
				return got
			}
		}
		t.Fatalf("node %s: the counting rule is gone from PREROUTING:\n%s", n.Name, out)
		return 0
	}
	ipt(append([]string{"-I"}, rule...)...)
	return func(want int) int {
		defer ipt(append([]string{"-D"}, rule...)...)
		got := count()
		for deadline := time.Now().Add(2 * time.Second); got < want && time.Now().Before(deadline); got = count() {
			time.Sleep(100 * time.Millisecond)
		}
		return got
	}
}

// countAt runs a datagram sink in the pod, calls send while it listens,
// and returns how many datagrams it counted.
func (p *podsTest) countAt(t *testing.T, pod string, send func()) int {
	t.Helper()
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := p.execErr(t.Context(), pod, podnetBin, "udp-sink", fmt.Sprint(sinkPort), "6")
		done <- result{out, err}
	}()
	// kubectl exec takes a moment to start the sink.
	time.Sleep(2 * time.Second)
	send()
	r := <-done
	n, err := strconv.Atoi(strings.TrimSpace(r.out))
	if r.err != nil || err != nil {
		t.Fatalf("the sink in %s: %v %v: %q", pod, r.err, err, r.out)
	}
	return n
}

// agentCounter returns the sum of a counter's samples on the agent of
// node, from its /metrics on the node's address. name may carry the
// first of the series' labels, in the order /metrics prints them (sorted),
// such as kos_x_total{direction="egress",: only those series count.
func (p *podsTest) agentCounter(t *testing.T, n *cluster.Node, name string) float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+netip.AddrPortFrom(n.IP, 9298).String()+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("the metrics of %s's agent: %v", n.Name, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	found := false
	for line := range strings.SplitSeq(string(data), "\n") {
		whole := strings.HasPrefix(line, name+" ") || strings.HasPrefix(line, name+"{")
		if !whole && (!strings.Contains(name, "{") || !strings.HasPrefix(line, name)) {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("%s: %q: %v", name, line, err)
		}
		sum += v
		found = true
	}
	if !found {
		t.Logf("%s's agent has no sample of %s yet", n.Name, name)
	}
	return sum
}
