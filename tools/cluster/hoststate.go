package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// A node changes things that belong to the whole host: kubelet rewrites a few
// kernel settings, and kubelet, containerd and its shims create folders at
// fixed paths whatever their configuration says. Several nodes may run at
// once (tests in parallel, a local environment next to them), so the first
// node to start records what the host was like, and the last one to stop
// puts it back. The record lives in HostStateFile, changed only under an
// exclusive lock of hostLockFile, and both files are gone when no node runs.
//
// The record also lists every running node with what it takes to clean up
// after it, so that a node whose owner died without stopping it (a killed
// test) is swept by the next node that starts.
//
// Both are in /tmp, not os.TempDir(): the cluster lane gives its tests a
// $TMPDIR of their own (tools/lanes.sh), and a local environment started
// beside them must still see their nodes.
var (
	hostLockFile = filepath.Join("/tmp", "kos-testenv-host.lock")
	// HostStateFile is the record of the host and its running nodes.
	HostStateFile = filepath.Join("/tmp", "kos-testenv-host.json")
)

// hostSysctls are the kernel settings kubelet changes when they differ from
// what it wants (see setupKernelTunables in kubelet's container manager).
var hostSysctls = []string{
	"kernel.panic",
	"kernel.panic_on_oops",
	"kernel.keys.root_maxbytes",
	"kernel.keys.root_maxkeys",
	"vm.overcommit_memory",
	"vm.panic_on_oom",
}

// hostPaths are the host paths a node may create: the mount points of
// NodePaths, which a node creates empty where the host lacks them, and the
// lock of iptables, which kube-proxy takes.
var hostPaths = append(slices.Clone(NodePaths), "/run/xtables.lock")

// hostState is the content of HostStateFile.
type hostState struct {
	// Sysctls are the values of hostSysctls before the first node started.
	Sysctls map[string]string `json:"sysctls"`
	// Created are the hostPaths that did not exist then.
	Created []string `json:"created"`
	// Nodes are the nodes running now.
	Nodes []*nodeState `json:"nodes"`
}

// hostLock is the exclusive lock on the host state.
type hostLock struct {
	f *os.File
}

// lockHost takes the exclusive lock on the host state, waiting for it.
func lockHost() (*hostLock, error) {
	for {
		f, err := os.OpenFile(hostLockFile, os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			return nil, fmt.Errorf("opening the host lock: %w", err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
			f.Close()
			return nil, fmt.Errorf("taking the host lock: %w", err)
		}
		// The last node out removes the lock file: a lock taken on a file
		// that was removed meanwhile guards nothing, so try again.
		var held, named unix.Stat_t
		if unix.Fstat(int(f.Fd()), &held) == nil && unix.Stat(hostLockFile, &named) == nil &&
			held.Ino == named.Ino && held.Dev == named.Dev {
			return &hostLock{f: f}, nil
		}
		f.Close()
	}
}

// unlock releases the lock; with remove, it first removes the lock file,
// which only the last node out does.
func (l *hostLock) unlock(remove bool) {
	if remove {
		_ = os.Remove(hostLockFile)
	}
	// Closing releases the lock.
	_ = l.f.Close()
}

// readHostState reads the record; with no record it returns an empty one.
func readHostState() (*hostState, error) {
	data, err := os.ReadFile(HostStateFile)
	if errors.Is(err, os.ErrNotExist) {
		return &hostState{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the host state: %w", err)
	}
	var st hostState
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("parsing %s: %w", HostStateFile, err)
	}
	return &st, nil
}

// write saves the record, or removes it when no node runs.
func (st *hostState) write() error {
	if len(st.Nodes) == 0 {
		if err := os.Remove(HostStateFile); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("removing the host state: %w", err)
		}
		return nil
	}
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the host state: %w", err)
	}
	tmp := HostStateFile + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("writing the host state: %w", err)
	}
	if err := os.Rename(tmp, HostStateFile); err != nil {
		return fmt.Errorf("writing the host state: %w", err)
	}
	return nil
}

// snapshot records the host as it is now, before any node changes it.
func (st *hostState) snapshot() error {
	st.Sysctls = map[string]string{}
	for _, name := range hostSysctls {
		value, err := readSysctl(name)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		st.Sysctls[name] = value
	}
	st.Created = nil
	for _, p := range hostPaths {
		if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
			st.Created = append(st.Created, p)
		}
	}
	return nil
}

// restore puts the host back as snapshot found it: the kernel settings, and
// no trace of the paths that did not exist. Mounts under those paths are
// detached first.
func (st *hostState) restore() error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(st.Sysctls)) {
		if err := writeSysctl(name, st.Sysctls[name]); err != nil {
			errs = append(errs, err)
		}
	}
	for _, p := range st.Created {
		if err := unmountUnder(p); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, fmt.Errorf("removing %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// joinHost registers a node that is about to start, as build makes it
// knowing the other running nodes. The first node records the host's state;
// nodes whose owners died are swept first, and warn hears what could not be
// cleaned up after them.
func joinHost(build func(others []*nodeState) (*nodeState, error), warn func(error)) (*nodeState, error) {
	lock, err := lockHost()
	if err != nil {
		return nil, err
	}
	st, err := readHostState()
	if err != nil {
		lock.unlock(false)
		return nil, err
	}
	// With no node left, as when build fails on an idle host, no trace of
	// the record stays either.
	defer func() { lock.unlock(len(st.Nodes) == 0) }()
	if err := st.sweep(); err != nil {
		// What a dead node left behind is no reason not to start
		// another.
		warn(err)
	}
	if len(st.Nodes) == 0 {
		// Nobody runs: whatever the record said has been put back, and
		// the host as it is now is what to restore at the end.
		if err := st.snapshot(); err != nil {
			return nil, err
		}
	}
	n, err := build(st.Nodes)
	if err != nil {
		return nil, errors.Join(err, st.write())
	}
	st.Nodes = append(st.Nodes, n)
	return n, st.write()
}

// updateHost replaces the record of a node, such as when its owner changes.
func updateHost(n *nodeState) error {
	lock, err := lockHost()
	if err != nil {
		return err
	}
	defer lock.unlock(false)
	st, err := readHostState()
	if err != nil {
		return err
	}
	for i, other := range st.Nodes {
		if other.NodeDir == n.NodeDir {
			st.Nodes[i] = n
		}
	}
	return st.write()
}

// leaveHost unregisters a stopped node; the last node out restores the host.
func leaveHost(n *nodeState) error {
	lock, err := lockHost()
	if err != nil {
		return err
	}
	st, err := readHostState()
	if err != nil {
		lock.unlock(false)
		return err
	}
	st.Nodes = slices.DeleteFunc(st.Nodes, func(other *nodeState) bool { return other.NodeDir == n.NodeDir })
	err = errors.Join(dropBridges([]*nodeState{n}, st.Nodes), st.sweep())
	if len(st.Nodes) == 0 {
		err = errors.Join(err, st.restore())
	}
	err = errors.Join(err, st.write())
	lock.unlock(len(st.Nodes) == 0)
	return err
}

// sweep cleans up after the nodes whose owners are gone and drops them from
// the record; when none is left, it restores the host.
func (st *hostState) sweep() error {
	var errs []error
	var live, dead []*nodeState
	for _, n := range st.Nodes {
		if n.ownerAlive() {
			live = append(live, n)
			continue
		}
		dead = append(dead, n)
		errs = append(errs, n.cleanUp())
	}
	errs = append(errs, dropBridges(dead, live))
	st.Nodes = live
	if len(dead) > 0 && len(live) == 0 {
		errs = append(errs, st.restore())
	}
	return errors.Join(errs...)
}

// dropBridges deletes the underlay bridges of the nodes gone that none of
// the nodes live is on.
func dropBridges(gone, live []*nodeState) error {
	var errs []error
	for _, n := range gone {
		if n.Bridge != "" && !slices.ContainsFunc(live, func(o *nodeState) bool { return o.Bridge == n.Bridge }) {
			errs = append(errs, deleteLink(n.Bridge))
		}
	}
	return errors.Join(errs...)
}

// createHostPaths creates the paths the host lacks, as empty folders, and
// records the outermost folder it created for each, so that the last node
// out removes them.
func createHostPaths(paths []string) error {
	lock, err := lockHost()
	if err != nil {
		return err
	}
	defer lock.unlock(false)
	st, err := readHostState()
	if err != nil {
		return err
	}
	for _, p := range paths {
		outer := ""
		for q := p; q != "/" && q != "."; q = filepath.Dir(q) {
			if _, err := os.Lstat(q); !errors.Is(err, os.ErrNotExist) {
				break
			}
			outer = q
		}
		if outer == "" {
			continue
		}
		if err := os.MkdirAll(p, 0o755); err != nil {
			return fmt.Errorf("creating the mount point %s: %w", p, err)
		}
		if !slices.Contains(st.Created, outer) {
			st.Created = append(st.Created, outer)
		}
	}
	return st.write()
}

// readSysctl reads a kernel setting such as kernel.panic.
func readSysctl(name string) (string, error) {
	data, err := os.ReadFile(sysctlPath(name))
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", name, err)
	}
	return strings.TrimSpace(string(data)), nil
}

// writeSysctl sets a kernel setting, unless it already has that value.
func writeSysctl(name, value string) error {
	if now, err := readSysctl(name); err == nil && now == value {
		return nil
	}
	if err := os.WriteFile(sysctlPath(name), []byte(value+"\n"), 0o644); err != nil {
		return fmt.Errorf("restoring %s to %s: %w", name, value, err)
	}
	return nil
}

// sysctlDir is where the kernel settings are files.
var sysctlDir = "/proc/sys"

func sysctlPath(name string) string {
	return filepath.Join(sysctlDir, strings.ReplaceAll(name, ".", "/"))
}

// UnmountUnder detaches every mount at or below dir, deepest first: what
// a node left mounted in its folder (its mount namespace) when it was not
// stopped through its record, before the folder is removed.
func UnmountUnder(dir string) error { return unmountUnder(dir) }

// unmountUnder detaches every mount at or below dir, deepest first.
func unmountUnder(dir string) error {
	points, err := mountPointsUnder(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range points {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// mountPointsUnder lists the mount points at or below dir, deepest first.
// The mount table holds paths with symbolic links resolved, so dir is
// resolved too: a checkout whose .cache links elsewhere has its nodes'
// mounts under the link's target.
func mountPointsUnder(dir string) ([]string, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("reading the mount table: %w", err)
	}
	dir = filepath.Clean(dir)
	if resolved, err := filepath.EvalSymlinks(dir); err == nil {
		dir = resolved
	}
	var points []string
	for line := range strings.SplitSeq(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 5 {
			continue
		}
		p := unescapeMountPath(fields[4])
		if p == dir || strings.HasPrefix(p, dir+"/") {
			points = append(points, p)
		}
	}
	// Longer paths first: a mount inside another must go before it. A
	// path mounted twice appears twice, once per layer.
	slices.SortStableFunc(points, func(a, b string) int { return len(b) - len(a) })
	return points, nil
}

// unescapeMountPath undoes the octal escapes (\040 for a space) of
// /proc/self/mountinfo.
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			ok := true
			for _, c := range []byte(s[i+1 : i+4]) {
				if c < '0' || c > '7' {
					ok = false
					break
				}
				v = v*8 + (c - '0')
			}
			if ok {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// HostNodes returns how many nodes run on this host, of any cluster or
// program: the host's kernel settings and fixed paths are restored only
// when the last of them stops. It first cleans up after the nodes whose
// owners died, as a node's start does, so that a record a killed program
// left behind (or a machine restored from a snapshot) counts no node; what
// could not be cleaned up is its error, beside the count.
func HostNodes() (int, error) {
	l, err := lockHost()
	if err != nil {
		return 0, err
	}
	st, err := readHostState()
	if err != nil {
		l.unlock(false)
		return 0, err
	}
	swept := len(st.Nodes)
	sweepErr := st.sweep()
	if len(st.Nodes) < swept {
		err = st.write()
	}
	l.unlock(err == nil && len(st.Nodes) == 0)
	if err != nil {
		return 0, err
	}
	if sweepErr != nil {
		sweepErr = fmt.Errorf("cleaning up after %d nodes whose owners died: %w", swept-len(st.Nodes), sweepErr)
	}
	return len(st.Nodes), sweepErr
}
