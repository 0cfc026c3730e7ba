package cluster

// This file holds Options, Cluster and Start, which starts the nodes'
// networks, the registry, the control plane and the nodes in that order.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/kos-sdn/kos/tools/images"
	"github.com/kos-sdn/kos/tools/lane"
	"github.com/kos-sdn/kos/tools/ovsenv"
	"github.com/kos-sdn/kos/tools/registry"
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

// registryDir is the folder in Dir of the cluster's registry: its config,
// storage, log and state.
const registryDir = "registry"

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
	// The control plane takes its binaries from the nodes' folder, so
	// the folder is asked for all of them: in a fresh cache, the build
	// adds each one missing (a demo's first cluster lacked the scheduler).
	bins, err := testenv.Binaries(cp.Components)
	if err != nil {
		return err
	}
	bins = append(bins, kubeletBinary)
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

func (c *Cluster) printf(format string, args ...any) {
	fmt.Fprintf(c.progress, format+"\n", args...)
}
