package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kos-sdn/kos/tools/images"
	"github.com/kos-sdn/kos/tools/ovsenv"
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

	// Nodes describe the nodes, one for now: each is a network namespace of
	// its own, joined to the host by a veth pair, where containerd, kubelet
	// and the node's DNS server run. None means a control plane alone.
	Nodes []NodeOptions

	// KubeProxy runs kube-proxy (iptables mode) on every node, so that pods
	// reach Services, kube-apiserver's kubernetes Service among them.
	KubeProxy bool
}

// Cluster is a running control plane with its nodes. The embedded Env is
// the control plane; its Stop and Processes are the Cluster's own, which
// include the nodes.
type Cluster struct {
	*testenv.Env
	// Nodes are the cluster's nodes, read-only.
	Nodes []*Node

	mu        sync.Mutex
	procs     []*process
	nodes     []*nodeState
	ovs       []*ovsenv.Instance
	proxy     bool
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
}

// stateFile names the file in Dir from which Attach finds the nodes, beside
// the control plane's own.
const stateFile = "cluster.json"

// clusterState is what the state file holds.
type clusterState struct {
	Nodes     []*nodeState `json:"nodes"`
	Processes []*process   `json:"processes"`
	KubeProxy bool         `json:"kubeProxy,omitempty"`
}

// stopGrace is how long a process has to exit on SIGTERM before SIGKILL.
const stopGrace = 5 * time.Second

// Start starts the control plane and the nodes, and returns once every node
// is Ready. The nodes' networks come first: kube-apiserver listens on the
// host's end of the node link. On failure it stops what it started and
// keeps Dir, whose logs say more than the error can.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if len(opts.Nodes) > 1 {
		return nil, fmt.Errorf("%d nodes: a cluster has one node for now", len(opts.Nodes))
	}
	if opts.KubeProxy && len(opts.Nodes) == 0 {
		return nil, errors.New("kube-proxy runs on nodes: the cluster has none")
	}
	c := &Cluster{
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
	cp := opts.ControlPlane
	if cp.Dir == "" {
		dir, err := os.MkdirTemp("", "kos-testenv-")
		if err != nil {
			return nil, fmt.Errorf("creating a working folder: %w", err)
		}
		cp.Dir, c.removeDir = dir, true
	} else {
		dir, err := filepath.Abs(cp.Dir)
		if err != nil {
			return nil, fmt.Errorf("resolving %s: %w", cp.Dir, err)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("creating the working folder: %w", err)
		}
		cp.Dir = dir
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
	if err := c.start(ctx, cp, opts.Nodes); err != nil {
		return nil, errors.Join(err, c.stopAll())
	}
	return c, nil
}

func (c *Cluster) start(ctx context.Context, cp testenv.Options, nodes []NodeOptions) error {
	if len(nodes) == 0 {
		env, err := testenv.Start(ctx, cp)
		c.Env = env
		return err
	}
	bins := []string{kubeletBinary}
	if c.proxy {
		bins = append(bins, proxyBinary)
	}
	binDir, err := testenv.FindBinaries(ctx, cp.BinDir, bins)
	if err != nil {
		return err
	}
	for _, opts := range nodes {
		if err := c.prepareNode(ctx, cp.Dir, opts); err != nil {
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
	for _, n := range c.nodes {
		if err := c.startNode(ctx, n); err != nil {
			return err
		}
	}
	return c.saveState()
}

// prepareNode settles a node's addresses and creates its network and
// cgroup, before kube-apiserver starts.
func (c *Cluster) prepareNode(ctx context.Context, dir string, opts NodeOptions) error {
	pid, binary := selfOwner()
	n, err := joinHost(func(others []*nodeState) (*nodeState, error) {
		n, err := newNodeState(ctx, dir, opts, others)
		if err != nil {
			return nil, err
		}
		n.OwnerPID, n.OwnerBinary = pid, binary
		return n, nil
	}, func(err error) { c.printf("cleaning up after an abandoned node: %v", err) })
	if err != nil {
		return err
	}
	c.nodes = append(c.nodes, n)
	c.Nodes = append(c.Nodes, n.public())
	if err := writeState(dir, c.state()); err != nil {
		return err
	}
	c.printf("node %s: network namespace %s, node IP %s, host IP %s, pods %s", n.Name, n.Netns, n.nodeIP(), n.hostIP(), n.PodCIDR)
	if err := n.forgetRuntimeState(); err != nil {
		return err
	}
	if err := n.setUpNetwork(ctx); err != nil {
		return err
	}
	if err := createCgroup(n.CgroupRoot); err != nil {
		return err
	}
	if n.OVS {
		c.printf("starting Open vSwitch in %s", n.Netns)
		ovs, err := ovsenv.Start(ctx, ovsenv.Options{Dir: n.ovsDir(), Netns: n.Netns, Detach: c.detached})
		if err != nil {
			return fmt.Errorf("starting the node's Open vSwitch: %w", err)
		}
		c.ovs = append(c.ovs, ovs)
	}
	if err := os.MkdirAll(n.NodeDir, 0o755); err != nil {
		return fmt.Errorf("creating the node's folder: %w", err)
	}
	return nil
}

// startNode starts the node's containerd with the pause image imported and
// its kubelet, both in the node's network namespace, waits until the node
// is Ready, then starts its DNS server and kube-proxy.
func (c *Cluster) startNode(ctx context.Context, n *nodeState) error {
	if err := writeCNIConfig(n); err != nil {
		return err
	}
	c.printf("starting containerd in %s", n.Netns)
	cd, err := startContainerd(ctx, ContainerdOptions{
		Dir:        n.containerdDir(),
		Netns:      n.Netns,
		CNIConfDir: n.cniConfDir(),
		Detach:     c.detached,
	})
	if err != nil {
		return err
	}
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
	c.printf("starting kubelet in %s", n.Netns)
	started := time.Now()
	kubelet, err := startIn(c.Dir, kubeletName, n.Netns, filepath.Join(c.BinDir, kubeletBinary), kubeletArgs(config, n), c.detached)
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
	if err := c.waitReady(ctx, kubelet, func(ctx context.Context) error { return nodeReady(ctx, client, n.Name, started) }); err != nil {
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
	c.printf("starting kube-proxy in %s", n.Netns)
	p, err := startIn(c.Dir, proxyName, n.Netns, filepath.Join(c.BinDir, proxyBinary), []string{"--config=" + config}, c.detached)
	if err != nil {
		return err
	}
	// Its health server listens on the node's IP, which the host reaches.
	p.URL = "http://" + net.JoinHostPort(n.nodeIP().String(), strconv.Itoa(proxyHealthzPort))
	if err := c.track(p); err != nil {
		return err
	}
	return c.waitReady(ctx, p, func(ctx context.Context) error { return testenv.Healthz(ctx, p.URL) })
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

// writeCNIConfig writes the node's network configuration: a bridge in the
// node's namespace, the pods' gateway, with addresses from host-local, kept
// in the node's folder. containerd adds the loopback interface itself.
func writeCNIConfig(n *nodeState) error {
	gateway := n.PodCIDR.Addr().Next()
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       "kos-node",
		"plugins": []any{
			map[string]any{
				"type":        "bridge",
				"bridge":      "cni0",
				"isGateway":   true,
				"ipMasq":      false,
				"hairpinMode": true,
				"ipam": map[string]any{
					"type":    "host-local",
					"ranges":  [][]map[string]string{{{"subnet": n.PodCIDR.String(), "gateway": gateway.String()}}},
					"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
					"dataDir": filepath.Join(n.NodeDir, "ipam"),
				},
			},
		},
	}
	data, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the CNI configuration: %w", err)
	}
	if err := os.MkdirAll(n.cniConfDir(), 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", n.cniConfDir(), err)
	}
	if err := os.WriteFile(filepath.Join(n.cniConfDir(), "10-kos-node.conflist"), append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing the CNI configuration: %w", err)
	}
	return nil
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

// waitReady polls check until it succeeds, the process exits, ctx ends or
// the cluster's timeout passes. Its errors name the log to read.
func (c *Cluster) waitReady(ctx context.Context, p *process, check func(context.Context) error) error {
	deadline := time.Now().Add(c.timeout)
	for {
		if !p.Running() {
			return fmt.Errorf("%s exited while starting (%v); the end of its log %s:\n%s",
				p.Name, p.ExitError(), p.LogFile, p.LogTail(15))
		}
		checkCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := check(checkCtx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s (last check: %v); see its log %s", p.Name, c.timeout, err, p.LogFile)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", p.Name, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// track adds a started process to the cluster and records it in the state
// file at once, so that a detached process whose starter is killed half-way
// can still be found and stopped.
func (c *Cluster) track(p *process) error {
	c.procs = append(c.procs, p)
	return c.saveState()
}

// proc returns the process of that name, or nil.
func (c *Cluster) proc(name string) *process {
	for _, p := range c.procs {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// Stop stops the nodes' processes, then the control plane, then removes the
// nodes' networks (kube-apiserver listens on a node link, and its
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
	if c.Env != nil {
		errs = append(errs, c.Env.Stop())
	}
	for i, n := range c.nodes {
		var ovs *ovsenv.Instance
		if i < len(c.ovs) {
			ovs = c.ovs[i]
		}
		errs = append(errs, removeNode(n, ovs))
	}
	return errors.Join(errs...)
}

// stopNode stops the node's processes: kubelet and kube-proxy first, so that
// nothing restarts pods, then the pods' processes, then containerd.
func (c *Cluster) stopNode(n *nodeState) error {
	var errs []error
	for _, name := range []string{kubeletName, proxyName, nodeDNSName} {
		if p := c.proc(name); p != nil {
			errs = append(errs, p.Stop(stopGrace))
		}
	}
	if hierarchies, err := cgroupHierarchies(); err != nil {
		errs = append(errs, err)
	} else {
		errs = append(errs, killCgroup(hierarchies, n.CgroupRoot))
	}
	if p := c.proc(containerdName); p != nil {
		errs = append(errs, p.Stop(stopGrace))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("stopping node %s: %w", n.Name, err)
	}
	return nil
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
// then the nodes', each in start order.
func (c *Cluster) Processes() []testenv.ProcessStatus {
	out := c.Env.Processes()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.procs {
		out = append(out, testenv.ProcessStatus{Name: p.Name, PID: p.PID, URL: p.URL, LogFile: p.LogFile, Running: p.Running()})
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
	c := &Cluster{Env: env, timeout: 2 * time.Minute, progress: io.Discard, detached: true}
	st, err := readState(env.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return nil, err
	}
	c.nodes, c.procs, c.proxy = st.Nodes, st.Processes, st.KubeProxy
	for _, n := range c.nodes {
		c.Nodes = append(c.Nodes, n.public())
	}
	return c, nil
}

func readState(dir string) (*clusterState, error) {
	data, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		return nil, fmt.Errorf("reading the cluster state: %w", err)
	}
	var st clusterState
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("parsing %s: %w", filepath.Join(dir, stateFile), err)
	}
	return &st, nil
}

func (c *Cluster) state() *clusterState {
	return &clusterState{Nodes: c.nodes, Processes: c.procs, KubeProxy: c.proxy}
}

func (c *Cluster) saveState() error {
	return writeState(c.Dir, c.state())
}

func writeState(dir string, st *clusterState) error {
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the cluster state: %w", err)
	}
	// Written whole and renamed, so that a reader never sees half of it.
	tmp := filepath.Join(dir, stateFile+".tmp")
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing the cluster state: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, stateFile)); err != nil {
		return fmt.Errorf("writing the cluster state: %w", err)
	}
	return nil
}

func (c *Cluster) printf(format string, args ...any) {
	fmt.Fprintf(c.progress, format+"\n", args...)
}
