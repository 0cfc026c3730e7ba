package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kos-sdn/kos/tools/images"
	"github.com/kos-sdn/kos/tools/lane"
	"github.com/kos-sdn/kos/tools/ovsenv"
	"github.com/kos-sdn/kos/tools/registry"
	"github.com/kos-sdn/kos/tools/spawner"
	"github.com/kos-sdn/kos/tools/testenv"
)

// The binaries of a node, built by tools/kube/build.sh like kube-apiserver.
const (
	kubeletBinary = "kubelet"
	proxyBinary   = "kube-proxy"
)

// The process names of a node, which are also the names of their log and
// pid files in Dir.
const (
	kubeletName = "kubelet"
	proxyName   = "kube-proxy"
)

// The kubelet's files within the node's folder, and the group of nodes'
// users, as the Node authorizer expects it.
const (
	kubeletKubeconfigFile  = "kubelet.kubeconfig"
	kubeletServingCertFile = "kubelet.crt"
	kubeletServingKeyFile  = "kubelet.key"
	nodesGroup             = "system:nodes"
)

// Options configure Start.
type Options struct {
	// ControlPlane configures the control plane (tools/testenv). Its Dir,
	// BinDir, Detach, Progress and Timeout apply to the nodes too; Address
	// and Kubelets are set by Start when there are nodes.
	ControlPlane testenv.Options

	// Nodes describe the nodes: each is a network namespace of its own on
	// the cluster's underlay, and a mount namespace of its own (see
	// NodePaths), where containerd, kubelet and the node's DNS server run.
	// None means a control plane alone.
	Nodes []NodeOptions

	// Underlay is the network the nodes share with the host, on a bridge
	// of the host: the host has its first address, where kube-apiserver
	// listens, and the nodes the next ones, in order. The zero value picks
	// a free /27 in 192.168.250.0/24.
	Underlay netip.Prefix

	// KubeProxy runs kube-proxy (iptables mode) on every node, so that pods
	// reach Services, kube-apiserver's kubernetes Service among them.
	KubeProxy bool

	// Multus runs Multus's thin CNI plugin (tools/multus, built on first
	// use) on every node in front of the node's network: a pod annotated
	// k8s.v1.cni.cncf.io/networks gets, besides eth0, an interface for each
	// NetworkAttachmentDefinition it names, made by the plugins of the
	// node's /opt/cni/bin. Start applies the NetworkAttachmentDefinition CRD
	// and Multus's RBAC before the nodes start.
	Multus bool

	// Registry runs a real OCI registry (tools/registry) on the host's
	// underlay address, its storage in Dir/registry, from which every
	// node's containerd pulls over plain http: push images to
	// Cluster.Registry and name them REGISTRY/REPOSITORY:TAG in pods. A
	// detached cluster's registry is detached too, and Attach finds it.
	Registry bool
}

// Cluster is a running control plane with its nodes. The embedded Env is
// the control plane; its Stop and Processes are the Cluster's own, which
// include the nodes.
type Cluster struct {
	*testenv.Env
	// Nodes are the cluster's nodes, read-only.
	Nodes []*Node
	// Registry is the host:port of the cluster's registry
	// (Options.Registry), or "".
	Registry string

	mu       sync.Mutex
	procs    []*process
	nodes    []*nodeState
	ovs      map[string]*ovsenv.Instance
	registry *registry.Registry
	proxy    bool
	// multus is the Multus binary the nodes run (Options.Multus), or "".
	multus    string
	detached  bool
	removeDir bool
	stopped   bool
	timeout   time.Duration
	progress  io.Writer
}

// process is one process of a node. The fields are what the state file
// remembers.
type process struct {
	*spawner.Process
	URL string `json:"url"`
	// Node names the node the process belongs to; "" for none.
	Node string `json:"node,omitempty"`
}

// stateFile names the file in Dir from which Attach finds the nodes, beside
// the control plane's own.
const stateFile = "cluster.json"

// clusterState is what the state file holds.
type clusterState struct {
	Nodes     []*nodeState `json:"nodes"`
	Processes []*process   `json:"processes"`
	KubeProxy bool         `json:"kubeProxy,omitempty"`
	// Multus is the Multus binary the nodes run, or "".
	Multus string `json:"multus,omitempty"`
	// Registry is the host:port of the cluster's registry, whose own
	// state is in the folder registryDir; "" when it has none.
	Registry string `json:"registry,omitempty"`
}

// registryDir is the folder in Dir of the cluster's registry: its config,
// storage, log and state.
const registryDir = "registry"

// stopGrace is how long a process has to exit on SIGTERM before SIGKILL.
const stopGrace = 5 * time.Second

// Start starts the control plane and the nodes, and returns once every node
// is Ready. The nodes' networks come first: kube-apiserver listens on the
// host's address on the underlay. On failure it stops what it started and
// keeps Dir, whose logs say more than the error can.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	// A cluster of no nodes is a control plane (and perhaps a registry),
	// which the integration lane may start.
	need, what := lane.Integration, "control plane"
	if len(opts.Nodes) > 0 {
		need, what = lane.Cluster, "node"
	}
	if err := lane.Require(need, what); err != nil {
		return nil, err
	}
	if opts.KubeProxy && len(opts.Nodes) == 0 {
		return nil, errors.New("kube-proxy runs on nodes: the cluster has none")
	}
	if opts.Multus && len(opts.Nodes) == 0 {
		return nil, errors.New("multus runs on nodes: the cluster has none")
	}
	c := &Cluster{
		ovs:      map[string]*ovsenv.Instance{},
		proxy:    opts.KubeProxy,
		detached: opts.ControlPlane.Detach,
		timeout:  opts.ControlPlane.Timeout,
		progress: opts.ControlPlane.Progress,
	}
	if c.timeout <= 0 {
		c.timeout = 2 * time.Minute
	}
	if c.progress == nil {
		c.progress = io.Discard
	}
	// The folder is the control plane's, made first: the nodes' state goes
	// there before kube-apiserver starts.
	cp := opts.ControlPlane
	var err error
	if cp.Dir, c.removeDir, err = testenv.WorkDir(cp.Dir); err != nil {
		return nil, err
	}
	prev, err := readState(cp.Dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if prev != nil {
		for _, p := range prev.Processes {
			if p.Running() {
				return nil, fmt.Errorf("%s (pid %d) from an earlier start still runs in %s: stop that cluster first", p.Name, p.PID, cp.Dir)
			}
		}
	}
	if err := c.start(ctx, cp, opts.Nodes, opts.Underlay, opts.Registry, opts.Multus); err != nil {
		return nil, errors.Join(err, c.stopAll())
	}
	return c, nil
}

func (c *Cluster) start(ctx context.Context, cp testenv.Options, nodes []NodeOptions, ul netip.Prefix, withRegistry, withMultus bool) error {
	if len(nodes) == 0 {
		if withRegistry {
			if err := c.startRegistry(ctx, cp.Dir, "127.0.0.1"); err != nil {
				return err
			}
		}
		env, err := testenv.Start(ctx, cp)
		c.Env = env
		if err != nil || !withRegistry {
			return err
		}
		return c.saveState()
	}
	bins := []string{kubeletBinary}
	if c.proxy {
		bins = append(bins, proxyBinary)
	}
	binDir, err := testenv.FindBinaries(ctx, cp.BinDir, bins)
	if err != nil {
		return err
	}
	if withMultus {
		if c.multus, err = findMultus(ctx); err != nil {
			return err
		}
	}
	names := map[string]bool{}
	for i, opts := range nodes {
		if names[opts.Name] && opts.Name != "" {
			return fmt.Errorf("two nodes named %s", opts.Name)
		}
		names[opts.Name] = true
		if err := c.prepareNode(ctx, cp.Dir, i, opts, ul); err != nil {
			return err
		}
	}
	if withRegistry {
		if err := c.startRegistry(ctx, cp.Dir, c.nodes[0].hostIP().String()); err != nil {
			return err
		}
	}
	cp.BinDir = binDir
	cp.Address = c.nodes[0].hostIP()
	cp.Kubelets = true
	env, err := testenv.Start(ctx, cp)
	if err != nil {
		return err
	}
	c.Env = env
	if c.multus != "" {
		c.printf("applying the NetworkAttachmentDefinition CRD and Multus's RBAC")
		if err := c.applyMultusAPI(ctx); err != nil {
			return err
		}
	}
	for _, n := range c.nodes {
		if err := c.startNode(ctx, n); err != nil {
			return err
		}
	}
	return c.saveState()
}

// prepareNode settles the index-th node's addresses and creates its network
// and cgroup, before kube-apiserver starts. The first node picks the
// underlay ul when it is the zero value, and creates its bridge.
func (c *Cluster) prepareNode(ctx context.Context, dir string, index int, opts NodeOptions, ul netip.Prefix) error {
	pid, binary := selfOwner()
	under := underlay{Prefix: ul}
	if len(c.nodes) > 0 {
		under = underlay{Prefix: c.nodes[0].Link, Bridge: c.nodes[0].Bridge}
	}
	n, err := joinHost(func(others []*nodeState) (*nodeState, error) {
		n, err := newNodeState(ctx, dir, index, opts, under, others)
		if err != nil {
			return nil, err
		}
		n.OwnerPID, n.OwnerBinary = pid, binary
		return n, nil
	}, func(err error) { c.printf("cleaning up after an abandoned node: %v", err) })
	if err != nil {
		return err
	}
	peers := c.nodes
	c.nodes = append(c.nodes, n)
	c.Nodes = append(c.Nodes, n.public())
	if err := writeState(dir, c.state()); err != nil {
		return err
	}
	c.printf("node %s: network namespace %s, node IP %s on %s (bridge %s, host IP %s), pods %s", n.Name, n.Netns, n.nodeIP(), n.Link, n.Bridge, n.hostIP(), n.PodCIDR)
	if err := n.forgetRuntimeState(true); err != nil {
		return err
	}
	if err := n.setUpNetwork(ctx, peers); err != nil {
		return err
	}
	if err := createCgroup(n.CgroupRoot); err != nil {
		return err
	}
	if err := c.startOVS(ctx, n); err != nil {
		return err
	}
	if err := os.MkdirAll(n.NodeDir, 0o755); err != nil {
		return fmt.Errorf("creating the node's folder: %w", err)
	}
	return nil
}

// startOVS starts the node's Open vSwitch instance, if it has one.
func (c *Cluster) startOVS(ctx context.Context, n *nodeState) error {
	if !n.OVS {
		return nil
	}
	c.printf("starting Open vSwitch in %s", n.Netns)
	ovs, err := ovsenv.Start(ctx, ovsenv.Options{Dir: n.ovsDir(), Netns: n.Netns, Detach: c.detached})
	if err != nil {
		return fmt.Errorf("starting the node's Open vSwitch: %w", err)
	}
	c.ovs[n.Name] = ovs
	return nil
}

// startNode creates the node's mount namespace, starts the node's
// containerd with the pause image imported and its kubelet, both in the
// node's namespaces, waits until the node is Ready, then starts its DNS
// server and kube-proxy.
func (c *Cluster) startNode(ctx context.Context, n *nodeState) error {
	if err := writeCNIConfig(n, c.multus != ""); err != nil {
		return err
	}
	if c.multus != "" {
		if err := c.WriteKubeconfig(filepath.Join(n.NodeDir, multusKubeconfigFile), multusUser); err != nil {
			return err
		}
	}
	if err := n.createMountNS(ctx); err != nil {
		return err
	}
	if err := n.linkCNIPlugins(c.multus); err != nil {
		return err
	}
	c.printf("starting containerd of node %s", n.Name)
	cd, err := startContainerd(ctx, ContainerdOptions{
		Dir:        n.containerdDir(),
		Netns:      n.Netns,
		CNIConfDir: n.cniConfDir(),
		CNIBinDir:  cniBinPath,
		Detach:     c.detached,
		Registries: c.registries(),
		mountNS:    n.mountNSFile(),
	})
	if err != nil {
		return err
	}
	cd.Node = n.Name
	if err := c.track(cd); err != nil {
		return err
	}
	if c.detached {
		// A detached node lives as long as its containerd.
		n.OwnerPID, n.OwnerBinary = cd.PID, cd.Binary
		if err := updateHost(n); err != nil {
			return err
		}
		if err := c.saveState(); err != nil {
			return err
		}
	}
	began := time.Now()
	if err := c.importPause(ctx, n); err != nil {
		return err
	}
	c.printf("built and imported the pause image in %s", time.Since(began).Round(10*time.Millisecond))

	if err := c.WriteKubeconfig(filepath.Join(n.NodeDir, kubeletKubeconfigFile), "system:node:"+n.Name, nodesGroup); err != nil {
		return err
	}
	if err := c.IssueServingCert(filepath.Join(n.NodeDir, kubeletServingCertFile), filepath.Join(n.NodeDir, kubeletServingKeyFile), n.Name, n.nodeIP()); err != nil {
		return err
	}
	config, err := writeKubeletConfig(c.ClientCACertFile, n)
	if err != nil {
		return err
	}
	c.printf("starting kubelet of node %s", n.Name)
	started := time.Now()
	kubelet, err := n.startIn(kubeletName, filepath.Join(c.BinDir, kubeletBinary), kubeletArgs(config, n), c.detached)
	if err != nil {
		return err
	}
	kubelet.URL = "https://" + n.nodeIP().String() + ":" + strconv.Itoa(kubeletPort)
	if err := c.track(kubelet); err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(c.RESTConfig)
	if err != nil {
		return fmt.Errorf("creating a client: %w", err)
	}
	c.printf("waiting for node %s to be Ready", n.Name)
	if err := kubelet.WaitReady(ctx, c.timeout, func(ctx context.Context) error { return nodeReady(ctx, client, n.Name, started) }); err != nil {
		return err
	}
	if err := c.startNodeDNS(ctx, n); err != nil {
		return err
	}
	if c.proxy {
		return c.startProxy(ctx, n)
	}
	return nil
}

// startProxy starts kube-proxy in the node's network namespace and waits
// until it has programmed the Services once.
func (c *Cluster) startProxy(ctx context.Context, n *nodeState) error {
	kubeconfig := filepath.Join(n.NodeDir, proxyKubeconfigFile)
	if err := c.WriteKubeconfig(kubeconfig, proxyUser); err != nil {
		return err
	}
	config, err := writeProxyConfig(n, kubeconfig)
	if err != nil {
		return err
	}
	c.printf("starting kube-proxy of node %s", n.Name)
	p, err := n.startIn(proxyName, filepath.Join(c.BinDir, proxyBinary), []string{"--config=" + config}, c.detached)
	if err != nil {
		return err
	}
	// Its health server listens on the node's IP, which the host reaches.
	p.URL = "http://" + net.JoinHostPort(n.nodeIP().String(), strconv.Itoa(proxyHealthzPort))
	if err := c.track(p); err != nil {
		return err
	}
	return p.WaitReady(ctx, c.timeout, func(ctx context.Context) error { return testenv.Healthz(ctx, p.URL) })
}

// importPause builds the pause image and imports it into the node's
// containerd, which names it as its sandbox image.
func (c *Cluster) importPause(ctx context.Context, n *nodeState) error {
	dir := filepath.Join(n.NodeDir, "images")
	pause, err := images.Pause(ctx, images.GoOptions{OutDir: filepath.Join(dir, "bin")})
	if err != nil {
		return fmt.Errorf("building the pause image: %w", err)
	}
	tarball := filepath.Join(dir, "pause.tar")
	if err := images.Write(tarball, map[string]v1.Image{images.PauseTag: pause}); err != nil {
		return err
	}
	return images.Import(ctx, containerdSocket(n.containerdDir()), tarball)
}

// ImportImages imports the images of a tarball (as images.Write makes them)
// into every node's containerd, where pods find them by tag.
func (c *Cluster) ImportImages(ctx context.Context, tarball string) error {
	if len(c.nodes) == 0 {
		return errors.New("the cluster has no node to import images into")
	}
	for _, n := range c.nodes {
		if err := images.Import(ctx, containerdSocket(n.containerdDir()), tarball); err != nil {
			return err
		}
	}
	return nil
}

// startRegistry starts the cluster's registry on address (an IP), its files
// in dir/registry.
func (c *Cluster) startRegistry(ctx context.Context, dir, address string) error {
	c.printf("starting the registry on %s", address)
	r, err := registry.Start(ctx, registry.Options{Dir: filepath.Join(dir, registryDir), Address: address, Detach: c.detached})
	if err != nil {
		return fmt.Errorf("starting the cluster's registry: %w", err)
	}
	c.registry, c.Registry = r, r.Host()
	return nil
}

// registries lists the plain-http registries the nodes pull from.
func (c *Cluster) registries() []string {
	if c.Registry == "" {
		return nil
	}
	return []string{c.Registry}
}

// track adds a started process to the cluster and records it in the state
// file at once, so that a detached process whose starter is killed half-way
// can still be found and stopped.
// A process started again, as when a node starts again, takes the place of
// the one before.
func (c *Cluster) track(p *process) error {
	for i, q := range c.procs {
		if q.Node == p.Node && q.Name == p.Name {
			c.procs[i] = p
			return c.saveState()
		}
	}
	c.procs = append(c.procs, p)
	return c.saveState()
}

// proc returns the process of that name of the node, or nil.
func (c *Cluster) proc(node, name string) *process {
	for _, p := range c.procs {
		if p.Node == node && p.Name == name {
			return p
		}
	}
	return nil
}

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
	if err := n.restoreNetwork(ctx, peers); err != nil {
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

// Processes describes the processes of the cluster: the control plane's,
// the registry, then the nodes', each in start order.
func (c *Cluster) Processes() []testenv.ProcessStatus {
	out := c.Env.Processes()
	c.mu.Lock()
	defer c.mu.Unlock()
	if r := c.registry; r != nil {
		out = append(out, testenv.ProcessStatus{Name: registry.Binary, PID: r.PID(), URL: "http://" + r.Host(), LogFile: r.LogFile(), Running: r.Running()})
	}
	for _, p := range c.procs {
		name := p.Name
		if len(c.nodes) > 1 && p.Node != "" {
			name = p.Node + "/" + p.Name
		}
		out = append(out, testenv.ProcessStatus{Name: name, PID: p.PID, URL: p.URL, LogFile: p.LogFile, Running: p.Running()})
	}
	return out
}

// Attach returns the cluster an earlier Start left in dir, typically a
// detached one, so that another program can inspect or stop it. A control
// plane that tools/testenv started alone is a cluster without nodes. It
// fails with an error matching os.ErrNotExist when dir holds no control
// plane.
func Attach(dir string) (*Cluster, error) {
	env, err := testenv.Attach(dir)
	if err != nil {
		return nil, err
	}
	c := &Cluster{Env: env, timeout: 2 * time.Minute, progress: io.Discard, detached: true, ovs: map[string]*ovsenv.Instance{}}
	st, err := readState(env.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return nil, err
	}
	c.nodes, c.procs, c.proxy, c.multus = st.Nodes, st.Processes, st.KubeProxy, st.Multus
	if st.Registry != "" {
		if c.registry, err = registry.Attach(filepath.Join(env.Dir, registryDir)); err != nil {
			return nil, fmt.Errorf("finding the cluster's registry: %w", err)
		}
		c.Registry = c.registry.Host()
	}
	for _, n := range c.nodes {
		c.Nodes = append(c.Nodes, n.public())
	}
	// A state file from before processes named their node: one node.
	for _, p := range c.procs {
		if p.Node == "" && len(c.nodes) == 1 && p.Name != "" {
			p.Node = c.nodes[0].Name
		}
	}
	return c, nil
}

func readState(dir string) (*clusterState, error) {
	var st clusterState
	if err := spawner.ReadState(filepath.Join(dir, stateFile), &st); err != nil {
		return nil, fmt.Errorf("reading the cluster state: %w", err)
	}
	return &st, nil
}

func (c *Cluster) state() *clusterState {
	return &clusterState{Nodes: c.nodes, Processes: c.procs, KubeProxy: c.proxy, Multus: c.multus, Registry: c.Registry}
}

func (c *Cluster) saveState() error {
	return writeState(c.Dir, c.state())
}

func writeState(dir string, st *clusterState) error {
	if err := spawner.WriteState(filepath.Join(dir, stateFile), st); err != nil {
		return fmt.Errorf("writing the cluster state: %w", err)
	}
	return nil
}

func (c *Cluster) printf(format string, args ...any) {
	fmt.Fprintf(c.progress, format+"\n", args...)
}
