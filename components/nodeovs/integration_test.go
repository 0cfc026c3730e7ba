package nodeovs

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kos-sdn/kos/tools/ovsenv"
	"github.com/kos-sdn/kos/tools/spawner"
	"github.com/kos-sdn/kos/tools/testenv"
)

// startKOSOVS starts kos-ovs in a node's namespace, as the ovs container of
// the agent's pod runs it, and stops it when the test ends.
func startKOSOVS(t *testing.T, ns *ovsenv.Netns, dir string, args ...string) *spawner.Process {
	t.Helper()
	args = append([]string{"netns", "exec", ns.Name, testenv.Build(t, "cmd/kos-ovs"),
		"--run-dir=" + filepath.Join(dir, "run"), "--db-dir=" + filepath.Join(dir, "db"),
		"--underlay-check-period=200ms"}, args...)
	p, err := spawner.Run(spawner.Options{
		Name:    "kos-ovs",
		Dir:     dir,
		Binary:  "ip",
		Args:    args,
		LogFile: filepath.Join(dir, fmt.Sprintf("kos-ovs-%d.log", time.Now().UnixNano())),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Stop(30 * time.Second); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			data, _ := os.ReadFile(p.LogFile)
			t.Logf("log of kos-ovs:\n%s", data)
		}
	})
	return p
}

// waitExit waits for kos-ovs to exit and returns how it did.
func waitExit(t *testing.T, p *spawner.Process, within time.Duration) error {
	t.Helper()
	if !p.WaitGone(within) {
		t.Fatalf("kos-ovs still runs after %s", within)
	}
	_, err := p.Exited()
	return err
}

// readyz asks kos-ovs's /readyz inside ns and returns nil on 200.
func readyz(ns *ovsenv.Netns) error {
	return ns.Do(func() error {
		conn, err := net.DialTimeout("tcp", DefaultHealthBindAddress, time.Second)
		if err != nil {
			return err
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := fmt.Fprint(conn, "GET /readyz HTTP/1.0\r\n\r\n"); err != nil {
			return err
		}
		status, err := bufio.NewReader(conn).ReadString('\n')
		if err != nil {
			return err
		}
		if !strings.Contains(status, " 200 ") {
			return fmt.Errorf("readyz: %s", strings.TrimSpace(status))
		}
		return nil
	})
}

// waitReady waits until kos-ovs answers /readyz.
func waitReady(t *testing.T, ns *ovsenv.Netns, p *spawner.Process) {
	t.Helper()
	if err := p.WaitReady(t.Context(), time.Minute, func(context.Context) error { return readyz(ns) }); err != nil {
		t.Fatal(err)
	}
}

// TestIntegrationUnderlay runs kos-ovs in a node's network namespace, joined
// to a peer's by a veth pair, with the userspace datapath: the node's
// address and routes move onto br-ul and the peer reaches the node through
// OVS; when ovs-vswitchd dies kos-ovs fails, leaving the address on its
// interface; started again, it moves the address back onto br-ul's new
// device; stopped, it exits cleanly and gives the address back.
func TestIntegrationUnderlay(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	node, peer := ovsenv.NetnsT(t), ovsenv.NetnsT(t)
	if err := ovsenv.AddVethPair(ctx, node, "ul0", peer, "ul0"); err != nil {
		t.Fatal(err)
	}
	nodeIP, peerIP := netip.MustParseAddr("192.168.77.2"), netip.MustParseAddr("192.168.77.1")
	for _, c := range []struct {
		ns  *ovsenv.Netns
		cmd []string
	}{
		{peer, []string{"ip", "addr", "add", peerIP.String() + "/24", "dev", "ul0"}},
		{peer, []string{"ip", "link", "set", "ul0", "up"}},
		{node, []string{"ip", "addr", "add", nodeIP.String() + "/24", "dev", "ul0"}},
		{node, []string{"ip", "link", "set", "ul0", "up"}},
		{node, []string{"ip", "route", "add", "default", "via", peerIP.String()}},
		{node, []string{"ip", "route", "add", "10.99.0.0/16", "via", peerIP.String(), "metric", "5"}},
	} {
		if _, err := c.ns.Run(ctx, c.cmd[0], c.cmd[1:]...); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	args := []string{"--datapath-type=netdev", "--underlay-address=" + nodeIP.String()}

	// on checks where the node's address and routes are, and the
	// interface's arp_ignore.
	on := func(t *testing.T, dev string, arpIgnore int) {
		t.Helper()
		addrs, err := node.Run(ctx, "ip", "-4", "-o", "addr", "show")
		if err != nil {
			t.Fatal(err)
		}
		if want := " " + dev + "    inet " + nodeIP.String() + "/24 "; !strings.Contains(addrs, want) {
			t.Errorf("the node's addresses:\n%s\nwant %s/24 on %s", addrs, nodeIP, dev)
		}
		if n := strings.Count(addrs, nodeIP.String()+"/"); n != 1 {
			t.Errorf("the node's addresses:\n%s\nwant %s once, got %d", addrs, nodeIP, n)
		}
		routes, err := node.Run(ctx, "ip", "-4", "route", "show")
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{
			"default via " + peerIP.String() + " dev " + dev + " ",
			"10.99.0.0/16 via " + peerIP.String() + " dev " + dev + " metric 5",
			"192.168.77.0/24 dev " + dev + " proto kernel",
		} {
			if !strings.Contains(routes+" ", want) {
				t.Errorf("the node's routes:\n%s\nwant %q", routes, want)
			}
		}
		got, err := node.Run(ctx, "cat", "/proc/sys/net/ipv4/conf/ul0/arp_ignore")
		if err != nil {
			t.Fatal(err)
		}
		if got != strconv.Itoa(arpIgnore) {
			t.Errorf("arp_ignore of ul0: %s, want %d", got, arpIgnore)
		}
	}
	reaches := func(t *testing.T) {
		t.Helper()
		if got, err := peer.Ping(ctx, nodeIP, 3, time.Second); err != nil || got == 0 {
			t.Errorf("ping from the peer to the node: %d of 3 replies (%v), want some", got, err)
		}
	}

	k := startKOSOVS(t, node, dir, args...)
	waitReady(t, node, k)
	on(t, "br-ul", 1)
	reaches(t)
	vsctl := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, "ovs-vsctl", args...)
		cmd.Env = append(os.Environ(), "OVS_RUNDIR="+filepath.Join(dir, "run"))
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("ovs-vsctl %s: %v", strings.Join(args, " "), err)
		}
		return strings.TrimSpace(string(out))
	}
	if got := vsctl("list-ports", "br-ul"); got != "ul0" {
		t.Errorf("ports of br-ul: %q, want ul0", got)
	}
	if got := vsctl("get", "Bridge", "br-ul", "datapath_type"); got != "netdev" {
		t.Errorf("datapath_type of br-ul: %s, want netdev", got)
	}
	if t.Failed() {
		t.FailNow()
	}

	// ovs-vswitchd dies: kos-ovs stops ovsdb-server, gives the address
	// back to ul0 and fails, for kubelet to restart it.
	pid, err := os.ReadFile(filepath.Join(dir, "run", "ovs-vswitchd.pid"))
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(pid)))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(n, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var exit *exec.ExitError
	if err := waitExit(t, k, 30*time.Second); !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Errorf("kos-ovs after ovs-vswitchd died: %v, want exit status 1", err)
	}
	on(t, "ul0", 0)

	// Started again (the database keeps br-ul and its port; the device is
	// new), it moves the address onto br-ul again.
	k = startKOSOVS(t, node, dir, args...)
	waitReady(t, node, k)
	on(t, "br-ul", 1)
	reaches(t)

	// Even when the bridge loses the address behind kos-ovs's back.
	if _, err := node.Run(ctx, "ip", "addr", "flush", "dev", "br-ul"); err != nil {
		t.Fatal(err)
	}
	waitReady(t, node, k)
	on(t, "br-ul", 1)

	if err := syscall.Kill(k.PID, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := waitExit(t, k, 30*time.Second); err != nil {
		t.Errorf("kos-ovs after SIGTERM: %v, want a clean exit", err)
	}
	on(t, "ul0", 0)
	reaches(t)
}

// TestIntegrationAdopt runs kos-ovs on a node whose own Open vSwitch runs
// (as on a node that kos-agent 0.1.0 used): given that one's run dir, kos-ovs
// starts no daemons and moves no address, is ready while that Open vSwitch
// answers, and fails once it stops, so that kubelet would restart it to run
// its own.
func TestIntegrationAdopt(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	host, err := ovsenv.Start(ctx, ovsenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = host.Stop()
		}
	})
	dir := t.TempDir()
	k := startKOSOVS(t, host.Netns, dir, "--host-run-dir="+host.RunDir,
		"--datapath-type=netdev", "--underlay-address=192.168.78.2")
	waitReady(t, host.Netns, k)
	if _, err := os.Stat(filepath.Join(dir, "run", "db.sock")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("kos-ovs started an ovsdb-server of its own beside the node's: %v", err)
	}
	if err := host.Stop(); err != nil {
		t.Fatal(err)
	}
	stopped = true
	if err := waitExit(t, k, 30*time.Second); err == nil {
		t.Error("kos-ovs exited cleanly when the adopted Open vSwitch stopped, want a failure so that kubelet restarts it")
	}
}
