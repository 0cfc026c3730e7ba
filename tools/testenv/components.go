package testenv

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The components Options.Components may name, each built by
// tools/kube/build.sh like kube-apiserver. Nodes (kubelet, kube-proxy) are
// tools/cluster's.
const (
	// KubeControllerManager runs every controller (garbage collection,
	// namespaces, service-account tokens, Deployments, DaemonSets, ...),
	// without leader election, signing certificate requests with the client
	// CA.
	KubeControllerManager = "kube-controller-manager"
	// KubeScheduler schedules pods.
	KubeScheduler = "kube-scheduler"
)

// The kubeconfig files of the components, relative to Env.Dir, and their
// users, as RBAC's default bindings expect them.
const (
	controllerManagerFile = "kube-controller-manager.kubeconfig"
	schedulerFile         = "kube-scheduler.kubeconfig"
	controllerManagerUser = "system:kube-controller-manager"
	schedulerUser         = "system:kube-scheduler"
)

// components says which of the cluster components an environment runs.
type components struct {
	controllerManager, scheduler bool
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
		default:
			errs = append(errs, fmt.Errorf("unknown component %q (known: %s, %s; nodes are tools/cluster's)", name, KubeControllerManager, KubeScheduler))
		}
	}
	return c, errors.Join(errs...)
}

// Binaries returns the programs an environment with Options.Components
// components runs: etcd, kube-apiserver and the components'. A caller that
// runs more programs from the same folder (tools/cluster's nodes) asks
// FindBinaries for them all at once, so that every missing one is built.
func Binaries(components []string) ([]string, error) {
	c, err := parseComponents(components)
	if err != nil {
		return nil, err
	}
	return c.binaries(), nil
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
	return bins
}

// apiServerAddress is where kube-apiserver listens: Options.Address, else
// loopback.
func (e *Env) apiServerAddress() string {
	if e.address.IsValid() {
		return e.address.String()
	}
	return "127.0.0.1"
}

// authorizationModes are kube-apiserver's authorizers: RBAC, and for
// kubelets also the Node authorizer, which gives them what their pods need.
func (e *Env) authorizationModes() string {
	if e.kubelets {
		return "Node,RBAC"
	}
	return "RBAC"
}

// apiServerClusterFlags are kube-apiserver's flags for kubelets
// (Options.Kubelets): it restricts what kubelets may change, reaches them
// by their InternalIP with a client certificate, checks their serving
// certificates, and publishes its own address as the kubernetes Service's
// endpoint, which pods reach. Aggregated API servers that run as pods are
// reached at their pods' IPs, as no kube-proxy runs on the host.
func (e *Env) apiServerClusterFlags() []string {
	if !e.kubelets {
		return nil
	}
	file := func(name string) string { return filepath.Join(e.Dir, name) }
	return []string{
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
// manager and the scheduler, each ready before the next.
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
	if e.comps.controllerManager {
		// Pods are refused in a namespace without its default
		// ServiceAccount, which the controller manager creates.
		p := e.proc(KubeControllerManager)
		client, err := kubernetes.NewForConfig(e.RESTConfig)
		if err != nil {
			return fmt.Errorf("creating a client: %w", err)
		}
		return p.WaitReady(ctx, e.timeout, func(ctx context.Context) error {
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
	if err := e.WriteKubeconfig(kubeconfig, controllerManagerUser); err != nil {
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
	if err := e.WriteKubeconfig(kubeconfig, schedulerUser); err != nil {
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
		err = p.WaitReady(ctx, e.timeout, func(ctx context.Context) error { return Healthz(ctx, url) })
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

// Healthz asks a component's /healthz at url (http or https), without
// checking its serving certificate: only the answer matters.
func Healthz(ctx context.Context, url string) error {
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

// proc returns the process of that name, or nil.
func (e *Env) proc(name string) *process {
	for _, p := range e.procs {
		if p.Name == name {
			return p
		}
	}
	return nil
}
