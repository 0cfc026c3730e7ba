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
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kos-sdn/kos/tools/ovsenv"
	"github.com/kos-sdn/kos/tools/spawner"
)

// NodeOptions describe the node an environment with a kubelet runs.
type NodeOptions struct {
	// Name is the node's name (kubelet's --hostname-override); "" means
	// "kos-node".
	Name string
	// Labels are the node's labels (kubelet's --node-labels).
	Labels map[string]string
	// Link is the private /30 (or wider) network of the veth pair that joins
	// the node's network namespace to the host: its first address is the
	// host's end, where kube-apiserver listens, and its second the node's
	// IP. The zero value picks a free /30 in 192.168.250.0/24.
	Link netip.Prefix
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
	// HostIP is the host's end of the link to the node; kube-apiserver
	// listens there.
	HostIP netip.Addr
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
	// CgroupRoot is the cgroup (in every hierarchy) that holds the node's
	// pods.
	CgroupRoot string
	// OVSRunDir is the run dir of the node's Open vSwitch, with its
	// sockets, when NodeOptions.OVS asked for one; else "".
	OVSRunDir string
}

// defaultNodeName names the node when NodeOptions.Name is "".
const defaultNodeName = "kos-node"

// nodeState is what the environment's state file and the host state file
// remember of a node: enough to stop it from another program, or to clean
// up after it when its owner died.
type nodeState struct {
	// Dir is the environment's folder; it identifies the node on the host.
	Dir string `json:"dir"`
	// NodeDir is the node's own folder, Dir/node. Every process of the
	// node names it on its command line.
	NodeDir    string            `json:"nodeDir"`
	Name       string            `json:"name"`
	Labels     map[string]string `json:"labels,omitempty"`
	Netns      string            `json:"netns"`
	HostLink   string            `json:"hostLink"`
	Link       netip.Prefix      `json:"link"`
	PodCIDR    netip.Prefix      `json:"podCIDR"`
	CgroupRoot string            `json:"cgroupRoot"`
	OVS        bool              `json:"ovs,omitempty"`
	// OwnerPID and OwnerBinary name the process whose death means the node
	// is abandoned: the program that started it, or, for a detached
	// environment, its containerd.
	OwnerPID    int    `json:"ownerPID"`
	OwnerBinary string `json:"ownerBinary"`
}

func (n *nodeState) hostIP() netip.Addr { return n.Link.Addr().Next() }
func (n *nodeState) nodeIP() netip.Addr { return n.Link.Addr().Next().Next() }

// public is the exported view of the node.
func (n *nodeState) public() *Node {
	return &Node{
		Name:              n.Name,
		IP:                n.nodeIP(),
		HostIP:            n.hostIP(),
		PodCIDR:           n.PodCIDR,
		Netns:             n.Netns,
		ContainerdAddress: containerdSocket(n.containerdDir()),
		Labels:            n.Labels,
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

// Where NodeOptions' zero values pick networks from, one per node.
var (
	linkPool = netip.MustParsePrefix("192.168.250.0/24")
	podPool  = netip.MustParsePrefix("10.244.0.0/16")
)

// newNodeState settles a node's names and networks. The networks it picks
// overlap neither the host's addresses and routes nor the other nodes'.
func newNodeState(ctx context.Context, dir string, opts NodeOptions, others []*nodeState) (*nodeState, error) {
	id := make([]byte, 4)
	if _, err := rand.Read(id); err != nil {
		return nil, fmt.Errorf("naming the node: %w", err)
	}
	short := "kos-" + hex.EncodeToString(id)
	n := &nodeState{
		Dir:        dir,
		NodeDir:    filepath.Join(dir, "node"),
		Name:       opts.Name,
		Labels:     opts.Labels,
		Netns:      short,
		HostLink:   short,
		CgroupRoot: "/" + short,
		Link:       opts.Link.Masked(),
		PodCIDR:    opts.PodCIDR.Masked(),
		OVS:        opts.OVS,
	}
	if n.Name == "" {
		n.Name = defaultNodeName
	}
	used, err := hostNetworks(ctx)
	if err != nil {
		return nil, err
	}
	for _, o := range others {
		used = append(used, o.Link, o.PodCIDR)
	}
	if !n.Link.IsValid() {
		if n.Link, err = freeSubnet(linkPool, 30, used); err != nil {
			return nil, fmt.Errorf("picking the node's link network: %w", err)
		}
	}
	used = append(used, n.Link)
	if !n.PodCIDR.IsValid() {
		if n.PodCIDR, err = freeSubnet(podPool, 24, used); err != nil {
			return nil, fmt.Errorf("picking the node's pod network: %w", err)
		}
	}
	var errs []error
	if !n.Link.Addr().Is4() || n.Link.Bits() > 30 {
		errs = append(errs, fmt.Errorf("node link %s: want an IPv4 network of /30 or wider", n.Link))
	}
	if !n.PodCIDR.Addr().Is4() || n.PodCIDR.Bits() > 28 {
		errs = append(errs, fmt.Errorf("pod CIDR %s: want an IPv4 network of /28 or wider", n.PodCIDR))
	}
	if n.Link.Overlaps(n.PodCIDR) {
		errs = append(errs, fmt.Errorf("node link %s overlaps pod CIDR %s", n.Link, n.PodCIDR))
	}
	return n, errors.Join(errs...)
}

// hostNetworks lists the IPv4 networks of the host's addresses and routes.
func hostNetworks(ctx context.Context) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, args := range [][]string{{"-4", "-o", "addr", "show"}, {"-4", "route", "show", "table", "all"}} {
		said, err := exec.CommandContext(ctx, "ip", args...).Output()
		if err != nil {
			return nil, fmt.Errorf("listing the host's networks (ip %s): %w", strings.Join(args, " "), err)
		}
		for field := range strings.FieldsSeq(string(said)) {
			if p, err := netip.ParsePrefix(field); err == nil && p.Addr().Is4() {
				out = append(out, p.Masked())
			} else if a, err := netip.ParseAddr(field); err == nil && a.Is4() {
				out = append(out, netip.PrefixFrom(a, 32))
			}
		}
	}
	// The default route overlaps everything and says nothing about
	// which addresses are taken.
	return slices.DeleteFunc(out, func(p netip.Prefix) bool { return p.Bits() == 0 }), nil
}

// freeSubnet returns the first subnet of pool with the given prefix length
// that overlaps none of used.
func freeSubnet(pool netip.Prefix, bits int, used []netip.Prefix) (netip.Prefix, error) {
	size := uint32(1) << (32 - bits)
	count := uint32(1) << (bits - pool.Bits())
	base := pool.Masked().Addr().As4()
	start := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3])
	for i := range count {
		v := start + i*size
		candidate := netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), bits)
		if !slices.ContainsFunc(used, candidate.Overlaps) {
			return candidate, nil
		}
	}
	return netip.Prefix{}, fmt.Errorf("every /%d of %s is in use", bits, pool)
}

// forgetRuntimeState removes what an earlier start of the node in the same
// folder left that would be lost on a real node's reboot: containerd's and
// runc's state of tasks that no longer run, and the pod addresses handed out
// to them. containerd's images and metadata stay, and kubelet's folder: like
// a rebooted node, the node finds its pods again from kube-apiserver.
func (n *nodeState) forgetRuntimeState() error {
	if err := unmountUnder(n.NodeDir); err != nil {
		return err
	}
	for _, dir := range []string{
		filepath.Join(n.containerdDir(), "state"),
		filepath.Join(n.containerdDir(), "runc"),
		filepath.Join(n.NodeDir, "ipam"),
		// A new OVS instance starts from a new database.
		n.ovsDir(),
	} {
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("removing the state of an earlier start: %w", err)
		}
	}
	return nil
}

// setUpNetwork creates the node's network namespace and the veth pair that
// joins it to the host, addresses both ends and routes the pod network to
// the node. Nothing routes anywhere else: the node has no default route.
func (n *nodeState) setUpNetwork(ctx context.Context) error {
	ns, err := ovsenv.NewNetns(ctx, n.Netns)
	if err != nil {
		return err
	}
	bits := strconv.Itoa(n.Link.Bits())
	steps := [][]string{
		{"ip", "link", "add", n.HostLink, "type", "veth", "peer", "name", "eth0", "netns", ns.Name},
		{"ip", "addr", "add", n.hostIP().String() + "/" + bits, "dev", n.HostLink},
		{"ip", "link", "set", n.HostLink, "up"},
		{"ip", "netns", "exec", ns.Name, "ip", "addr", "add", n.nodeIP().String() + "/" + bits, "dev", "eth0"},
		{"ip", "netns", "exec", ns.Name, "ip", "link", "set", "eth0", "up"},
		{"ip", "route", "add", n.PodCIDR.String(), "via", n.nodeIP().String(), "dev", n.HostLink},
		{"ip", "netns", "exec", ns.Name, "ip", "route", "add", serviceCIDR.String(), "dev", "lo", "src", n.nodeIP().String()},
	}
	for _, step := range steps {
		if said, err := exec.CommandContext(ctx, step[0], step[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("setting up the node's network (%s: %s): %w", strings.Join(step, " "), bytes.TrimSpace(said), err)
		}
	}
	return nil
}

// cleanUp removes every trace of the node from the host: its processes
// (kubelet, containerd, shims, containers and OVS daemons), its mounts, its cgroups, its
// network namespace and with it the veth pair and the route to its pods. It
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
	errs = append(errs, unmountUnder(n.NodeDir))
	if n.CgroupRoot != "" {
		errs = append(errs, removeCgroup(n.CgroupRoot))
	}
	// Deleting one end of the veth pair deletes the other, and the route
	// to the pods with it.
	if n.HostLink != "" {
		if _, err := os.Stat(filepath.Join("/sys/class/net", n.HostLink)); err == nil {
			said, err := exec.Command("ip", "link", "delete", n.HostLink).CombinedOutput()
			if err != nil && !bytes.Contains(said, []byte("Cannot find device")) {
				errs = append(errs, fmt.Errorf("deleting link %s (%s): %w", n.HostLink, bytes.TrimSpace(said), err))
			}
		}
	}
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

// selfOwner returns this program's pid and command name, as alive checks
// them.
func selfOwner() (int, string) {
	cmdline, _ := os.ReadFile("/proc/self/cmdline")
	argv0, _, _ := bytes.Cut(cmdline, []byte{0})
	return os.Getpid(), string(argv0)
}
