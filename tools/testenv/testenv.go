package testenv

// This file holds Options, Env and Start, which makes the working folder
// and its certificates, then starts etcd, kube-apiserver and what
// Options add to them.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"

	"github.com/kos-sdn/kos/tools/lane"
)

// Options configure Start. The zero value starts a throwaway environment in
// a new temporary folder, owned by the calling program.
type Options struct {
	// Dir is the working folder: certificates, kubeconfig, etcd data, logs,
	// pid files and the state file env.json. "" means a new temporary folder
	// that Stop removes. A folder used before keeps its certificates, its etcd
	// data and, when they are free, its ports.
	Dir string

	// BinDir holds the etcd and kube-apiserver binaries; "" means
	// $KOS_KUBE_BIN_DIR, else the folder tools/kube/build.sh builds them into.
	BinDir string

	// Detach runs the processes in a session of their own, so that they
	// outlive the caller; Attach finds them again from Dir. Without it they
	// die with the caller.
	Detach bool

	// Progress receives one line per step while starting; nil discards them.
	Progress io.Writer

	// Timeout bounds the wait for each component to become ready; 0 means
	// two minutes, which leaves room for a busy two-core machine.
	Timeout time.Duration

	// APIServerFlags are extra kube-apiserver flags, given after the
	// environment's own so that they win.
	APIServerFlags []string

	// Components names control-plane components to run besides etcd and
	// kube-apiserver: KubeControllerManager and KubeScheduler.
	// tools/kube/build.sh builds the ones missing from BinDir. Nodes are
	// tools/cluster's.
	Components []string

	// Address is where kube-apiserver listens and what it advertises; the
	// zero value means 127.0.0.1. tools/cluster sets it to the host's end
	// of the link to its node, which the host reaches as locally as
	// loopback and the node reaches through the link; the serving
	// certificate then names it too.
	Address netip.Addr

	// Kubelets readies kube-apiserver for nodes (tools/cluster): the Node
	// authorizer and NodeRestriction, a client certificate to reach
	// kubelets, whose serving certificates it checks against the CA, and
	// aggregated API servers reached at their pods' IPs.
	Kubelets bool
}

// Env is a running control plane. Its exported fields are read-only.
type Env struct {
	// Dir holds the certificates, the kubeconfig files, the etcd data and the
	// logs (etcd.log, kube-apiserver.log).
	Dir string
	// Kubeconfig is the path of an admin kubeconfig whose client certificate
	// is in the group system:masters.
	Kubeconfig string
	// RESTConfig is the admin client configuration, with QPS and burst raised
	// well above client-go's defaults. Tests share it: change a copy
	// (rest.CopyConfig), not it.
	RESTConfig *rest.Config
	// Version is the server's gitVersion, such as "v1.37.2".
	Version string
	// APIServerURL is https://127.0.0.1:<port>.
	APIServerURL string
	// EtcdURL is the client URL of the etcd kube-apiserver stores in.
	EtcdURL string
	// BinDir is the folder of the etcd and kube-apiserver binaries.
	BinDir string

	// CACertFile is the CA that signed kube-apiserver's serving certificate.
	CACertFile string
	// ClientCACertFile is the CA kube-apiserver trusts for client
	// certificates (--client-ca-file).
	ClientCACertFile string
	// RequestHeaderCACertFile is the front-proxy CA: an aggregated API server
	// trusts the identity headers of clients it signed.
	RequestHeaderCACertFile string
	// ProxyClientCertFile and ProxyClientKeyFile are the client certificate
	// kube-apiserver presents to aggregated API servers; its common name is
	// the one --requestheader-allowed-names admits.
	ProxyClientCertFile, ProxyClientKeyFile string

	mu        sync.Mutex
	procs     []*process
	comps     components
	address   netip.Addr
	kubelets  bool
	detached  bool
	removeDir bool
	stopped   bool
	timeout   time.Duration
	progress  io.Writer

	// kosBin is cmd/kos-apiserver, once built into Dir outside Main
	// (kosAPIServerBinary); kosBuildMu serialises its builds.
	kosBuildMu sync.Mutex
	kosBin     string
}

// The process names, which are also the names of their log and pid files.
const (
	etcdName      = "etcd"
	apiServerName = "kube-apiserver"
)

// serviceAccountIssuer is the issuer of service-account tokens, the usual
// in-cluster name of the API server.
const serviceAccountIssuer = "https://kubernetes.default.svc.cluster.local"

// Start starts etcd and kube-apiserver and returns once kube-apiserver is
// ready and its system namespaces exist. On failure it stops what it started
// and keeps Dir, whose logs say more than the error can.
func Start(ctx context.Context, opts Options) (*Env, error) {
	if err := lane.Require(lane.Integration, "control plane (etcd, kube-apiserver)"); err != nil {
		return nil, err
	}
	comps, err := parseComponents(opts.Components)
	if err != nil {
		return nil, err
	}
	if opts.Address.IsValid() && !opts.Address.Is4() {
		return nil, fmt.Errorf("address %s: want an IPv4 address", opts.Address)
	}
	e := &Env{
		comps:    comps,
		address:  opts.Address,
		kubelets: opts.Kubelets,
		detached: opts.Detach,
		timeout:  opts.Timeout,
		progress: opts.Progress,
	}
	if e.timeout <= 0 {
		e.timeout = 2 * time.Minute
	}
	if e.progress == nil {
		e.progress = io.Discard
	}
	if e.Dir, e.removeDir, err = WorkDir(opts.Dir); err != nil {
		return nil, err
	}
	e.setFiles()

	prev, err := readState(e.Dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if prev != nil {
		for _, p := range prev.Processes {
			if p.Running() {
				return nil, fmt.Errorf("%s (pid %d) from an earlier start still runs in %s: stop that environment first", p.Name, p.PID, e.Dir)
			}
		}
	}

	if err := e.start(ctx, opts, prev); err != nil {
		return nil, errors.Join(err, e.stopProcesses())
	}
	return e, nil
}

// WorkDir returns the absolute path of an environment's working folder:
// dir, created when missing, or, when dir is "", a new temporary folder
// that the caller removes when it stops (made is true). tools/cluster
// makes its folder so too.
func WorkDir(dir string) (path string, made bool, err error) {
	if dir == "" {
		if path, err = os.MkdirTemp("", "kos-testenv-"); err != nil {
			return "", false, fmt.Errorf("creating a working folder: %w", err)
		}
		return path, true, nil
	}
	if path, err = filepath.Abs(dir); err != nil {
		return "", false, fmt.Errorf("resolving %s: %w", dir, err)
	}
	if err := os.MkdirAll(path, 0o755); err != nil {
		return "", false, fmt.Errorf("creating the working folder: %w", err)
	}
	return path, false, nil
}

func (e *Env) setFiles() {
	e.Kubeconfig = filepath.Join(e.Dir, "kubeconfig")
	e.CACertFile = filepath.Join(e.Dir, caCertFile)
	e.ClientCACertFile = filepath.Join(e.Dir, clientCACertFile)
	e.RequestHeaderCACertFile = filepath.Join(e.Dir, frontProxyCACertFile)
	e.ProxyClientCertFile = filepath.Join(e.Dir, frontProxyClientCertFile)
	e.ProxyClientKeyFile = filepath.Join(e.Dir, frontProxyClientKeyFile)
}

func (e *Env) start(ctx context.Context, opts Options, prev *envState) error {
	began := time.Now()
	binDir, err := FindBinaries(ctx, opts.BinDir, e.comps.binaries())
	if err != nil {
		return err
	}
	e.BinDir = binDir
	e.printf("using %s from %s", strings.Join(e.comps.binaries(), ", "), binDir)

	wrote, err := ensurePKI(e.Dir)
	if err != nil {
		return fmt.Errorf("writing certificates: %w", err)
	}
	if wrote {
		e.printf("wrote new certificates to %s", e.Dir)
	} else {
		e.printf("using the certificates in %s", e.Dir)
	}
	if e.address.IsValid() {
		if err := writeAddressCerts(e.Dir, e.address, e.kubelets); err != nil {
			return err
		}
	}

	var ps ports
	etcd, err := e.startEtcd(ctx, &ps, etcdName, prev.process(etcdName), nil, false)
	if err != nil {
		return err
	}
	e.EtcdURL = etcd.URL

	if err := e.startAPIServer(ctx, &ps, opts.APIServerFlags, prev.process(apiServerName)); err != nil {
		return err
	}
	if err := e.startCluster(ctx, &ps, prev); err != nil {
		return err
	}
	if err := e.saveState(); err != nil {
		return err
	}
	e.printf("ready in %s: Kubernetes %s at %s", time.Since(began).Round(10*time.Millisecond), e.Version, e.APIServerURL)
	return nil
}

func (e *Env) printf(format string, args ...any) {
	fmt.Fprintf(e.progress, format+"\n", args...)
}
