package nodecleanup_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/cni"
	"github.com/kos-sdn/kos/components/fabric"
	"github.com/kos-sdn/kos/components/fabric/ovs"
	"github.com/kos-sdn/kos/components/fabric/tunnelfilter"
	"github.com/kos-sdn/kos/components/nodecleanup"
	"github.com/kos-sdn/kos/tools/ovsenv"
	"github.com/kos-sdn/kos/tools/poll"
	"github.com/kos-sdn/kos/tools/spawner"
	"github.com/kos-sdn/kos/tools/testenv"
)

// TestMain stops the control plane's builds a test program made
// (testenv.Build).
func TestMain(m *testing.M) { testenv.Main(m) }

// testMTU is the MTU of the attachments' interfaces the tests make.
const testMTU = 1500 - fabric.VXLANOverhead

func local(vni uint32, ip string) fabric.LocalAttachment {
	return fabric.LocalAttachment{VNI: vni, IP: netip.MustParseAddr(ip)}
}

func remote(vni uint32, ip, host string) fabric.RemoteAttachment {
	return fabric.RemoteAttachment{VNI: vni, IP: netip.MustParseAddr(ip), HostIP: netip.MustParseAddr(host)}
}

// cleanupNode is a simulated node for kos-agent cleanup: a network
// namespace with an underlay interface ul0 joined to a peer's, and a
// folder that stands for its root file system.
type cleanupNode struct {
	ns, peer *ovsenv.Netns
	root     string
	addr     netip.Addr
}

func newCleanupNode(t *testing.T, subnet byte) *cleanupNode {
	t.Helper()
	ctx := t.Context()
	n := &cleanupNode{ns: ovsenv.NetnsT(t), peer: ovsenv.NetnsT(t), root: t.TempDir(),
		addr: netip.AddrFrom4([4]byte{192, 168, subnet, 2})}
	if err := ovsenv.AddVethPair(ctx, n.ns, "ul0", n.peer, "ul0"); err != nil {
		t.Fatal(err)
	}
	peerIP := fmt.Sprintf("192.168.%d.1", subnet)
	for _, c := range []struct {
		ns  *ovsenv.Netns
		cmd []string
	}{
		{n.peer, []string{"ip", "addr", "add", peerIP + "/24", "dev", "ul0"}},
		{n.peer, []string{"ip", "link", "set", "ul0", "up"}},
		{n.ns, []string{"ip", "addr", "add", n.addr.String() + "/24", "dev", "ul0"}},
		{n.ns, []string{"ip", "link", "set", "ul0", "up"}},
		{n.ns, []string{"ip", "link", "set", "lo", "up"}},
		{n.ns, []string{"ip", "route", "add", "default", "via", peerIP}},
		{n.ns, []string{"ip", "route", "add", "10.98.0.0/16", "via", peerIP, "metric", "5"}},
	} {
		if _, err := c.ns.Run(ctx, c.cmd[0], c.cmd[1:]...); err != nil {
			t.Fatal(err)
		}
	}
	poll.Until(t, 30*time.Second, "ul0 is up", func(ctx context.Context) error {
		if out, err := n.ns.Run(ctx, "ip", "-br", "link", "show", "ul0"); err != nil || !strings.Contains(out, " UP ") {
			return fmt.Errorf("ul0: %q %v", out, err)
		}
		return nil
	})
	// What is not KOS's and must stay: Multus's plugin and configuration,
	// and the folders every node has.
	writeNodeFiles(t, n.root, map[string]string{
		"opt/cni/bin/multus":           "multus",
		"etc/cni/net.d/00-multus.conf": "{}",
		"var/lib/dpkg/status":          "",
		"var/run/utmp":                 "",
	})
	return n
}

func writeNodeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// nodeState is what the host looks like: its interfaces, addresses,
// routes, the underlay's arp_ignore and the files under its root (but
// skip, the node's own Open vSwitch, whose files are its own).
type nodeState struct {
	Links, Addrs, Routes []string
	ARPIgnore            string
	Files                []string
}

func (n *cleanupNode) state(t *testing.T, skip string) nodeState {
	t.Helper()
	ctx := t.Context()
	lines := func(args ...string) []string {
		out, err := n.ns.Run(ctx, "ip", args...)
		if err != nil {
			t.Fatal(err)
		}
		var ls []string
		for _, l := range strings.Split(out, "\n") {
			if l = strings.Join(strings.Fields(l), " "); l != "" {
				ls = append(ls, l)
			}
		}
		slices.Sort(ls)
		return ls
	}
	arp, err := n.ns.Run(ctx, "cat", "/proc/sys/net/ipv4/conf/ul0/arp_ignore")
	if err != nil {
		t.Fatal(err)
	}
	s := nodeState{
		Links:     lines("-br", "link"),
		Addrs:     lines("-4", "-br", "addr"),
		Routes:    lines("-4", "route", "show", "table", "all"),
		ARPIgnore: strings.TrimSpace(arp),
	}
	err = filepath.WalkDir(n.root, func(p string, d os.DirEntry, err error) error {
		if err != nil || p == n.root {
			return err
		}
		rel, _ := filepath.Rel(n.root, p)
		if rel == skip {
			return filepath.SkipDir
		}
		if d.IsDir() {
			rel += "/"
		}
		s.Files = append(s.Files, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// cleanupRun runs kos-agent cleanup in the node's namespace and returns its
// output and exit code.
func (n *cleanupNode) cleanup(t *testing.T, args ...string) (string, int) {
	t.Helper()
	args = append([]string{"netns", "exec", n.ns.Name, testenv.Build(t, "cmd/kos-agent"), "cleanup", "--host-root=" + n.root}, args...)
	out, err := exec.CommandContext(t.Context(), "ip", args...).CombinedOutput()
	t.Logf("kos-agent cleanup:\n%s", out)
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return string(out), exit.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(out), 0
}

// program makes the agent's work on the node's switch through the OVS
// fabric, as a running agent would: the bridge, its tunnel port, two
// attachments' internal ports, a remote attachment, and a pod's veth pair
// whose host end is plugged in. It returns the pod's namespace.
func program(t *testing.T, n *cleanupNode, runDir string) *ovsenv.Netns {
	t.Helper()
	ctx := t.Context()
	fab := ovs.New(ovs.Config{RunDir: runDir, DatapathType: "netdev", MTU: testMTU})
	if _, err := fab.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if err := fab.CreateLocal(ctx, local(301, "10.98.1.5"), local(301, "10.98.1.6")); err != nil {
		t.Fatal(err)
	}
	if err := fab.CreateRemote(ctx, remote(301, "10.98.1.7", "192.168.1.9")); err != nil {
		t.Fatal(err)
	}
	pod := ovsenv.NetnsT(t)
	plug := fabric.Plug{LocalAttachment: local(301, "10.98.1.8"), Owner: "container/net1"}
	host := plug.InterfaceName()
	for _, c := range [][]string{
		{"link", "add", host, "type", "veth", "peer", "name", "net1", "netns", pod.Name},
		{"link", "set", host, "up"},
	} {
		if _, err := n.ns.Run(ctx, "ip", c...); err != nil {
			t.Fatal(err)
		}
	}
	if err := fab.PlugLocal(ctx, plug); err != nil {
		t.Fatal(err)
	}
	return pod
}

// bridges lists the bridges of the Open vSwitch in runDir.
func bridges(t *testing.T, runDir string) []string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "ovs-vsctl", "list-br")
	cmd.Env = append(os.Environ(), "OVS_RUNDIR="+runDir)
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(out))
}

// TestIntegrationCleanup runs the 0.3.0 userspace release's work on a
// simulated node, with real Open vSwitch: kos-ovs moves the node's address
// onto br-ul, the agent's fabric programs bridge kos with a tunnel,
// attachments and a pod's veth, kos-cni and the CNI socket sit in the
// node's root. The node also has an Open vSwitch of its own with a bridge
// that is not KOS's, and Multus's files. kos-agent cleanup refuses while the
// CNI socket answers and while kos-ovs runs; once both are gone it leaves
// the node as it was before KOS came, the other Open vSwitch's bridge and
// Multus's files there; a second run changes nothing.
func TestIntegrationCleanup(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	n := newCleanupNode(t, 78)
	// The node's own Open vSwitch, in a namespace of its own (two
	// userspace switches in one namespace would share a datapath
	// device), with a bridge that is none of KOS's.
	own := ovsenv.StartT(t, ovsenv.Options{Dir: filepath.Join(n.root, "srv/ovs")})
	if _, err := own.Run(ctx, "ovs-vsctl", "add-br", "br-other", "--", "set", "bridge", "br-other", "datapath_type=netdev"); err != nil {
		t.Fatal(err)
	}
	ownFlag := "--host-ovs-run-dir=/srv/ovs/run"
	before := n.state(t, "srv")

	// kos-ovs, as the ovs container of the userspace release runs it.
	runDir := filepath.Join(n.root, "var/run/kos/openvswitch")
	kosOVS, err := spawner.Run(spawner.Options{
		Name:   "kos-ovs",
		Dir:    t.TempDir(),
		Binary: "ip",
		Args: []string{"netns", "exec", n.ns.Name, testenv.Build(t, "cmd/kos-ovs"),
			"--run-dir=" + runDir, "--db-dir=" + filepath.Join(n.root, "var/lib/kos/openvswitch"),
			"--datapath-type=netdev", "--underlay-address=" + n.addr.String(),
			"--underlay-check-period=200ms", "--health-bind-address=127.0.0.1:0"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := kosOVS.Stop(30 * time.Second); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("log of kos-ovs:\n%s", kosOVS.LogTail(40))
		}
	})
	poll.Until(t, time.Minute, "br-ul holds the node's address", func(ctx context.Context) error {
		out, err := n.ns.Run(ctx, "ip", "-4", "-br", "addr", "show", "br-ul")
		if err != nil || !strings.Contains(out, n.addr.String()+"/") {
			return fmt.Errorf("br-ul does not hold %s yet: %q %v", n.addr, out, err)
		}
		return nil
	})
	pod := program(t, n, runDir)
	// The tunnel filters: the kernel datapath's nftables table, and the
	// userspace datapath's flows on br-ul.
	netns := filepath.Join("/run/netns", n.ns.Name)
	peers := []netip.Addr{netip.MustParseAddr("192.168.1.9")}
	if err := tunnelfilter.New(tunnelfilter.Config{Interface: "ul0", NetNS: netns}).Set(ctx, fabric.DefaultTunnelPort, peers); err != nil {
		t.Fatal(err)
	}
	underlayFilter, err := ovs.NewUnderlayFilter(ovs.UnderlayFilterConfig{Address: n.addr, RunDir: runDir})
	if err != nil {
		t.Fatal(err)
	}
	if err := underlayFilter.Set(ctx, fabric.DefaultTunnelPort, peers); err != nil {
		t.Fatal(err)
	}
	tableExists := func() bool {
		t.Helper()
		exists, err := tunnelfilter.Exists(netns)
		if err != nil {
			t.Fatal(err)
		}
		return exists
	}
	if err := cni.Install(testenv.Build(t, "cmd/kos-agent"), filepath.Join(n.root, "opt/cni/bin/kos")); err != nil {
		t.Fatal(err)
	}
	// The agent's CNI socket, served.
	sock := filepath.Join(n.root, "var/run/kos/cni.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	programmed := n.state(t, "srv")

	out, code := n.cleanup(t, ownFlag)
	if code != nodecleanup.ExitServing || !strings.Contains(out, "var/run/kos/cni.sock answers") || !strings.Contains(out, "--force") {
		t.Errorf("cleanup while the agent serves: exit code %d, output %q; want %d, the socket and what to do", code, out, nodecleanup.ExitServing)
	}
	// As a killed agent leaves it: the socket file, with nobody serving.
	l.SetUnlinkOnClose(false)
	l.Close()
	if out, code := n.cleanup(t, ownFlag); code != nodecleanup.ExitServing || !strings.Contains(out, "kos-ovs's Open vSwitch answers") {
		t.Errorf("cleanup while kos-ovs runs: exit code %d, output %q; want %d and kos-ovs", code, out, nodecleanup.ExitServing)
	}
	if diff := cmp.Diff(programmed, n.state(t, "srv")); diff != "" {
		t.Errorf("a refused cleanup changed the node (-before +after):\n%s", diff)
	}
	if !tableExists() {
		t.Errorf("a refused cleanup deleted the tunnel filter's table")
	}

	// The pod goes, as kubelet stops it: kos-ovs gives the address back.
	if err := kosOVS.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	out, code = n.cleanup(t, ownFlag)
	if code != 0 {
		t.Fatalf("cleanup: exit code %d", code)
	}
	for _, want := range []string{
		"Underlay addresses 192.168.78.2/24 and their routes back on ul0, as /var/lib/kos/openvswitch/kos-underlay.json recorded",
		"Deleted bridge kos with its ports from kos-ovs's Open vSwitch (/var/lib/kos/openvswitch)",
		"Deleted bridge br-ul",
		"Deleted nftables table ip kos-tunnel, the tunnel filter",
		"Deleted the veth pair of interface " + v1alpha1.InterfaceName(local(301, "10.98.1.8").MAC()),
		"Removed /opt/cni/bin/kos\n",
		"Removed /var/run/kos/cni.sock",
		"Removed /var/lib/kos (empty)",
		"Removed /var/run/kos (empty)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("cleanup's output does not say %q", want)
		}
	}
	if diff := cmp.Diff(before, n.state(t, "srv")); diff != "" {
		t.Errorf("the node after cleanup differs from before KOS (-before +after):\n%s", diff)
	}
	if tableExists() {
		t.Errorf("the tunnel filter's table is left after cleanup")
	}
	if got, err := pod.Run(ctx, "ip", "-br", "link"); err != nil || strings.Contains(got, "net1") {
		t.Errorf("the pod's end of its veth pair is left: %q %v", got, err)
	}
	if got := bridges(t, own.RunDir); !slices.Equal(got, []string{"br-other"}) {
		t.Errorf("the node's own Open vSwitch has bridges %q, want br-other alone", got)
	}
	if got, err := own.Netns.Run(ctx, "ip", "-br", "link", "show", "br-other"); err != nil || got == "" {
		t.Errorf("br-other's device is gone: %v", err)
	}

	out, code = n.cleanup(t, ownFlag)
	if code != 0 || !strings.Contains(out, "Nothing to clean up") || strings.Count(strings.TrimSpace(out), "\n") != 0 {
		t.Errorf("second cleanup: exit code %d, output %q; want 0 and nothing to clean up", code, out)
	}
}

// TestIntegrationCleanupNodeOVS cleans up after an agent that programmed
// the node's own Open vSwitch (adopted, as after an upgrade from 0.1.0):
// bridge kos goes from it, its other bridge and the Open vSwitch stay.
func TestIntegrationCleanupNodeOVS(t *testing.T) {
	n := newCleanupNode(t, 79)
	own := ovsenv.StartT(t, ovsenv.Options{Dir: filepath.Join(n.root, "srv/ovs"), Netns: n.ns.Name})
	if _, err := own.Run(t.Context(), "ovs-vsctl", "add-br", "br-other", "--", "set", "bridge", "br-other", "datapath_type=netdev"); err != nil {
		t.Fatal(err)
	}
	// The node's own underlay bridge, as a userspace node of 0.1.0 had
	// it, which stays: only the tunnel filter's flows go.
	if _, err := own.Run(t.Context(), "ovs-vsctl", "add-br", "br-ul", "--", "set", "bridge", "br-ul", "datapath_type=netdev"); err != nil {
		t.Fatal(err)
	}
	before := n.state(t, "srv")
	flowsBefore, err := own.Run(t.Context(), "ovs-ofctl", "dump-flows", "--no-stats", "br-ul")
	if err != nil {
		t.Fatal(err)
	}
	program(t, n, own.RunDir)
	if err := os.MkdirAll(filepath.Join(n.root, "var/run/kos/openvswitch"), 0o755); err != nil {
		t.Fatal(err) // the pod's hostPath volume, unused
	}
	underlayFilter, err := ovs.NewUnderlayFilter(ovs.UnderlayFilterConfig{Address: n.addr, RunDir: own.RunDir})
	if err != nil {
		t.Fatal(err)
	}
	if err := underlayFilter.Set(t.Context(), fabric.DefaultTunnelPort, []netip.Addr{netip.MustParseAddr("192.168.1.9")}); err != nil {
		t.Fatal(err)
	}

	out, code := n.cleanup(t, "--host-ovs-run-dir=/srv/ovs/run")
	if code != 0 || !strings.Contains(out, "Deleted bridge kos with its ports from the node's own Open vSwitch (/srv/ovs/run)") ||
		!strings.Contains(out, "Deleted the tunnel filter's flows from bridge br-ul of the node's own Open vSwitch (/srv/ovs/run)") {
		t.Errorf("cleanup: exit code %d, output %q; want 0, bridge kos and the filter's flows deleted", code, out)
	}
	if flows, err := own.Run(t.Context(), "ovs-ofctl", "dump-flows", "--no-stats", "br-ul"); err != nil || flows != flowsBefore {
		t.Errorf("br-ul's flows after cleanup:\n%s\nwant as before KOS:\n%s (%v)", flows, flowsBefore, err)
	}
	if diff := cmp.Diff(before, n.state(t, "srv")); diff != "" {
		t.Errorf("the node after cleanup differs from before KOS (-before +after):\n%s", diff)
	}
	if got := bridges(t, own.RunDir); !slices.Equal(got, []string{"br-other", "br-ul"}) {
		t.Errorf("the node's own Open vSwitch has bridges %q, want br-other and br-ul alone", got)
	}
	if out, code := n.cleanup(t, "--host-ovs-run-dir=/srv/ovs/run"); code != 0 || !strings.Contains(out, "Nothing to clean up") {
		t.Errorf("second cleanup: exit code %d, output %q; want 0 and nothing to clean up", code, out)
	}
}
