package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Each node has a mount namespace of its own, in which its containerd,
// kubelet, kube-proxy and DNS server run, and with them every container of
// its pods (runc starts them from containerd's namespace). In it the paths
// of NodePaths are bind mounts of folders of the node's own, so that two
// nodes on one host do not share /var/lib/kos or /var/run/openvswitch, nor
// what kubelet and containerd write at fixed paths whatever they are told.
// The namespace is a slave of the host's: mounts made on the host later
// (network namespaces under /run/netns) appear in it, its own stay inside.
//
// The namespace is kept by a bind mount of it on a file of the node's folder
// (Node.MountNamespace, itself on a private bind mount of its folder, as a
// namespace file must be), and entered with nsenter --mount. Unmounting the
// file when the node's processes are gone ends the namespace and every
// mount in it, as a reboot would.

// NodePaths are the host paths that are private to each node: within the
// node they are bind mounts of folders under the node's own folder, which
// Node.HostPath names.
var NodePaths = []string{
	"/var/lib/kos",
	"/var/run/kos",
	"/var/run/openvswitch",
	"/var/lib/kos-volumes",
	// The CNI plugins' folder, which the node's containerd runs them
	// from and a DaemonSet installs a plugin into (see cniBinPath).
	"/opt/cni/bin",
	// What kubelet, containerd and its shims write at fixed paths: the
	// device-plugin folder, the symlinks to container logs, libcni's
	// result cache, the shims' sockets and ctr's fifos.
	"/var/lib/kubelet",
	"/var/log/containers",
	"/var/log/pods",
	"/var/lib/cni",
	"/run/containerd",
}

// ovsRunPath is the run dir of Open vSwitch that the KOS agent mounts; a
// node with an Open vSwitch instance of its own (NodeOptions.OVS) finds it
// there.
const ovsRunPath = "/var/run/openvswitch"

// mountNSFile is the file that keeps the node's mount namespace.
func (n *nodeState) mountNSFile() string { return filepath.Join(n.NodeDir, "ns", "mnt") }

// hostPath returns the host-side path behind path p of the node whose
// folder is nodeDir, and whose Open vSwitch run dir is ovsRunDir ("" for
// none).
func hostPath(nodeDir, ovsRunDir, p string) string {
	p = filepath.Clean(p)
	for _, q := range NodePaths {
		for _, spelling := range []string{q, strings.Replace(q, "/var/run/", "/run/", 1)} {
			rest, ok := strings.CutPrefix(p, spelling)
			if !ok || (rest != "" && rest[0] != '/') {
				continue
			}
			if q == ovsRunPath && ovsRunDir != "" {
				return ovsRunDir + rest
			}
			return filepath.Join(nodeDir, "root", q) + rest
		}
	}
	return p
}

func (n *nodeState) hostPath(p string) string {
	return hostPath(n.NodeDir, n.ovsRunDir(), p)
}

// createMountNS creates the node's mount namespace with its private paths
// bound, after removing what is left of an earlier one.
func (n *nodeState) createMountNS(ctx context.Context) error {
	if err := n.removeMountNS(); err != nil {
		return err
	}
	dir := filepath.Dir(n.mountNSFile())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind-mounting %s: %w", dir, err)
	}
	if err := unix.Mount("", dir, "", unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making %s private: %w", dir, err)
	}
	if err := os.WriteFile(n.mountNSFile(), nil, 0o644); err != nil {
		return fmt.Errorf("creating %s: %w", n.mountNSFile(), err)
	}
	if err := createHostPaths(NodePaths); err != nil {
		return err
	}
	var script []string
	for _, p := range NodePaths {
		src := n.hostPath(p)
		if err := os.MkdirAll(src, 0o755); err != nil {
			return fmt.Errorf("creating the node's %s: %w", p, err)
		}
		script = append(script, "mount --bind "+shellQuote(src)+" "+shellQuote(p))
	}
	// kubelet wants its root folder (--root-dir, in the node's folder) on a
	// shared mount and, finding it on a slave one, bind-mounts it on itself
	// as it starts (MakeRShared in setupDataDirs), while its pod-resources
	// server, started beside, creates its socket under it at a temporary
	// name and renames it: a rename whose two paths are looked up on either
	// side of that mount sees two mounts and fails with EXDEV ("failed to
	// move temporary file", seen once after StartNode). A shared mount from
	// the start is left alone.
	if err := os.MkdirAll(n.kubeletDir(), 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", n.kubeletDir(), err)
	}
	script = append(script,
		"mount --bind "+shellQuote(n.kubeletDir())+" "+shellQuote(n.kubeletDir()),
		"mount --make-rshared "+shellQuote(n.kubeletDir()))
	cmd := exec.CommandContext(ctx, "unshare", "--mount="+n.mountNSFile(), "--propagation", "slave", "--", "/bin/sh", "-ec", strings.Join(script, "\n"))
	if said, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("creating the node's mount namespace (%s): %w", bytes.TrimSpace(said), err)
	}
	return nil
}

// removeMountNS unmounts the file that keeps the node's mount namespace, and
// its folder's bind mount. Once no process is in it, the namespace ends.
func (n *nodeState) removeMountNS() error {
	err := unmountUnder(filepath.Dir(n.mountNSFile()))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
