package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	networkv1alpha1 "github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/controllers/ipam"
	"github.com/kos-sdn/kos/components/fabric"
	"github.com/kos-sdn/kos/tools/cluster"
	"github.com/kos-sdn/kos/tools/e2e/frames"
	"github.com/kos-sdn/kos/tools/e2e/podnet/report"
	"github.com/kos-sdn/kos/tools/figures"
	"github.com/kos-sdn/kos/tools/images"
	"github.com/kos-sdn/kos/tools/kosinstall"
	"github.com/kos-sdn/kos/tools/ovsenv"
	"github.com/kos-sdn/kos/tools/poll"
	"github.com/kos-sdn/kos/tools/testenv"
)

// The pods' test: what a user of KOS networks runs.
const (
	// podsNamespace holds the pods, their networks and subnets.
	podsNamespace = "e2e-pods"
	// podsCIDR is both subnets' block: two tenants may use the same
	// addresses in their own VNIs (podsVNI and the next), which no other
	// test of a cluster that also runs this one uses.
	podsCIDR = "10.254.0.0/24"
	podsVNI  = 4301
	// podnetPort is where each pod's podnet serves its TCP sink.
	podnetPort = "7777"
	// transferBytes is the size of the TCP transfer between pods on two
	// nodes: 64 MiB, with no MTU set by the test.
	transferBytes = 64 << 20
	// podsIfName is the interface Multus names a pod's first extra network.
	podsIfName = "net1"
)

// The programs of the pods' image.
var (
	podnetBin = images.BinDir + "/podnet"
	pingBin   = "/usr/bin/ping"
)

// networkAttachmentDefinitions is the resource of Multus's
// NetworkAttachmentDefinitions.
var networkAttachmentDefinitions = schema.GroupVersionResource{Group: "k8s.cni.cncf.io", Version: "v1", Resource: "network-attachment-definitions"}

// TestIntegrationPods uses KOS as its users do, on the pods' shared
// cluster (three nodes that run Multus, the standard release installed
// from its tree): NetworkAttachmentDefinitions of type kos, pods that name
// them in k8s.v1.cni.cncf.io/networks, and traffic between the pods' KOS
// interfaces across nodes, with nothing set by hand (no MTU, no address,
// no route).
func TestIntegrationPods(t *testing.T) {
	began := time.Now()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	p := &podsTest{standard: sharedPods(t, root), ips: map[string]netip.Addr{}}
	figures.Duration(t, "pods-cluster-up", time.Since(began))
	p.deletedAtEnd(t, podsNamespace)
	requireNewestFits(t, p.kos)
	runStepsDumping(t, func() {
		p.dumpState()
		p.dumpNamespace(podsNamespace)
		p.dumpFabrics()
	}, []step{
		{"the pods' image pushed", p.testPushPodnet},
		{"pods get KOS interfaces", p.testPodsStart},
		{"pods ping across nodes", p.testPodsPing},
		{"64 MiB between pods on two nodes", p.testPodsTransfer},
		{"another VNI reaches nothing", p.testPodsIsolation},
		{"injected and spoofed frames reach nothing", p.testPodsInjection},
		{"kos-agent and ovs-vswitchd killed under pod traffic", p.testPodsRestarts},
		{"what a pod asks for wrongly fails its ADD and leaks nothing", p.testPodsBadRequests},
		{"a deleted pod leaves nothing", p.testPodsDelete},
		{"a pod goes while its node's agent does not answer", p.testPodsDelWithoutAgent},
	})
	figures.Duration(t, "pods-whole-test", time.Since(began))
}

// podsTest is TestIntegrationPods's state.
type podsTest struct {
	*standard
	// image is the podnet image, in the cluster's registry.
	image string
	// blue are the pods on subnet blue, one per node, in node order.
	blue []string
	// green is the pod on subnet green.
	green string
	// ips are the pods' addresses on their KOS networks, by pod.
	ips map[string]netip.Addr
}

// testPushPodnet pushes the pods' image, podnet and ping, to the
// cluster's registry.
func (p *podsTest) testPushPodnet(t *testing.T) {
	p.image = pushPodnet(t, p.env.Registry)
}

// pushPodnet builds the pods' image, podnet and ping, and pushes it to the
// cluster's registry; it returns the image's name.
func pushPodnet(t *testing.T, registry string) string {
	t.Helper()
	ctx := t.Context()
	began := time.Now()
	dir := t.TempDir()
	goFiles, err := images.BuildGo(ctx, images.GoOptions{OutDir: filepath.Join(dir, "bin")}, "github.com/kos-sdn/kos/tools/e2e/podnet")
	if err != nil {
		t.Fatal(err)
	}
	hostFiles, err := images.HostBinaries(ctx, pingBin)
	if err != nil {
		t.Fatal(err)
	}
	layer, err := images.Layer(append(goFiles, hostFiles...))
	if err != nil {
		t.Fatal(err)
	}
	img, err := images.New(images.Config{Entrypoint: []string{podnetBin}, Cmd: []string{"serve", podnetPort}}, layer)
	if err != nil {
		t.Fatal(err)
	}
	image := registry + "/e2e/podnet:1"
	ref, err := name.NewTag(image)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		t.Fatalf("pushing %s: %v", image, err)
	}
	t.Logf("pushed %s in %s", image, since(began))
	return image
}

// testPodsStart makes subnets blue and green (one CIDR block, two VNIs),
// a NetworkAttachmentDefinition of type kos for each, a pod on blue on
// every node and one on green, and waits until they run with their KOS
// interfaces.
func (p *podsTest) testPodsStart(t *testing.T) {
	ctx := t.Context()
	if _, err := p.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: podsNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for name, vni := range map[string]uint32{"blue": podsVNI, "green": podsVNI + 1} {
		subnet := &networkv1alpha1.Subnet{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: networkv1alpha1.SubnetSpec{IPv4: podsCIDR, VNI: vni}}
		if _, err := p.network.NetworkV1alpha1().Subnets(podsNamespace).Create(ctx, subnet, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating subnet %s: %v", name, err)
		}
		p.createNAD(t, name+"-net", map[string]any{"cniVersion": "1.0.0", "type": "kos", "subnet": name})
	}
	began := time.Now()
	for i, n := range p.env.Nodes {
		name := fmt.Sprintf("blue-%d", i+1)
		p.createPod(t, name, n.Name, "blue-net")
		p.blue = append(p.blue, name)
	}
	// green on the second node, beside a blue pod: the VNIs share that
	// node's switch.
	p.green = "green-1"
	p.createPod(t, p.green, p.env.Nodes[1].Name, "green-net")
	for _, name := range append(slices.Clone(p.blue), p.green) {
		p.awaitRunning(t, name, 3*time.Minute)
	}
	figures.Duration(t, "pods-created-to-running", time.Since(began))

	// The interface holding the node's address (bridge br-ul of the
	// userspace agent) carries the underlay's MTU; the pods' interfaces
	// get 50 bytes less, which the test does not set.
	want := p.underlayMTU(t, p.env.Nodes[0]) - fabric.VXLANOverhead
	for _, name := range append(slices.Clone(p.blue), p.green) {
		p.ips[name] = p.kosAddress(t, name)
		out := p.exec(t, name, podnetBin, "addr", podsIfName)
		fields := strings.Fields(out)
		if len(fields) < 2 || fields[0] != fmt.Sprint(want) || fields[1] != netip.PrefixFrom(p.ips[name], netip.MustParsePrefix(podsCIDR).Bits()).String() {
			t.Errorf("pod %s: %s is %q, want MTU %d and address %s/%d", name, podsIfName, strings.TrimSpace(out), want, p.ips[name], netip.MustParsePrefix(podsCIDR).Bits())
		}
		t.Logf("pod %s: %s %s", name, podsIfName, strings.TrimSpace(out))
	}
}

// testPodsPing pings every blue pod from every other.
func (p *podsTest) testPodsPing(t *testing.T) {
	for _, from := range p.blue {
		for _, to := range p.blue {
			if from == to {
				continue
			}
			began := time.Now()
			poll.Until(t, time.Minute, fmt.Sprintf("%s to answer %s's ping", to, from), func(ctx context.Context) error {
				_, err := p.execErr(ctx, from, pingBin, "-c", "1", "-W", "2", p.ips[to].String())
				return err
			})
			if out, err := p.execErr(t.Context(), from, pingBin, "-c", "3", "-i", "0.2", "-W", "2", p.ips[to].String()); err != nil {
				t.Errorf("ping %s -> %s (%s) after the first reply (%s): %v\n%s", from, to, p.ips[to], since(began), err, out)
			}
		}
	}
}

// testPodsTransfer sends 64 MiB from the first node's pod to the second's
// over KOS and checks it arrived intact; then the same over the pods'
// primary network (the nodes' underlay, unencapsulated), for the ratio.
func (p *podsTest) testPodsTransfer(t *testing.T) {
	from, to := p.blue[0], p.blue[1]
	kos := p.transfer(t, from, netip.AddrPortFrom(p.ips[to], 7777).String())
	pod, err := p.kube.CoreV1().Pods(podsNamespace).Get(t.Context(), to, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	primary := p.transfer(t, from, pod.Status.PodIP+":"+podnetPort)
	t.Logf("figure pods-tcp-kos %.1f MB/s", kos.MBps)
	t.Logf("figure pods-tcp-primary %.1f MB/s", primary.MBps)
	t.Logf("figure pods-tcp-ratio %.2f (KOS over the primary network, one run, same tool)", kos.MBps/primary.MBps)
}

func (p *podsTest) transfer(t *testing.T, from, to string) report.Transfer {
	t.Helper()
	out, err := p.execErr(t.Context(), from, podnetBin, "send", to, fmt.Sprint(transferBytes))
	var r report.Transfer
	if jerr := json.Unmarshal([]byte(out), &r); jerr != nil || err != nil {
		t.Fatalf("sending %d bytes %s -> %s: %v (report %q)", transferBytes, from, to, err, out)
	}
	if r.Sent != r.Received {
		t.Fatalf("sending %d bytes %s -> %s: sent SHA-256 %s, the sink got %s", transferBytes, from, to, r.Sent, r.Received)
	}
	t.Logf("%s -> %s: %d bytes intact in %.1f s (%.1f MB/s)", from, to, r.Bytes, r.Seconds, r.MBps)
	return r
}

// testPodsIsolation checks that the green pod, on a node that has a blue
// pod, reaches none of the blue pods' addresses (green has none of them)
// while it shares their CIDR block.
func (p *podsTest) testPodsIsolation(t *testing.T) {
	checked := 0
	for _, b := range p.blue {
		if p.ips[b] == p.ips[p.green] {
			continue
		}
		out, err := p.execErr(t.Context(), p.green, pingBin, "-c", "3", "-i", "0.2", "-W", "1", p.ips[b].String())
		if err == nil {
			t.Errorf("pod %s (green) reached %s of %s (blue):\n%s", p.green, p.ips[b], b, out)
		}
		checked++
	}
	if checked == 0 {
		t.Fatal("the isolation check checked nothing: green's address is every blue pod's")
	}
}

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

// testPodsRestarts kills the kos-agent of the second blue pod's node while
// the first pings it: the pings go on (the switch keeps its flows); then
// ovs-vswitchd of that node: the pings come back by themselves, once the
// restarted daemon has the pod's veth port again and the agent its flows.
func (p *podsTest) testPodsRestarts(t *testing.T) {
	from, to := p.blue[0], p.blue[1]
	node := p.node(t, p.env.Nodes[1].Name)
	agent := p.firstPod(t, kosinstall.AgentNamespace, "kos-agent", node.Name)
	restarts := containerRestarts(agent, "kos-agent")
	pid := containerPID(t, agent, "kos-agent")
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("killing kos-agent (PID %d) on %s: %v", pid, node.Name, err)
	}
	killed := time.Now()
	// While kubelet restarts it: 20 pings at 0.2 s, a few of which may
	// meet a loaded machine.
	out, err := p.execErr(t.Context(), from, pingBin, "-c", "20", "-i", "0.2", "-W", "1", p.ips[to].String())
	lost := pingLost(out)
	t.Logf("pings %s -> %s while %s's kos-agent restarts: %d of 20 lost (%v)", from, to, node.Name, lost, err)
	if lost < 0 || lost > 4 {
		t.Errorf("pings %s -> %s while the agent was down: %d of 20 lost, want traffic to go on:\n%s", from, to, lost, out)
	}
	poll.Until(t, 3*time.Minute, "kos-agent on "+node.Name+" restarted and Ready", func(ctx context.Context) error {
		pod, err := p.kube.CoreV1().Pods(kosinstall.AgentNamespace).Get(ctx, agent.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if containerRestarts(pod, "kos-agent") <= restarts || !podReady(pod) {
			return fmt.Errorf("restarts %d, ready %t", containerRestarts(pod, "kos-agent"), podReady(pod))
		}
		return nil
	})
	figures.Duration(t, "pods-agent-killed-to-ready", time.Since(killed))

	pid = vswitchdPID(t, node)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("killing ovs-vswitchd (PID %d) on %s: %v", pid, node.Name, err)
	}
	killed = time.Now()
	poll.Until(t, 3*time.Minute, fmt.Sprintf("%s to answer %s's ping after ovs-vswitchd died", to, from), func(ctx context.Context) error {
		_, err := p.execErr(ctx, from, pingBin, "-c", "1", "-W", "1", p.ips[to].String())
		return err
	})
	figures.Duration(t, "pods-vswitchd-killed-to-ping", time.Since(killed))
	// And the bulk path too.
	p.transfer(t, from, netip.AddrPortFrom(p.ips[to], 7777).String())
}

// pingLost returns how many of ping's echo requests went unanswered, from
// its summary line, or -1 without one.
func pingLost(out string) int {
	for line := range strings.SplitSeq(out, "\n") {
		var sent, received int
		if _, err := fmt.Sscanf(strings.TrimSpace(line), "%d packets transmitted, %d received", &sent, &received); err == nil {
			return sent - received
		}
	}
	return -1
}

// testPodsDelWithoutAgent freezes the kos-agent of the first blue pod's
// node (SIGSTOP: its socket accepts and never answers) and deletes the
// pod: kos-cni's DEL gives up on the agent and succeeds, so the pod goes,
// and its attachment with it.
func (p *podsTest) testPodsDelWithoutAgent(t *testing.T) {
	pod := p.blue[0]
	got, err := p.kube.CoreV1().Pods(podsNamespace).Get(t.Context(), pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	agent := p.firstPod(t, kosinstall.AgentNamespace, "kos-agent", got.Spec.NodeName)
	pid := containerPID(t, agent, "kos-agent")
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("stopping kos-agent (PID %d): %v", pid, err)
	}
	stopped := true
	resume := func() {
		if stopped {
			_ = syscall.Kill(pid, syscall.SIGCONT)
			stopped = false
		}
	}
	defer resume()
	began := time.Now()
	p.deletePod(t, pod)
	poll.Until(t, 2*time.Minute, "pod "+pod+" to be gone while its agent is stopped", func(ctx context.Context) error {
		if _, err := p.kube.CoreV1().Pods(podsNamespace).Get(ctx, pod, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (%v)", err)
		}
		return nil
	})
	figures.Duration(t, "pods-delete-without-agent", time.Since(began))
	resume()
	p.awaitNoAttachmentsUID(t, pod, string(got.UID), time.Minute)
}

// testPodsBadRequests starts pods whose networks cannot be given: a NAD
// naming a missing subnet, a malformed NAD, an address outside the subnet
// and one another pod holds. Each pod's events carry the plugin's message,
// and once the pods are deleted no attachment of theirs is left.
func (p *podsTest) testPodsBadRequests(t *testing.T) {
	p.createNAD(t, "missing-net", map[string]any{"cniVersion": "1.0.0", "type": "kos", "subnet": "nope"})
	p.createNAD(t, "nosubnet-net", map[string]any{"cniVersion": "1.0.0", "type": "kos"})
	node := p.env.Nodes[0].Name
	taken := p.ips[p.blue[1]]
	cases := []struct{ pod, networks, want string }{
		{"bad-missing", "missing-net", "subnet nope"},
		{"bad-config", "nosubnet-net", "names no subnet"},
		{"bad-outside", `[{"name":"blue-net","ips":["10.99.0.5/24"]}]`, "10.99.0.5"},
		{"bad-taken", fmt.Sprintf(`[{"name":"blue-net","ips":["%s/24"]}]`, taken), taken.String()},
	}
	for _, c := range cases {
		p.createPod(t, c.pod, node, c.networks)
	}
	for _, c := range cases {
		poll.Until(t, 3*time.Minute, "pod "+c.pod+"'s events to carry the plugin's message ("+c.want+")", func(ctx context.Context) error {
			events, err := p.kube.CoreV1().Events(podsNamespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + c.pod})
			if err != nil {
				return err
			}
			var seen []string
			for _, e := range events.Items {
				if e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, c.want) {
					t.Logf("pod %s: %s: %s", c.pod, e.Reason, e.Message)
					return nil
				}
				seen = append(seen, e.Reason+": "+e.Message)
			}
			return fmt.Errorf("events: %q", seen)
		})
	}
	for _, c := range cases {
		p.deletePod(t, c.pod)
	}
	for _, c := range cases {
		p.awaitNoAttachments(t, c.pod, 30*time.Second)
	}
	// The taken address is still its owner's.
	if out, err := p.execErr(t.Context(), p.blue[0], pingBin, "-c", "1", "-W", "2", taken.String()); err != nil {
		t.Errorf("after a pod asked for %s, its owner %s does not answer: %v\n%s", taken, p.blue[1], err, out)
	}
}

// testPodsDelete deletes the third node's pod and checks that its
// attachment, its address's lock and the veth pair on the node are gone
// within 10 s.
func (p *podsTest) testPodsDelete(t *testing.T) {
	ctx := t.Context()
	pod := p.blue[2]
	atts := p.attachmentsOf(t, pod)
	if len(atts) != 1 {
		t.Fatalf("pod %s has %d attachments, want 1", pod, len(atts))
	}
	att := atts[0]
	ifc := att.Status.IfcName
	addr, err := netip.ParseAddr(att.Status.IPv4)
	if err != nil {
		t.Fatalf("attachment %s's address %q: %v", att.Name, att.Status.IPv4, err)
	}
	lockName := ipam.LockName(podsVNI, addr)
	node := p.node(t, att.Spec.Node)
	if _, err := exec.CommandContext(ctx, "ip", "-n", node.Netns, "link", "show", ifc).CombinedOutput(); err != nil {
		t.Fatalf("node %s has no interface %s for pod %s before the delete: %v", node.Name, ifc, pod, err)
	}
	began := time.Now()
	p.deletePod(t, pod)
	poll.Until(t, 2*time.Minute, "pod "+pod+" to be gone", func(ctx context.Context) error {
		if _, err := p.kube.CoreV1().Pods(podsNamespace).Get(ctx, pod, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (%v)", err)
		}
		return nil
	})
	poll.Until(t, 10*time.Second, "pod "+pod+"'s attachment, lock and veth to be gone", func(ctx context.Context) error {
		if _, err := p.network.NetworkV1alpha1().NetworkAttachments(podsNamespace).Get(ctx, att.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("attachment %s: %v", att.Name, err)
		}
		if _, err := p.network.NetworkV1alpha1().IPLocks(podsNamespace).Get(ctx, lockName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("lock %s: %v", lockName, err)
		}
		if out, err := exec.CommandContext(ctx, "ip", "-n", node.Netns, "link", "show", ifc).CombinedOutput(); err == nil {
			return fmt.Errorf("node %s still has %s: %s", node.Name, ifc, out)
		}
		return nil
	})
	figures.Duration(t, "pods-delete-to-clean", time.Since(began))
}

// deleteAll deletes the pods, then their namespace with its networks and
// attachments, and waits until both are gone.
func (p *podsTest) deleteAll(t *testing.T) {
	t.Helper()
	ctx := t.Context()
	if err := p.kube.CoreV1().Pods(podsNamespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 2*time.Minute, "the pods of "+podsNamespace+" to be gone", func(ctx context.Context) error {
		pods, err := p.kube.CoreV1().Pods(podsNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		var left []string
		for _, pod := range pods.Items {
			left = append(left, fmt.Sprintf("%s (%s, deleted %v)", pod.Name, pod.Status.Phase, pod.DeletionTimestamp != nil))
		}
		if len(left) > 0 {
			return fmt.Errorf("left: %s", strings.Join(left, ", "))
		}
		return nil
	})
	if err := p.kube.CoreV1().Namespaces().Delete(ctx, podsNamespace, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	poll.Until(t, 3*time.Minute, "namespace "+podsNamespace+" to be gone", func(ctx context.Context) error {
		ns, err := p.kube.CoreV1().Namespaces().Get(ctx, podsNamespace, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("still there: %s, %+v", ns.Status.Phase, ns.Status.Conditions)
	})
}

// underlayMTU returns the MTU of the node's interface that holds its
// address.
func (p *podsTest) underlayMTU(t *testing.T, n *cluster.Node) int {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), "ip", "-n", n.Netns, "-o", "-4", "addr", "show", "to", n.IP.String()+"/32").CombinedOutput()
	fields := strings.Fields(string(out))
	if err != nil || len(fields) < 2 {
		t.Fatalf("node %s: the interface holding %s: %v: %s", n.Name, n.IP, err, out)
	}
	ifc := fields[1]
	out, err = exec.CommandContext(t.Context(), "ip", "-n", n.Netns, "-o", "link", "show", ifc).CombinedOutput()
	if err != nil {
		t.Fatalf("node %s: ip link show %s: %v: %s", n.Name, ifc, err, out)
	}
	f := strings.Fields(string(out))
	for i := range f[:len(f)-1] {
		if f[i] == "mtu" {
			v, err := strconv.Atoi(f[i+1])
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Fatalf("node %s: no MTU in %q", n.Name, out)
	return 0
}

// createNAD creates a NetworkAttachmentDefinition of the config.
func (p *podsTest) createNAD(t *testing.T, name string, config map[string]any) {
	t.Helper()
	data, err := json.Marshal(config)
	if err != nil {
		t.Fatal(err)
	}
	nad := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "k8s.cni.cncf.io/v1",
		"kind":       "NetworkAttachmentDefinition",
		"metadata":   map[string]any{"name": name},
		"spec":       map[string]any{"config": string(data)},
	}}
	dyn, err := dynamic.NewForConfig(p.env.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(networkAttachmentDefinitions).Namespace(podsNamespace).Create(t.Context(), nad, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating NetworkAttachmentDefinition %s: %v", name, err)
	}
}

// createPod creates a podnet pod on node with the networks annotation.
func (p *podsTest) createPod(t *testing.T, name, node, networks string) {
	t.Helper()
	// A grace period above 0: with 0 the API drops the pod at once, and
	// only with one does the pod stay until its kubelet has torn the
	// sandbox down (the CNI DEL included), which the tests wait for.
	grace := int64(1)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"k8s.v1.cni.cncf.io/networks": networks}},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			AutomountServiceAccountToken:  new(bool),
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name:            "podnet",
				Image:           p.image,
				ImagePullPolicy: corev1.PullIfNotPresent,
			}},
		},
	}
	if _, err := p.kube.CoreV1().Pods(podsNamespace).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s: %v", name, err)
	}
}

func (p *podsTest) deletePod(t *testing.T, name string) {
	t.Helper()
	if err := p.kube.CoreV1().Pods(podsNamespace).Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("deleting pod %s: %v", name, err)
	}
}

func (p *podsTest) awaitRunning(t *testing.T, name string, timeout time.Duration) {
	t.Helper()
	poll.Until(t, timeout, "pod "+name+" to run", func(ctx context.Context) error {
		pod, err := p.kube.CoreV1().Pods(podsNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("%s: %v", pod.Status.Phase, pod.Status.Conditions)
	})
}

// kosAddress returns the pod's address on its KOS interface, as Multus
// reports it in the pod's network-status annotation.
func (p *podsTest) kosAddress(t *testing.T, pod string) netip.Addr {
	t.Helper()
	got, err := p.kube.CoreV1().Pods(podsNamespace).Get(t.Context(), pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var statuses []struct {
		Name      string   `json:"name"`
		Interface string   `json:"interface"`
		IPs       []string `json:"ips"`
	}
	raw := got.Annotations["k8s.v1.cni.cncf.io/network-status"]
	if err := json.Unmarshal([]byte(raw), &statuses); err != nil {
		t.Fatalf("pod %s's network-status %q: %v", pod, raw, err)
	}
	for _, s := range statuses {
		if s.Interface == podsIfName && len(s.IPs) > 0 {
			a, err := netip.ParseAddr(s.IPs[0])
			if err != nil {
				t.Fatal(err)
			}
			if !netip.MustParsePrefix(podsCIDR).Contains(a) {
				t.Fatalf("pod %s's %s has %s, outside %s", pod, podsIfName, a, podsCIDR)
			}
			return a
		}
	}
	t.Fatalf("pod %s's network-status names no %s with an address: %s", pod, podsIfName, raw)
	return netip.Addr{}
}

// attachmentsOf returns the NetworkAttachments that stand for the pod's
// interfaces.
func (p *podsTest) attachmentsOf(t *testing.T, pod string) []networkv1alpha1.NetworkAttachment {
	t.Helper()
	got, err := p.kube.CoreV1().Pods(podsNamespace).Get(t.Context(), pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p.attachmentsOfUID(t, string(got.UID))
}

func (p *podsTest) attachmentsOfUID(t *testing.T, uid string) []networkv1alpha1.NetworkAttachment {
	t.Helper()
	list, err := p.network.NetworkV1alpha1().NetworkAttachments(podsNamespace).List(t.Context(), metav1.ListOptions{LabelSelector: v1alpha1.PodUIDLabel + "=" + uid})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// awaitNoAttachmentsUID waits until no attachment is labelled with the pod's
// UID.
func (p *podsTest) awaitNoAttachmentsUID(t *testing.T, pod, uid string, timeout time.Duration) {
	t.Helper()
	poll.Until(t, timeout, "no attachment of pod "+pod+" to be left", func(ctx context.Context) error {
		list, err := p.network.NetworkV1alpha1().NetworkAttachments(podsNamespace).List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.PodUIDLabel + "=" + uid})
		if err != nil {
			return err
		}
		if len(list.Items) > 0 {
			return fmt.Errorf("attachment %s is left", list.Items[0].Name)
		}
		return nil
	})
}

// awaitNoAttachments waits until no attachment names the deleted pod.
func (p *podsTest) awaitNoAttachments(t *testing.T, pod string, timeout time.Duration) {
	t.Helper()
	poll.Until(t, timeout, "no attachment of pod "+pod+" to be left", func(ctx context.Context) error {
		list, err := p.network.NetworkV1alpha1().NetworkAttachments(podsNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, a := range list.Items {
			for _, o := range a.OwnerReferences {
				if o.Kind == "Pod" && o.Name == pod {
					return fmt.Errorf("attachment %s is left", a.Name)
				}
			}
		}
		return nil
	})
}

// exec runs a command in the pod and returns its output.
func (p *podsTest) exec(t *testing.T, pod string, command ...string) string {
	t.Helper()
	out, err := p.execErr(t.Context(), pod, command...)
	if err != nil {
		t.Fatalf("in pod %s: %v\n%s", pod, err, out)
	}
	return out
}

// execErr runs a command in the pod with kubectl exec, as a user does.
func (p *podsTest) execErr(ctx context.Context, pod string, command ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	args := append([]string{"--kubeconfig", p.env.Kubeconfig, "-n", podsNamespace, "exec", pod, "--"}, command...)
	cmd := exec.CommandContext(ctx, "kubectl", args...)
	// Standard output alone: kubectl writes its own complaints (such as
	// a websocket's "Unknown stream id") to standard error.
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("kubectl exec %s -- %s: %w (stderr: %s)", pod, strings.Join(command, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}
