package cluster

// This file stops the cluster, and stops, starts again and removes one
// node of a running cluster.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/kos-sdn/kos/tools/ovsenv"
)

// stopGrace is how long a process has to exit on SIGTERM before SIGKILL.
const stopGrace = 5 * time.Second

// Stop stops the nodes' processes, then the control plane, then removes the
// nodes' networks (kube-apiserver listens on the underlay, and its
// connections to itself would hang if the address went away under them),
// and removes Dir when Start made it. Calling it again does nothing.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return nil
	}
	c.stopped = true
	if err := c.stopAll(); err != nil {
		return err
	}
	if c.removeDir {
		if err := os.RemoveAll(c.Dir); err != nil {
			return fmt.Errorf("removing the working folder: %w", err)
		}
	}
	return nil
}

func (c *Cluster) stopAll() error {
	var errs []error
	for _, n := range c.nodes {
		errs = append(errs, c.stopNode(n))
	}
	if c.registry != nil {
		errs = append(errs, c.registry.Stop())
	}
	if c.Env != nil {
		errs = append(errs, c.Env.Stop())
	}
	for _, n := range c.nodes {
		errs = append(errs, removeNode(n, c.ovs[n.Name]))
	}
	return errors.Join(errs...)
}

// stopNode stops the node's processes: kubelet and kube-proxy first, so that
// nothing restarts pods, then the pods' processes, then containerd and its
// shims.
func (c *Cluster) stopNode(n *nodeState) error {
	var errs []error
	for _, name := range []string{kubeletName, proxyName, nodeDNSName} {
		if p := c.proc(n.Name, name); p != nil {
			errs = append(errs, p.Stop(stopGrace))
		}
	}
	if hierarchies, err := cgroupHierarchies(); err != nil {
		errs = append(errs, err)
	} else {
		errs = append(errs, killCgroup(hierarchies, n.CgroupRoot))
	}
	if p := c.proc(n.Name, containerdName); p != nil {
		errs = append(errs, p.Stop(stopGrace))
	}
	// The shims outlive containerd: they name its socket.
	errs = append(errs, killNaming(n.containerdDir()))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("stopping node %s: %w", n.Name, err)
	}
	return nil
}

// StopNode stops the node named name entirely, as if it lost power: its
// kubelet, kube-proxy and DNS server, every process of its pods (through
// the node's cgroup), its containerd and its Open vSwitch instance, if any,
// stop, and its mount namespace goes with every mount in it. Its network
// and its folders stay, so that StartNode can bring it back.
func (c *Cluster) StopNode(ctx context.Context, name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, err := c.node(name)
	if err != nil {
		return err
	}
	if err := c.stopNode(n); err != nil {
		return err
	}
	if n.OVS {
		ovs := c.ovs[n.Name]
		if ovs == nil {
			if ovs, err = ovsenv.Attach(n.ovsDir()); err != nil {
				return fmt.Errorf("stopping node %s: %w", n.Name, err)
			}
		}
		if err := ovs.Stop(); err != nil {
			return fmt.Errorf("stopping node %s's Open vSwitch: %w", n.Name, err)
		}
		delete(c.ovs, n.Name)
	}
	if err := n.removeMountNS(); err != nil {
		return fmt.Errorf("stopping node %s: %w", n.Name, err)
	}
	if c.detached {
		// The node's owner was its containerd: another node's keeps
		// it from being taken for abandoned.
		for _, p := range c.procs {
			if p.Name == containerdName && p.Node != n.Name && p.Running() {
				n.OwnerPID, n.OwnerBinary = p.PID, p.Binary
				if err := updateHost(n); err != nil {
					return err
				}
				break
			}
		}
	}
	return c.saveState()
}

// StartNode starts the node named name again after StopNode, as a node
// boots: containerd's state of tasks is gone, its images stay, and kubelet
// finds its pods from kube-apiserver; the node's Open vSwitch, if any,
// starts from an empty database. It returns once the node is Ready and its
// DNS server and kube-proxy run.
func (c *Cluster) StartNode(ctx context.Context, name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, err := c.node(name)
	if err != nil {
		return err
	}
	for _, p := range c.procs {
		if p.Node == n.Name && p.Running() {
			return fmt.Errorf("node %s runs (%s, pid %d): stop it first", n.Name, p.Name, p.PID)
		}
	}
	if err := n.forgetRuntimeState(n.OVS); err != nil {
		return err
	}
	var peers []*nodeState
	for _, p := range c.nodes {
		if p != n {
			peers = append(peers, p)
		}
	}
	deleted, err := n.restoreNetwork(ctx, peers)
	if len(deleted) > 0 {
		c.printf("node %s: deleted %d interfaces its stop left, as a reboot would: %s", n.Name, len(deleted), strings.Join(deleted, " "))
	}
	if err != nil {
		return err
	}
	if err := createCgroup(n.CgroupRoot); err != nil {
		return err
	}
	if err := c.startOVS(ctx, n); err != nil {
		return err
	}
	if err := c.startNode(ctx, n); err != nil {
		return fmt.Errorf("starting node %s again: %w", n.Name, err)
	}
	return c.saveState()
}

// node returns the node of that name.
func (c *Cluster) node(name string) (*nodeState, error) {
	for _, n := range c.nodes {
		if n.Name == name {
			return n, nil
		}
	}
	return nil, fmt.Errorf("the cluster has no node %q", name)
}

// removeNode leaves the host as the node found it: no OVS daemon, shim,
// mount, cgroup, network namespace or interface of the node remains, and
// the last node out restores the host's kernel settings and fixed paths.
func removeNode(n *nodeState, ovs *ovsenv.Instance) error {
	var errs []error
	if n.OVS {
		// Asked to exit, ovs-vswitchd removes its interfaces; cleanUp
		// kills whatever is left.
		if ovs == nil {
			var err error
			ovs, err = ovsenv.Attach(n.ovsDir())
			errs = append(errs, err)
		}
		if ovs != nil {
			errs = append(errs, ovs.Stop())
		}
	}
	errs = append(errs, n.cleanUp(), leaveHost(n))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("removing node %s: %w", n.Name, err)
	}
	return nil
}
