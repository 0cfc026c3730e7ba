package cluster

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// A node's kubelet puts every pod under a cgroup of its own (its
// cgroupRoot), so that two nodes on one host never share kubepods, and so
// that Stop finds every container process of the node, whatever became of
// the shim that started it.

// cgroupHierarchies returns the folders where cgroup hierarchies are
// mounted: every v1 hierarchy and the v2 one. In a hybrid layout kubelet
// works with the v1 hierarchies, but runc also puts each container in the v2
// one.
func cgroupHierarchies() ([]string, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("reading the mount table: %w", err)
	}
	var hierarchies []string
	for line := range strings.SplitSeq(string(data), "\n") {
		// The fields after " - " are the file system type and source.
		before, after, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		fields, fsFields := strings.Fields(before), strings.Fields(after)
		if len(fields) < 5 || len(fsFields) < 1 {
			continue
		}
		if fsFields[0] == "cgroup" || fsFields[0] == "cgroup2" {
			hierarchies = append(hierarchies, unescapeMountPath(fields[4]))
		}
	}
	return hierarchies, nil
}

// createCgroup creates the cgroup at path (such as /kos-1a2b3c4d) in every
// hierarchy. A new v1 cpuset cgroup has no CPUs or memory nodes, and no
// process can join it until it gets its parent's.
func createCgroup(path string) error {
	hierarchies, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	if len(hierarchies) == 0 {
		return errors.New("no cgroup hierarchy is mounted")
	}
	for _, h := range hierarchies {
		dir := filepath.Join(h, path)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("creating cgroup %s: %w", dir, err)
		}
		for _, file := range []string{"cpuset.cpus", "cpuset.mems"} {
			parent, err := os.ReadFile(filepath.Join(filepath.Dir(dir), file))
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return fmt.Errorf("reading %s of the parent of cgroup %s: %w", file, dir, err)
			}
			if err := os.WriteFile(filepath.Join(dir, file), parent, 0o644); err != nil {
				return fmt.Errorf("setting %s of cgroup %s: %w", file, dir, err)
			}
		}
	}
	return nil
}

// removeCgroup kills every process in the cgroup at path and below, in every
// hierarchy, and removes the cgroups, innermost first. A missing cgroup is
// not an error.
func removeCgroup(path string) error {
	if path == "" || path == "/" {
		return fmt.Errorf("refusing to remove cgroup %q", path)
	}
	hierarchies, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	if err := killCgroup(hierarchies, path); err != nil {
		return err
	}
	var errs []error
	for _, h := range hierarchies {
		dirs := cgroupDirs(filepath.Join(h, path))
		// Children before parents.
		slices.SortFunc(dirs, func(a, b string) int { return len(b) - len(a) })
		for _, dir := range dirs {
			// A cgroup whose last process just died can stay busy for
			// a moment.
			var err error
			for range 50 {
				if err = syscall.Rmdir(dir); err == nil || errors.Is(err, syscall.ENOENT) {
					err = nil
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("removing cgroup %s: %w", dir, err))
			}
		}
	}
	return errors.Join(errs...)
}

// killCgroup sends SIGKILL to the processes in the cgroup at path and below,
// again and again until none is left, since a process may fork while the
// others die.
func killCgroup(hierarchies []string, path string) error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		pids := cgroupPIDs(hierarchies, path)
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v of cgroup %s survive SIGKILL", pids, path)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cgroupPIDs lists the live processes in the cgroup at path and below.
func cgroupPIDs(hierarchies []string, path string) []int {
	seen := map[int]bool{}
	var pids []int
	for _, h := range hierarchies {
		for _, dir := range cgroupDirs(filepath.Join(h, path)) {
			data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
			if err != nil {
				continue
			}
			for field := range strings.FieldsSeq(string(data)) {
				pid, err := strconv.Atoi(field)
				if err != nil || seen[pid] || zombie(pid) {
					continue
				}
				seen[pid] = true
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// zombie reports whether pid has exited and awaits its parent's wait.
func zombie(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(stat), ')')
	return i < 0 || len(stat) < i+3 || stat[i+2] == 'Z' || stat[i+2] == 'X'
}

// cgroupDirs lists the cgroup folder root and every cgroup below it.
func cgroupDirs(root string) []string {
	var dirs []string
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	return dirs
}
