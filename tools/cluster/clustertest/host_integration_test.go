package clustertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kos-sdn/kos/tools/cluster"
	"github.com/kos-sdn/kos/tools/poll"
)

// hostSysctls are the kernel settings kubelet changes.
var hostSysctls = []string{
	"kernel.panic", "kernel.panic_on_oops", "kernel.keys.root_maxbytes",
	"kernel.keys.root_maxkeys", "vm.overcommit_memory", "vm.panic_on_oom",
}

// hostPaths are host paths a kubelet or containerd might create when not
// told otherwise.
var hostPaths = []string{
	"/var/lib/kubelet", "/var/log/containers", "/var/log/pods", "/var/lib/cni",
	"/run/containerd", "/var/lib/containerd", "/opt/containerd", "/etc/cni",
	"/opt/cni", "/etc/kubernetes", "/run/kubernetes", "/etc/containerd", "/run/xtables.lock",
	// The paths private to each node, which the host may lack.
	"/var/lib/kos", "/var/run/kos", "/var/run/openvswitch", "/var/lib/kos-volumes",
}

// hostState is what the tests compare before and after a cluster.
type hostState struct {
	Sysctls map[string]string
	Paths   map[string]bool
	// Nodes counts the nodes running on the host, of any test or program.
	Nodes int
}

func snapshotHost(t testing.TB) hostState {
	t.Helper()
	st := hostState{Sysctls: map[string]string{}, Paths: map[string]bool{}}
	for _, name := range hostSysctls {
		data, err := os.ReadFile(filepath.Join("/proc/sys", strings.ReplaceAll(name, ".", "/")))
		if err != nil {
			t.Fatal(err)
		}
		st.Sysctls[name] = strings.TrimSpace(string(data))
	}
	for _, p := range hostPaths {
		_, err := os.Lstat(p)
		st.Paths[p] = err == nil
	}
	n, err := cluster.HostNodes()
	if err != nil {
		t.Fatal(err)
	}
	st.Nodes = n
	return st
}

// checkHostRestored fails unless the stopped cluster of dir left nothing
// behind: no process, mount, cgroup, namespace, interface, route or host
// path, and the kernel settings as they were before.
func checkHostRestored(t *testing.T, before hostState, dir string, node cluster.Node) {
	t.Helper()
	checkHostSettings(t, before, time.Minute)
	if pids := processesNaming(t, dir); len(pids) > 0 {
		t.Errorf("processes still name %s: %v", dir, pids)
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(mounts), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 5 {
			continue
		}
		p := fields[4]
		if strings.HasPrefix(p, dir+"/") || p == filepath.Join("/run/netns", node.Netns) ||
			slices.ContainsFunc(hostPaths, func(h string) bool { return p == h || strings.HasPrefix(p, h+"/") }) {
			t.Errorf("mount left behind: %s", line)
		}
	}
	hierarchies, err := filepath.Glob("/sys/fs/cgroup/*")
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hierarchies {
		if _, err := os.Stat(filepath.Join(h, node.CgroupRoot)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("cgroup %s left behind in %s (%v)", node.CgroupRoot, h, err)
		}
	}
	if _, err := os.Stat(filepath.Join("/run/netns", node.Netns)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("network namespace %s left behind (%v)", node.Netns, err)
	}
	addrs := run(t, "ip", "-4", "-o", "addr", "show")
	if strings.Contains(addrs, " "+node.HostIP.String()+"/") {
		t.Errorf("the host still has the node link's address %s:\n%s", node.HostIP, addrs)
	}
	if routes := run(t, "ip", "-4", "route", "show", node.PodCIDR.String()); routes != "" {
		t.Errorf("the host still routes the node's pods: %s", routes)
	}
	if data, err := os.ReadFile(cluster.HostStateFile); err == nil && bytes.Contains(data, []byte(dir)) {
		t.Errorf("the host state still lists the node of %s:\n%s", dir, data)
	}
}

// checkHostSettings fails unless the host's kernel settings and paths are
// as before, and no more nodes run than before. The cluster lane runs one
// package at a time and these tests one at a time, so any difference is
// this test's. The last node out restores the host as it stops, so a
// difference is waited out for wait before it fails the test.
//
// Nodes of another program (a demo left running, as make demo leaves its
// cluster, or a local environment) may run beside the test: they hold the
// host's settings, which the test's nodes join and must leave as they
// were. What the test cannot see then is the last node out restoring the
// host; TestHostState in tools/cluster shows that, and the check here does
// whenever the host is the test's alone.
func checkHostSettings(t testing.TB, before hostState, wait time.Duration) {
	t.Helper()
	if before.Nodes > 0 {
		t.Logf("%d nodes of another program ran on this host when the test began (make demo-down or go run ./tools/localenv down stops a demo's or a local environment's): the check is that the cluster left the host as they hold it", before.Nodes)
	}
	poll.Until(t, wait, "the host to be as it was before the cluster", func(context.Context) error {
		after := snapshotHost(t)
		if after.Nodes > before.Nodes {
			return fmt.Errorf("%d nodes still run on this host, %d when the test began", after.Nodes, before.Nodes)
		}
		if diff := cmp.Diff(before, after); diff != "" {
			return fmt.Errorf("host changed by the cluster (-before +after):\n%s", diff)
		}
		return nil
	})
}

// inode is the inode number of a file.
func inode(fi fs.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}

// processesNaming lists the live processes whose command line mentions dir.
func processesNaming(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cmdline, []byte(dir)) {
			continue
		}
		if stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err == nil {
			if i := bytes.LastIndexByte(stat, ')'); i > 0 && len(stat) > i+2 && stat[i+2] == 'Z' {
				continue
			}
		}
		out = append(out, fmt.Sprintf("%d %s", pid, bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '})))
	}
	return out
}

// memory sums the resident memory of the cluster's processes, by program,
// and the memory the node's pods use.
func memory(t *testing.T, env *cluster.Cluster) string {
	t.Helper()
	byName := map[string]int64{}
	var total int64
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil || e.Name() == strconv.Itoa(os.Getpid()) {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cmdline, []byte(env.Dir)) {
			continue
		}
		argv0, _, _ := bytes.Cut(cmdline, []byte{0})
		status, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		for line := range strings.SplitSeq(string(status), "\n") {
			if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
				byName[filepath.Base(string(argv0))] += kb
				total += kb
			}
		}
	}
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		parts = append(parts, fmt.Sprintf("%s %d MiB", name, byName[name]/1024))
	}
	pods := "unknown"
	if data, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/memory", env.Nodes[0].CgroupRoot, "memory.usage_in_bytes")); err == nil {
		b, _ := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
		pods = fmt.Sprintf("%d MiB", b>>20)
	}
	return fmt.Sprintf("processes %d MiB (%s); pods' cgroup %s", total/1024, strings.Join(parts, ", "), pods)
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}
