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

// Where the zero values of Options.Underlay and NodeOptions.PodCIDR pick
// networks from: a /27 per cluster, a /24 per node.
var (
	linkPool = netip.MustParsePrefix("192.168.250.0/24")
	podPool  = netip.MustParsePrefix("10.244.0.0/16")
)

// underlayBits is the size of the underlay networks picked from linkPool:
// room for the host and 29 nodes, and eight clusters at once.
const underlayBits = 27

// underlay is the network a cluster's nodes share with the host.
type underlay struct {
	// Prefix is the network; the zero value picks a free one.
	Prefix netip.Prefix
	// Bridge names the host bridge; "" names a new one.
	Bridge string
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

// lastAddr is the last address of p, its broadcast address.
func lastAddr(p netip.Prefix) netip.Addr {
	a := p.Masked().Addr().As4()
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	v |= uint32(1)<<(32-p.Bits()) - 1
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
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

// setUpNetwork creates the node's network namespace and the veth pair that
// joins it to the underlay bridge (which the first node creates, with the
// host's address), addresses the node's end and routes the node's pod
// network to it: from the host, and from the peers, the cluster's nodes
// set up before, whose pod networks the node routes to them in turn.
// Nothing routes anywhere else: the node has no default route.
func (n *nodeState) setUpNetwork(ctx context.Context, peers []*nodeState) error {
	ns, err := ovsenv.NewNetns(ctx, n.Netns)
	if err != nil {
		return err
	}
	bits := strconv.Itoa(n.Link.Bits())
	var steps [][]string
	if len(peers) == 0 {
		steps = append(steps,
			[]string{"ip", "link", "add", n.Bridge, "type", "bridge"},
			[]string{"ip", "addr", "add", n.hostIP().String() + "/" + bits, "dev", n.Bridge},
			[]string{"ip", "link", "set", n.Bridge, "up"},
		)
	}
	steps = append(steps,
		[]string{"ip", "link", "add", n.HostLink, "type", "veth", "peer", "name", "eth0", "netns", ns.Name},
		[]string{"ip", "link", "set", n.HostLink, "master", n.Bridge},
		[]string{"ip", "link", "set", n.HostLink, "up"},
		[]string{"ip", "netns", "exec", ns.Name, "ip", "addr", "add", n.nodeIP().String() + "/" + bits, "dev", "eth0"},
		[]string{"ip", "netns", "exec", ns.Name, "ip", "link", "set", "eth0", "up"},
		[]string{"ip", "route", "add", n.PodCIDR.String(), "via", n.nodeIP().String(), "dev", n.Bridge},
		[]string{"ip", "netns", "exec", ns.Name, "ip", "route", "add", serviceCIDR.String(), "dev", "lo", "src", n.nodeIP().String()},
	)
	for _, p := range peers {
		steps = append(steps,
			[]string{"ip", "netns", "exec", ns.Name, "ip", "route", "add", p.PodCIDR.String(), "via", p.nodeIP().String(), "dev", "eth0"},
			[]string{"ip", "netns", "exec", p.Netns, "ip", "route", "add", n.PodCIDR.String(), "via", n.nodeIP().String(), "dev", "eth0"},
		)
	}
	for _, step := range steps {
		if said, err := exec.CommandContext(ctx, step[0], step[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("setting up the node's network (%s: %s): %w", strings.Join(step, " "), bytes.TrimSpace(said), err)
		}
	}
	return nil
}

// restoreNetwork gives the node's eth0 its address and routes again, as a
// rebooted node's network configuration does. A pod of the stopped node may
// have moved them elsewhere and died: the KOS agent's Open vSwitch moves the
// underlay address onto its bridge br-ul with the userspace datapath, and
// that bridge's device outlives the daemon, holding the address while
// nothing switches its packets. Such a device is deleted, as a reboot
// would; what is in place already is left as it is.
func (n *nodeState) restoreNetwork(ctx context.Context, peers []*nodeState) error {
	ns := &ovsenv.Netns{Name: n.Netns}
	out, err := ns.Run(ctx, "ip", "-o", "-4", "addr", "show")
	if err != nil {
		return fmt.Errorf("restoring node %s's network: %w", n.Name, err)
	}
	onEth0 := false
	for line := range strings.SplitSeq(out, "\n") {
		fields := strings.Fields(line)
		if len(fields) < 4 || !strings.HasPrefix(fields[3], n.nodeIP().String()+"/") {
			continue
		}
		if fields[1] == "eth0" {
			onEth0 = true
			continue
		}
		if _, err := ns.Run(ctx, "ip", "link", "delete", fields[1]); err != nil {
			return fmt.Errorf("restoring node %s's network: %w", n.Name, err)
		}
	}
	if onEth0 {
		return nil
	}
	bits := strconv.Itoa(n.Link.Bits())
	steps := [][]string{
		{"ip", "addr", "add", n.nodeIP().String() + "/" + bits, "dev", "eth0"},
		{"ip", "link", "set", "eth0", "up"},
		{"ip", "route", "replace", serviceCIDR.String(), "dev", "lo", "src", n.nodeIP().String()},
	}
	for _, p := range peers {
		steps = append(steps, []string{"ip", "route", "replace", p.PodCIDR.String(), "via", p.nodeIP().String(), "dev", "eth0"})
	}
	for _, step := range steps {
		if _, err := ns.Run(ctx, step[0], step[1:]...); err != nil {
			return fmt.Errorf("restoring node %s's network: %w", n.Name, err)
		}
	}
	return nil
}

// deleteLink deletes a network interface of the host, if it is there.
func deleteLink(name string) error {
	if name == "" {
		return nil
	}
	if _, err := os.Stat(filepath.Join("/sys/class/net", name)); err != nil {
		return nil
	}
	said, err := exec.Command("ip", "link", "delete", name).CombinedOutput()
	if err != nil && !bytes.Contains(said, []byte("Cannot find device")) {
		return fmt.Errorf("deleting link %s (%s): %w", name, bytes.TrimSpace(said), err)
	}
	return nil
}

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

// selfOwner returns this program's pid and command name, as alive checks
// them.
func selfOwner() (int, string) {
	cmdline, _ := os.ReadFile("/proc/self/cmdline")
	argv0, _, _ := bytes.Cut(cmdline, []byte{0})
	return os.Getpid(), string(argv0)
}
