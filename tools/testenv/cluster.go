package testenv

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kos-sdn/kos/tools/images"
	"github.com/kos-sdn/kos/tools/ovsenv"
)

// The components Options.Components may name, each built by
// tools/kube/build.sh like kube-apiserver.
const (
	// KubeControllerManager runs every controller (garbage collection,
	// namespaces, service-account tokens, Deployments, DaemonSets, ...),
	// without leader election, signing certificate requests with the client
	// CA.
	KubeControllerManager = "kube-controller-manager"
	// KubeScheduler schedules pods.
	KubeScheduler = "kube-scheduler"
	// Kubelet runs a node: a network namespace of its own joined to the host
	// by a veth pair, containerd and kubelet inside it, and pods that really
	// run (with runc, the Debian CNI plugins and a locally built pause
	// image). See Options.Node and Env.Node.
	Kubelet = "kubelet"
	// KubeProxy runs kube-proxy (iptables mode) in the node's network
	// namespace, so that pods reach Services, kube-apiserver's kubernetes
	// Service among them. It needs Kubelet.
	KubeProxy = "kube-proxy"
)

// components says which of the cluster components an environment runs.
type components struct {
	controllerManager, scheduler, kubelet, proxy bool
}

func parseComponents(names []string) (components, error) {
	var c components
	var errs []error
	for _, name := range names {
		switch name {
		case KubeControllerManager:
			c.controllerManager = true
		case KubeScheduler:
			c.scheduler = true
		case Kubelet:
			c.kubelet = true
		case KubeProxy:
			c.proxy = true
		default:
			errs = append(errs, fmt.Errorf("unknown component %q (known: %s, %s, %s, %s)", name, KubeControllerManager, KubeScheduler, Kubelet, KubeProxy))
		}
	}
	if c.proxy && !c.kubelet {
		errs = append(errs, fmt.Errorf("%s runs on the node: it needs %s", KubeProxy, Kubelet))
	}
	return c, errors.Join(errs...)
}

// binaries are the programs the environment runs.
func (c components) binaries() []string {
	bins := []string{"etcd", apiServerName}
	if c.controllerManager {
		bins = append(bins, KubeControllerManager)
	}
	if c.scheduler {
		bins = append(bins, KubeScheduler)
	}
	if c.kubelet {
		bins = append(bins, Kubelet)
	}
	if c.proxy {
		bins = append(bins, KubeProxy)
	}
	return bins
}

// prepareNode settles the node's addresses and creates its network and
// cgroup, before kube-apiserver starts: kube-apiserver listens on the host's
// end of the node link, so that kubelet and pods can reach it.
func (e *Env) prepareNode(ctx context.Context, opts NodeOptions) error {
	pid, binary := selfOwner()
	n, err := joinHost(func(others []*nodeState) (*nodeState, error) {
		n, err := newNodeState(ctx, e.Dir, opts, others)
		if err != nil {
			return nil, err
		}
		n.OwnerPID, n.OwnerBinary = pid, binary
		return n, nil
	}, func(err error) { e.printf("cleaning up after an abandoned node: %v", err) })
	if err != nil {
		return err
	}
	e.node, e.Node = n, n.public()
	if err := e.saveState(); err != nil {
		return err
	}
	e.printf("node %s: network namespace %s, node IP %s, host IP %s, pods %s", n.Name, n.Netns, n.nodeIP(), n.hostIP(), n.PodCIDR)
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
		e.printf("starting Open vSwitch in %s", n.Netns)
		ovs, err := ovsenv.Start(ctx, ovsenv.Options{Dir: n.ovsDir(), Netns: n.Netns, Detach: e.detached})
		if err != nil {
			return fmt.Errorf("starting the node's Open vSwitch: %w", err)
		}
		e.ovs = ovs
	}
	return writeNodeCerts(e.Dir, n)
}

// apiServerAddress is where kube-apiserver listens: loopback, or with a
// node the host's end of the node link, which the host reaches as locally
// as loopback and the node reaches through the link.
func (e *Env) apiServerAddress() string {
	if e.node != nil {
		return e.node.hostIP().String()
	}
	return "127.0.0.1"
}

// authorizationModes are kube-apiserver's authorizers: RBAC, and for a node
// also the Node authorizer, which gives kubelets what their pods need.
func (e *Env) authorizationModes() string {
	if e.node != nil {
		return "Node,RBAC"
	}
	return "RBAC"
}

// apiServerClusterFlags are kube-apiserver's flags for the cluster
// components: it restricts what kubelets may change, reaches them
// by their InternalIP with a client certificate, checks their serving
// certificates, and publishes its own address as the kubernetes Service's
// endpoint, which pods reach. Aggregated API servers that run as pods are
// reached at their pods' IPs, as no kube-proxy runs on the host.
func (e *Env) apiServerClusterFlags() []string {
	if e.node == nil {
		return nil
	}
	file := func(name string) string { return filepath.Join(e.Dir, name) }
	return []string{
		"--tls-cert-file=" + file(nodeServingCertFile),
		"--tls-private-key-file=" + file(nodeServingKeyFile),
		"--enable-admission-plugins=NodeRestriction",
		"--endpoint-reconciler-type=lease",
		"--kubelet-client-certificate=" + file(kubeletClientCertFile),
		"--kubelet-client-key=" + file(kubeletClientKeyFile),
		"--kubelet-certificate-authority=" + file(caCertFile),
		"--kubelet-preferred-address-types=InternalIP",
		"--enable-aggregator-routing=true",
	}
}

// startCluster starts the components kube-apiserver serves: the controller
// manager, the scheduler and the node, each ready before the next.
func (e *Env) startCluster(ctx context.Context, ps *ports, prev *envState) error {
	if e.comps.controllerManager {
		if err := e.startControllerManager(ctx, ps, prev.process(KubeControllerManager)); err != nil {
			return err
		}
	}
	if e.comps.scheduler {
		if err := e.startScheduler(ctx, ps, prev.process(KubeScheduler)); err != nil {
			return err
		}
	}
	if e.comps.kubelet {
		if err := e.startNode(ctx); err != nil {
			return err
		}
	}
	if e.comps.controllerManager {
		// Pods are refused in a namespace without its default
		// ServiceAccount, which the controller manager creates.
		p := e.proc(KubeControllerManager)
		client, err := kubernetes.NewForConfig(e.RESTConfig)
		if err != nil {
			return fmt.Errorf("creating a client: %w", err)
		}
		return e.waitReady(ctx, p, func(ctx context.Context) error {
			_, err := client.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
			return err
		})
	}
	return nil
}

// startControllerManager starts kube-controller-manager with every
// controller, signing service-account tokens with the environment's key and
// certificates with the client CA (which kube-apiserver trusts).
func (e *Env) startControllerManager(ctx context.Context, ps *ports, prev *process) error {
	kubeconfig := filepath.Join(e.Dir, controllerManagerFile)
	if err := writeComponentKubeconfig(e.Dir, kubeconfig, e.APIServerURL, controllerManagerUser, nil); err != nil {
		return err
	}
	file := func(name string) string { return filepath.Join(e.Dir, name) }
	return e.startComponent(ctx, ps, KubeControllerManager, prev, func(port int) []string {
		return []string{
			"--kubeconfig=" + kubeconfig,
			"--authentication-kubeconfig=" + kubeconfig,
			"--authorization-kubeconfig=" + kubeconfig,
			"--bind-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(port),
			"--leader-elect=false",
			"--controllers=*",
			"--use-service-account-credentials=true",
			"--service-account-private-key-file=" + file(serviceAccountKeyFile),
			"--root-ca-file=" + file(caCertFile),
			"--cluster-signing-cert-file=" + file(clientCACertFile),
			"--cluster-signing-key-file=" + file(clientCAKeyFile),
		}
	})
}

// startScheduler starts kube-scheduler without leader election.
func (e *Env) startScheduler(ctx context.Context, ps *ports, prev *process) error {
	kubeconfig := filepath.Join(e.Dir, schedulerFile)
	if err := writeComponentKubeconfig(e.Dir, kubeconfig, e.APIServerURL, schedulerUser, nil); err != nil {
		return err
	}
	return e.startComponent(ctx, ps, KubeScheduler, prev, func(port int) []string {
		return []string{
			"--kubeconfig=" + kubeconfig,
			"--authentication-kubeconfig=" + kubeconfig,
			"--authorization-kubeconfig=" + kubeconfig,
			"--bind-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(port),
			"--leader-elect=false",
		}
	})
}

// startComponent starts a component that serves /healthz on a loopback port
// and waits until it is healthy, retrying on other ports when another
// program takes its port first.
func (e *Env) startComponent(ctx context.Context, ps *ports, name string, prev *process, args func(port int) []string) error {
	for attempt := 1; ; attempt++ {
		port, err := ps.pick(prev.port(false))
		if err != nil {
			return err
		}
		url := "https://127.0.0.1:" + strconv.Itoa(port)
		e.printf("starting %s on %s", name, url)
		p, err := startProcess(e.Dir, name, filepath.Join(e.BinDir, name), args(port), e.detached)
		if err != nil {
			return err
		}
		p.URL = url
		if err := e.track(p); err != nil {
			return err
		}
		err = e.waitReady(ctx, p, func(ctx context.Context) error { return healthz(ctx, url) })
		if err != nil && attempt < 3 && portTaken(p) {
			e.printf("%s lost its port to another program; retrying on another port", name)
			if err := e.stopLast(); err != nil {
				return err
			}
			prev = nil
			continue
		}
		return err
	}
}

// insecureClient asks components for their health: their serving
// certificates are self-signed, and only their answer matters.
var insecureClient = &http.Client{Transport: &http.Transport{
	TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // health checks on loopback only
}}

// healthz asks a component's /healthz.
func healthz(ctx context.Context, url string) error {
	_, err := getHealth(ctx, insecureClient, url+"/healthz")
	return err
}

// getHealth asks a health endpoint through client and returns the body of
// an OK answer.
func getHealth(ctx context.Context, client *http.Client, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("building the health request: %w", err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("asking for health: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return nil, fmt.Errorf("reading the health answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("not healthy: %s %s", resp.Status, body)
	}
	return body, nil
}

// startNode starts the node's containerd with the pause image imported and
// its kubelet, both in the node's network namespace, and waits until the
// node is Ready.
func (e *Env) startNode(ctx context.Context) error {
	n := e.node
	if err := writeCNIConfig(n); err != nil {
		return err
	}
	e.printf("starting containerd in %s", n.Netns)
	cd, err := startContainerd(ctx, ContainerdOptions{
		Dir:        n.containerdDir(),
		Netns:      n.Netns,
		CNIConfDir: n.cniConfDir(),
		Detach:     e.detached,
	})
	if err != nil {
		return err
	}
	if err := e.track(cd); err != nil {
		return err
	}
	if e.detached {
		// A detached node lives as long as its containerd.
		n.OwnerPID, n.OwnerBinary = cd.PID, cd.Binary
		if err := updateHost(n); err != nil {
			return err
		}
		if err := e.saveState(); err != nil {
			return err
		}
	}
	began := time.Now()
	if err := e.importPause(ctx); err != nil {
		return err
	}
	e.printf("built and imported the pause image in %s", time.Since(began).Round(10*time.Millisecond))

	if err := writeComponentKubeconfig(e.Dir, filepath.Join(n.NodeDir, kubeletKubeconfigFile), e.APIServerURL,
		"system:node:"+n.Name, []string{nodesGroup}); err != nil {
		return err
	}
	config, err := writeKubeletConfig(e.Dir, n)
	if err != nil {
		return err
	}
	e.printf("starting kubelet in %s", n.Netns)
	started := time.Now()
	kubelet, err := startIn(e.Dir, kubeletName, n.Netns, filepath.Join(e.BinDir, Kubelet), kubeletArgs(config, n), e.detached)
	if err != nil {
		return err
	}
	kubelet.URL = "https://" + n.nodeIP().String() + ":" + strconv.Itoa(kubeletPort)
	if err := e.track(kubelet); err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(e.RESTConfig)
	if err != nil {
		return fmt.Errorf("creating a client: %w", err)
	}
	e.printf("waiting for node %s to be Ready", n.Name)
	if err := e.waitReady(ctx, kubelet, func(ctx context.Context) error { return nodeReady(ctx, client, n.Name, started) }); err != nil {
		return err
	}
	if err := e.startNodeDNS(ctx); err != nil {
		return err
	}
	if e.comps.proxy {
		return e.startProxy(ctx)
	}
	return nil
}

// startProxy starts kube-proxy in the node's network namespace and waits
// until it has programmed the Services once.
func (e *Env) startProxy(ctx context.Context) error {
	n := e.node
	kubeconfig := filepath.Join(n.NodeDir, proxyKubeconfigFile)
	if err := writeComponentKubeconfig(e.Dir, kubeconfig, e.APIServerURL, proxyUser, nil); err != nil {
		return err
	}
	config, err := writeProxyConfig(n, kubeconfig)
	if err != nil {
		return err
	}
	e.printf("starting kube-proxy in %s", n.Netns)
	p, err := startIn(e.Dir, KubeProxy, n.Netns, filepath.Join(e.BinDir, KubeProxy), []string{"--config=" + config}, e.detached)
	if err != nil {
		return err
	}
	// Its health server listens on the node's IP, which the host reaches.
	p.URL = "http://" + net.JoinHostPort(n.nodeIP().String(), strconv.Itoa(proxyHealthzPort))
	if err := e.track(p); err != nil {
		return err
	}
	return e.waitReady(ctx, p, func(ctx context.Context) error { return healthz(ctx, p.URL) })
}

// importPause builds the pause image and imports it into the node's
// containerd, which names it as its sandbox image.
func (e *Env) importPause(ctx context.Context) error {
	dir := filepath.Join(e.node.NodeDir, "images")
	pause, err := images.Pause(ctx, images.GoOptions{OutDir: filepath.Join(dir, "bin")})
	if err != nil {
		return fmt.Errorf("building the pause image: %w", err)
	}
	tarball := filepath.Join(dir, "pause.tar")
	if err := images.Write(tarball, map[string]v1.Image{images.PauseTag: pause}); err != nil {
		return err
	}
	return e.ImportImages(ctx, tarball)
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
// into the node's containerd, where pods find them by tag.
func (e *Env) ImportImages(ctx context.Context, tarball string) error {
	if e.node == nil {
		return errors.New("the environment runs no node: start it with the kubelet component")
	}
	return images.Import(ctx, containerdSocket(e.node.containerdDir()), tarball)
}

// proc returns the process of that name, or nil.
func (e *Env) proc(name string) *process {
	for _, p := range e.procs {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// stopNode stops the node's processes: kubelet and kube-proxy first, so that
// nothing restarts pods, then the pods' processes, then containerd. The node's network
// stays until removeNode, after kube-apiserver has stopped: kube-apiserver
// listens on the node link, and its connections to itself would hang if the
// address went away under them.
func (e *Env) stopNode() error {
	n := e.node
	if n == nil {
		return nil
	}
	var errs []error
	for _, name := range []string{kubeletName, KubeProxy, nodeDNSName} {
		if p := e.proc(name); p != nil {
			errs = append(errs, p.Stop(stopGrace))
		}
	}
	if hierarchies, err := cgroupHierarchies(); err != nil {
		errs = append(errs, err)
	} else {
		errs = append(errs, killCgroup(hierarchies, n.CgroupRoot))
	}
	if p := e.proc(containerdName); p != nil {
		errs = append(errs, p.Stop(stopGrace))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("stopping node %s: %w", n.Name, err)
	}
	return nil
}

// removeNode leaves the host as the node found it: no OVS daemon, shim, mount, cgroup,
// network namespace or interface of the node remains, and the last node out
// restores the host's kernel settings and fixed paths.
func (e *Env) removeNode() error {
	n := e.node
	if n == nil {
		return nil
	}
	var errs []error
	if n.OVS {
		// Asked to exit, ovs-vswitchd removes its interfaces; cleanUp
		// kills whatever is left.
		ovs := e.ovs
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
	e.node = nil
	return nil
}
