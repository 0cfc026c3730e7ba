package ovsenv

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kos-sdn/kos/tools/spawner"
)

// addBridge creates a userspace-datapath bridge, the only kind that works
// without the kernel module.
func addBridge(t *testing.T, i *Instance, name string) {
	t.Helper()
	if _, err := i.Run(t.Context(), "ovs-vsctl", "--timeout=20", "add-br", name, "--", "set", "bridge", name, "datapath_type=netdev"); err != nil {
		t.Fatal(err)
	}
}

func TestIntegrationStartStop(t *testing.T) {
	i, err := Start(t.Context(), Options{})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = i.Stop() })
	addBridge(t, i, "br0")
	got, err := i.Run(t.Context(), "ovs-vsctl", "list-br")
	if err != nil {
		t.Fatal(err)
	}
	if got != "br0" {
		t.Errorf("list-br = %q, want %q", got, "br0")
	}
	// The bridge's interface lives in the instance's namespace, not ours.
	if _, err := i.Netns.Run(t.Context(), "ip", "link", "show", "br0"); err != nil {
		t.Errorf("bridge interface not in the instance's namespace: %v", err)
	}
	pids := map[string]int{}
	for _, name := range []string{dbServer, vswitchd} {
		pid, err := readPID(filepath.Join(i.RunDir, name+".pid"))
		if err != nil {
			t.Fatal(err)
		}
		pids[name] = pid
	}

	if err := i.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	for name, pid := range pids {
		if spawner.Alive(pid, "") {
			t.Errorf("%s (pid %d) still runs after Stop", name, pid)
		}
	}
	if _, err := os.Stat(i.Dir); !os.IsNotExist(err) {
		t.Errorf("instance folder %s still exists after Stop (stat: %v)", i.Dir, err)
	}
	if _, err := os.Stat(filepath.Join(netnsDir, i.Netns.Name)); !os.IsNotExist(err) {
		t.Errorf("namespace %s still exists after Stop (stat: %v)", i.Netns.Name, err)
	}
	if err := i.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

// TestIntegrationSeveralInstances runs instances side by side, each with a
// bridge of the same name, as simulated nodes do.
func TestIntegrationSeveralInstances(t *testing.T) {
	const n = 3
	insts := make([]*Instance, n)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for k := range n {
		wg.Go(func() {
			var err error
			insts[k], err = Start(t.Context(), Options{})
			errs[k] = err
		})
	}
	wg.Wait()
	for k := range n {
		if insts[k] != nil {
			t.Cleanup(func() { _ = insts[k].Stop() })
		}
		if errs[k] != nil {
			t.Fatalf("Start %d: %v", k, errs[k])
		}
	}
	for k, i := range insts {
		addBridge(t, i, "kos")
		if _, err := i.Run(t.Context(), "ovs-vsctl", "set", "bridge", "kos", "external_ids:which="+string(rune('a'+k))); err != nil {
			t.Fatal(err)
		}
	}
	for k, i := range insts {
		got, err := i.Run(t.Context(), "ovs-vsctl", "get", "bridge", "kos", "external_ids:which")
		if err != nil {
			t.Fatal(err)
		}
		if want := string(rune('a' + k)); got != want {
			t.Errorf("instance %d sees external_ids:which=%s, want %s", k, got, want)
		}
	}
}

func TestIntegrationRestartVSwitchd(t *testing.T) {
	i := StartT(t, Options{})
	addBridge(t, i, "br0")
	if _, err := i.Run(t.Context(), "ovs-ofctl", "add-flow", "br0", "cookie=0x1,priority=5,actions=drop"); err != nil {
		t.Fatal(err)
	}
	if got := dumpFlows(t, i, "br0"); !strings.Contains(got, "cookie=0x1") {
		t.Fatalf("flow missing before the restart: %s", got)
	}
	oldPID, err := readPID(filepath.Join(i.RunDir, vswitchd+".pid"))
	if err != nil {
		t.Fatal(err)
	}

	if err := i.RestartVSwitchd(t.Context()); err != nil {
		t.Fatalf("RestartVSwitchd: %v", err)
	}
	newPID, err := readPID(filepath.Join(i.RunDir, vswitchd+".pid"))
	if err != nil {
		t.Fatal(err)
	}
	if newPID == oldPID || spawner.Alive(oldPID, "") {
		t.Errorf("ovs-vswitchd pid %d -> %d (old alive: %t), want a new process", oldPID, newPID, spawner.Alive(oldPID, ""))
	}
	if got := dumpFlows(t, i, "br0"); strings.Contains(got, "cookie=0x1") {
		t.Errorf("flow survived the restart: %s", got)
	}
	if got, err := i.Run(t.Context(), "ovs-vsctl", "list-br"); err != nil || got != "br0" {
		t.Errorf("list-br after the restart = %q, %v; want br0", got, err)
	}
}

func dumpFlows(t *testing.T, i *Instance, bridge string) string {
	t.Helper()
	out, err := i.Run(t.Context(), "ovs-ofctl", "dump-flows", bridge)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestIntegrationAttach(t *testing.T) {
	i, err := Start(t.Context(), Options{Detach: true})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = i.Stop() })
	if !strings.HasPrefix(i.Netns.Name, "ovsenv-d") {
		t.Errorf("detached namespace %s would be swept as soon as this process ends", i.Netns.Name)
	}
	attached, err := Attach(i.Dir)
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	if attached.db == nil || attached.vswitch == nil {
		t.Fatalf("Attach found ovsdb-server %v and ovs-vswitchd %v, want both", attached.db, attached.vswitch)
	}
	addBridge(t, attached, "br0")
	if err := attached.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	for _, d := range []*spawner.Process{i.db, i.vswitch} {
		if !d.WaitGone(5 * time.Second) {
			t.Errorf("%s still runs after Stop of the attached instance", d.Name)
		}
	}
	if _, err := os.Stat(i.Dir); !os.IsNotExist(err) {
		t.Errorf("instance folder %s still exists after Stop (stat: %v)", i.Dir, err)
	}
}

// TestIntegrationVethPing joins two namespaces by a veth pair and pings
// across it.
func TestIntegrationVethPing(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	a, b := NetnsT(t), NetnsT(t)
	if err := AddVethPair(ctx, a, "veth-a", b, "veth-b"); err != nil {
		t.Fatal(err)
	}
	for _, side := range []struct {
		ns   *Netns
		ifc  string
		addr string
	}{{a, "veth-a", "192.168.77.1/24"}, {b, "veth-b", "192.168.77.2/24"}} {
		if _, err := side.ns.Run(ctx, "ip", "addr", "add", side.addr, "dev", side.ifc); err != nil {
			t.Fatal(err)
		}
		if _, err := side.ns.Run(ctx, "ip", "link", "set", side.ifc, "up"); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		dst  string
		want int
	}{
		{"192.168.77.2", 3},
		{"192.168.77.9", 0},
	}
	for _, tt := range tests {
		got, err := a.Ping(ctx, netip.MustParseAddr(tt.dst), 3, time.Second)
		if err != nil {
			t.Fatalf("Ping %s: %v", tt.dst, err)
		}
		if got != tt.want {
			t.Errorf("Ping %s: %d of 3 replies, want %d", tt.dst, got, tt.want)
		}
	}
}
