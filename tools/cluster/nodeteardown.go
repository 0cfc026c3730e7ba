package cluster

// This file removes every trace of a node from the host, also of a node
// whose owner died: its processes, mounts, cgroups and network.

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/kos-sdn/kos/tools/ovsenv"
)

// cleanUp removes every trace of the node from the host: its processes
// (kubelet, containerd, shims, containers and OVS daemons), its mounts and
// mount namespace, its cgroups, its network namespace and with it the veth
// pair, and the route to its pods (the bridge is the cluster's). It
// works from the recorded state alone, so that it also cleans up after a
// node whose owner died.
func (n *nodeState) cleanUp() error {
	var errs []error
	// Containers first, so that their shims have nothing left to restart
	// or report, then every process that names the node's folder:
	// kubelet, containerd and the shims (their -address is in it).
	if n.CgroupRoot != "" {
		if hierarchies, err := cgroupHierarchies(); err != nil {
			errs = append(errs, err)
		} else {
			errs = append(errs, killCgroup(hierarchies, n.CgroupRoot))
		}
	}
	errs = append(errs, killNaming(n.NodeDir))
	// With the mount namespace's file unmounted and its processes gone,
	// the namespace goes, with every mount in it.
	errs = append(errs, unmountUnder(n.NodeDir))
	if n.CgroupRoot != "" {
		errs = append(errs, removeCgroup(n.CgroupRoot))
	}
	// Deleting one end of the veth pair deletes the other. The route to
	// the pods goes with the link on a record of a node of its own link,
	// and with the bridge, which the last node of the cluster deletes, on
	// an underlay; removed now, the host routes no more to a node gone.
	if n.Bridge != "" && n.PodCIDR.IsValid() {
		_ = exec.Command("ip", "route", "delete", n.PodCIDR.String(), "via", n.nodeIP().String(), "dev", n.Bridge).Run()
	}
	errs = append(errs, deleteLink(n.HostLink))
	if n.Netns != "" {
		errs = append(errs, (&ovsenv.Netns{Name: n.Netns}).Delete())
	}
	return errors.Join(errs...)
}

// killNaming kills, with SIGTERM and then SIGKILL, every process whose
// command line mentions dir, other than this one.
func killNaming(dir string) error {
	if dir == "" || dir == "/" {
		return fmt.Errorf("refusing to kill the processes naming %q", dir)
	}
	find := func() []int {
		entries, err := os.ReadDir("/proc")
		if err != nil {
			return nil
		}
		var pids []int
		self := os.Getpid()
		needle := []byte(dir + "/")
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == self || zombie(pid) {
				continue
			}
			cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			if err == nil && bytes.Contains(append(bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}), '/'), needle) {
				pids = append(pids, pid)
			}
		}
		return pids
	}
	pids := find()
	if len(pids) == 0 {
		return nil
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
	deadline := time.Now().Add(stopGrace)
	for time.Now().Before(deadline) {
		if len(find()) == 0 {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	for range 100 {
		left := find()
		if len(left) == 0 {
			return nil
		}
		for _, pid := range left {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("processes %v naming %s survive SIGKILL", find(), dir)
}
