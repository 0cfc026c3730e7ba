package cluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"

	"github.com/kos-sdn/kos/tools/spawner"
)

// NodeOptions describe a node of a cluster.
type NodeOptions struct {
	// Name is the node's name (kubelet's --hostname-override); "" means
	// "kos-node" for the first node and "kos-node-<i>" for the i-th after.
	Name string
	// Labels are the node's labels (kubelet's --node-labels).
	Labels map[string]string
	// PodCIDR is the network of the node's pod bridge; the zero value picks
	// a free /24 in 10.244.0.0/16. The host routes it to the node, so that
	// kube-apiserver reaches pods (aggregated API servers) directly.
	PodCIDR netip.Prefix
	// OVS runs an Open vSwitch instance (tools/ovsenv) in the node's
	// network namespace, as a node of the SDN has; Node.OVSRunDir is its
	// run dir, for host-path volumes and OVS_RUNDIR. Only the userspace
	// datapath works on these machines: create bridges with
	// datapath_type=netdev.
	OVS bool
}

// Node is the node of an environment that runs a kubelet. Its fields are
// read-only.
type Node struct {
	// Name is the node's name.
	Name string
	// IP is the node's address, in its own network namespace.
	IP netip.Addr
	// HostIP is the host's address on the cluster's underlay;
	// kube-apiserver (and the cluster's registry) listen there.
	HostIP netip.Addr
	// Underlay is the network the nodes and the host share: a bridge on
	// the host to which every node's eth0 is joined.
	Underlay netip.Prefix
	// Dir is the node's own folder: its containerd, kubelet, logs and the
	// host-side folders of its private paths (see HostPath).
	Dir string
	// PodCIDR holds the addresses of the node's pods.
	PodCIDR netip.Prefix
	// Netns is the name of the node's network namespace under /run/netns;
	// hostNetwork pods, kubelet and containerd run there.
	Netns string
	// ContainerdAddress is the socket of the node's containerd, for ctr
	// --address (images live in the namespace k8s.io).
	ContainerdAddress string
	// Labels are the labels the node registered with.
	Labels map[string]string
	// MountNamespace is the file of the node's mount namespace, for
	// nsenter --mount; it exists while the node runs.
	MountNamespace string
	// CgroupRoot is the cgroup (in every hierarchy) that holds the node's
	// pods.
	CgroupRoot string
	// OVSRunDir is the run dir of the node's Open vSwitch, with its
	// sockets, when NodeOptions.OVS asked for one; else "".
	OVSRunDir string
}

// HostPath returns the host-side path behind path p of the node: within the
// node (its kubelet, containerd and pods, hostPath volumes included) the
// paths of NodePaths are bind mounts of folders of the node's own, so that
// /var/lib/kos of one node is not another's. Any other path is the host's
// own and comes back unchanged.
func (n *Node) HostPath(p string) string {
	return hostPath(n.Dir, n.OVSRunDir, p)
}

// defaultNodeName names the node when NodeOptions.Name is "".
const defaultNodeName = "kos-node"

// nodeState is what the environment's state file and the host state file
// remember of a node: enough to stop it from another program, or to clean
// up after it when its owner died.
type nodeState struct {
	// Dir is the environment's folder; it identifies the node on the host.
	Dir string `json:"dir"`
	// NodeDir is the node's own folder, Dir/node for the first node and
	// Dir/node<i> for the i-th after it. Every process of the node names it
	// on its command line.
	NodeDir string            `json:"nodeDir"`
	Name    string            `json:"name"`
	Labels  map[string]string `json:"labels,omitempty"`
	Netns   string            `json:"netns"`
	// HostLink is the host's end of the veth pair whose other end is the
	// node's eth0; it is a port of Bridge.
	HostLink string `json:"hostLink"`
	// Bridge is the host bridge of the cluster's underlay, shared by the
	// cluster's nodes; the last of them to go removes it. A record from
	// before the shared underlay has none: its link was the node's own.
	Bridge string `json:"bridge,omitempty"`
	// Link is the underlay network; its first address is the host's.
	Link netip.Prefix `json:"link"`
	// IP is the node's address on Link; a record without one is of a node
	// of its own /30 link, at the link's second address.
	IP         netip.Addr   `json:"ip,omitzero"`
	PodCIDR    netip.Prefix `json:"podCIDR"`
	CgroupRoot string       `json:"cgroupRoot"`
	OVS        bool         `json:"ovs,omitempty"`
	// OwnerPID and OwnerBinary name the process whose death means the node
	// is abandoned: the program that started it, or, for a detached
	// environment, its containerd.
	OwnerPID    int    `json:"ownerPID"`
	OwnerBinary string `json:"ownerBinary"`
}

func (n *nodeState) hostIP() netip.Addr { return n.Link.Addr().Next() }

func (n *nodeState) nodeIP() netip.Addr {
	if n.IP.IsValid() {
		return n.IP
	}
	return n.Link.Addr().Next().Next()
}

// public is the exported view of the node.
func (n *nodeState) public() *Node {
	return &Node{
		Name:              n.Name,
		IP:                n.nodeIP(),
		HostIP:            n.hostIP(),
		Underlay:          n.Link,
		Dir:               n.NodeDir,
		PodCIDR:           n.PodCIDR,
		Netns:             n.Netns,
		ContainerdAddress: containerdSocket(n.containerdDir()),
		Labels:            n.Labels,
		MountNamespace:    n.mountNSFile(),
		CgroupRoot:        n.CgroupRoot,
		OVSRunDir:         n.ovsRunDir(),
	}
}

func (n *nodeState) containerdDir() string { return filepath.Join(n.NodeDir, "containerd") }
func (n *nodeState) kubeletDir() string    { return filepath.Join(n.NodeDir, "kubelet") }
func (n *nodeState) cniConfDir() string    { return filepath.Join(n.NodeDir, "net.d") }
func (n *nodeState) ovsDir() string        { return filepath.Join(n.NodeDir, "ovs") }

func (n *nodeState) ovsRunDir() string {
	if !n.OVS {
		return ""
	}
	return filepath.Join(n.ovsDir(), "run")
}

// ownerAlive reports whether the node's owner still runs.
func (n *nodeState) ownerAlive() bool {
	return spawner.Alive(n.OwnerPID, n.OwnerBinary)
}

// newNodeState settles the names and networks of the index-th node of a
// cluster on the underlay ul. The networks it picks overlap neither the
// host's addresses and routes nor the other nodes'.
func newNodeState(ctx context.Context, dir string, index int, opts NodeOptions, ul underlay, others []*nodeState) (*nodeState, error) {
	id := make([]byte, 4)
	if _, err := rand.Read(id); err != nil {
		return nil, fmt.Errorf("naming the node: %w", err)
	}
	short := "kos-" + hex.EncodeToString(id)
	nodeDir := "node"
	if index > 0 {
		nodeDir += strconv.Itoa(index + 1)
	}
	n := &nodeState{
		Dir:        dir,
		NodeDir:    filepath.Join(dir, nodeDir),
		Name:       opts.Name,
		Labels:     opts.Labels,
		Netns:      short,
		HostLink:   short,
		Bridge:     ul.Bridge,
		CgroupRoot: "/" + short,
		Link:       ul.Prefix.Masked(),
		PodCIDR:    opts.PodCIDR.Masked(),
		OVS:        opts.OVS,
	}
	if n.Name == "" {
		n.Name = defaultNodeName
		if index > 0 {
			n.Name += "-" + strconv.Itoa(index+1)
		}
	}
	if n.Bridge == "" {
		n.Bridge = "kb-" + hex.EncodeToString(id)
	}
	used, err := hostNetworks(ctx)
	if err != nil {
		return nil, err
	}
	for _, o := range others {
		used = append(used, o.Link, o.PodCIDR)
	}
	if !n.Link.IsValid() {
		if n.Link, err = freeSubnet(linkPool, underlayBits, used); err != nil {
			return nil, fmt.Errorf("picking the cluster's underlay network: %w", err)
		}
		used = append(used, n.Link)
	}
	if !n.PodCIDR.IsValid() {
		if n.PodCIDR, err = freeSubnet(podPool, 24, used); err != nil {
			return nil, fmt.Errorf("picking the node's pod network: %w", err)
		}
	}
	// The host is the first address, the nodes follow in order.
	n.IP = n.Link.Addr().Next()
	for range index + 1 {
		n.IP = n.IP.Next()
	}
	var errs []error
	if !n.Link.Addr().Is4() || n.Link.Bits() > 30 {
		errs = append(errs, fmt.Errorf("underlay %s: want an IPv4 network of /30 or wider", n.Link))
	} else if !n.Link.Contains(n.IP) || n.IP == lastAddr(n.Link) {
		errs = append(errs, fmt.Errorf("underlay %s has no room for node %d", n.Link, index+1))
	}
	if !n.PodCIDR.Addr().Is4() || n.PodCIDR.Bits() > 28 {
		errs = append(errs, fmt.Errorf("pod CIDR %s: want an IPv4 network of /28 or wider", n.PodCIDR))
	}
	if n.Link.Overlaps(n.PodCIDR) {
		errs = append(errs, fmt.Errorf("underlay %s overlaps pod CIDR %s", n.Link, n.PodCIDR))
	}
	return n, errors.Join(errs...)
}

// forgetRuntimeState removes what an earlier start of the node in the same
// folder left that would be lost on a real node's reboot: containerd's and
// runc's state of tasks that no longer run, and the pod addresses handed out
// to them; with ovs, also the database of the node's Open vSwitch, which
// starts anew. containerd's images and metadata stay, and kubelet's folder:
// like a rebooted node, the node finds its pods again from kube-apiserver.
func (n *nodeState) forgetRuntimeState(ovs bool) error {
	if err := unmountUnder(n.NodeDir); err != nil {
		return err
	}
	dirs := []string{
		filepath.Join(n.containerdDir(), "state"),
		filepath.Join(n.containerdDir(), "runc"),
		filepath.Join(n.NodeDir, "ipam"),
	}
	if ovs {
		dirs = append(dirs, n.ovsDir())
	}
	for _, dir := range dirs {
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("removing the state of an earlier start: %w", err)
		}
	}
	return nil
}

// selfOwner returns this program's pid and command name, as alive checks
// them.
func selfOwner() (int, string) {
	cmdline, _ := os.ReadFile("/proc/self/cmdline")
	argv0, _, _ := bytes.Cut(cmdline, []byte{0})
	return os.Getpid(), string(argv0)
}
