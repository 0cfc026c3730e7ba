package cluster

// This file brings a node up: its network, cgroup and Open vSwitch before
// kube-apiserver starts, then its containerd with the pause image, its
// kubelet, its DNS server and kube-proxy.

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kos-sdn/kos/tools/images"
	"github.com/kos-sdn/kos/tools/ovsenv"
	"github.com/kos-sdn/kos/tools/testenv"
)

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
