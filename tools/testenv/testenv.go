package testenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kos-sdn/kos/tools/lane"
	"github.com/kos-sdn/kos/tools/spawner"
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

// stateFile names the file in Dir from which Attach finds an environment.
const stateFile = "env.json"

// envState is what the state file holds.
type envState struct {
	Version      string     `json:"version"`
	APIServerURL string     `json:"apiServerURL"`
	EtcdURL      string     `json:"etcdURL"`
	BinDir       string     `json:"binDir"`
	Detached     bool       `json:"detached"`
	Processes    []*process `json:"processes"`
	Address      netip.Addr `json:"address,omitzero"`
	Kubelets     bool       `json:"kubelets,omitempty"`
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

// startAPIServer starts kube-apiserver on the environment's etcd, waits until
// it is ready, and fills in the client side of the Env.
func (e *Env) startAPIServer(ctx context.Context, ps *ports, extraFlags []string, prev *process) error {
	admin, err := loadKeyPair(filepath.Join(e.Dir, adminCertFile), filepath.Join(e.Dir, adminKeyFile))
	if err != nil {
		return fmt.Errorf("loading the admin certificate: %w", err)
	}
	caPEM, err := os.ReadFile(e.CACertFile)
	if err != nil {
		return fmt.Errorf("reading the CA certificate: %w", err)
	}
	file := func(name string) string { return filepath.Join(e.Dir, name) }
	for attempt := 1; ; attempt++ {
		port, err := ps.pick(prev.port(false))
		if err != nil {
			return err
		}
		addr := e.apiServerAddress()
		url := "https://" + addr + ":" + strconv.Itoa(port)
		servingCert, servingKey := file(servingCertFile), file(servingKeyFile)
		if e.address.IsValid() {
			servingCert, servingKey = file(addressServingCertFile), file(addressServingKeyFile)
		}
		args := []string{
			"--etcd-servers=" + e.EtcdURL,
			"--bind-address=" + addr,
			"--advertise-address=" + addr,
			"--secure-port=" + strconv.Itoa(port),
			"--tls-cert-file=" + servingCert,
			"--tls-private-key-file=" + servingKey,
			"--client-ca-file=" + file(clientCACertFile),
			"--authorization-mode=" + e.authorizationModes(),
			"--service-account-issuer=" + serviceAccountIssuer,
			"--service-account-key-file=" + file(serviceAccountPubFile),
			"--service-account-signing-key-file=" + file(serviceAccountKeyFile),
			"--service-cluster-ip-range=" + ServiceCIDR.String(),
			// Endpoints may not hold the loopback address it advertises.
			"--endpoint-reconciler-type=none",
			"--allow-privileged=true",
			"--requestheader-client-ca-file=" + file(frontProxyCACertFile),
			"--requestheader-allowed-names=" + frontProxyClientName,
			"--requestheader-username-headers=X-Remote-User",
			"--requestheader-group-headers=X-Remote-Group",
			"--requestheader-extra-headers-prefix=X-Remote-Extra-",
			"--proxy-client-cert-file=" + file(frontProxyClientCertFile),
			"--proxy-client-key-file=" + file(frontProxyClientKeyFile),
		}
		// Later flags win: the cluster's replace some of the above.
		args = append(args, e.apiServerClusterFlags()...)
		args = append(args, extraFlags...)
		e.printf("starting %s on %s", apiServerName, url)
		p, err := startProcess(e.Dir, apiServerName, filepath.Join(e.BinDir, apiServerName), args, e.detached)
		if err != nil {
			return err
		}
		p.URL = url
		if err := e.track(p); err != nil {
			return err
		}
		e.APIServerURL = url
		e.RESTConfig = newRESTConfig(url, caPEM, admin.CertPEM, admin.KeyPEM)
		client, err := kubernetes.NewForConfig(e.RESTConfig)
		if err != nil {
			return fmt.Errorf("creating a client: %w", err)
		}
		e.printf("waiting for %s to be ready", apiServerName)
		err = p.WaitReady(ctx, e.timeout, func(ctx context.Context) error { return readyz(ctx, client) })
		if err != nil && attempt < 3 && portTaken(p) {
			e.printf("%s lost its port to another program; retrying on another port", apiServerName)
			if err := e.stopLast(); err != nil {
				return err
			}
			prev = nil
			continue
		}
		if err != nil {
			return err
		}
		// Readiness does not wait for the system namespaces, and tests
		// write into kube-system at once.
		err = p.WaitReady(ctx, e.timeout, func(ctx context.Context) error {
			for _, ns := range []string{metav1.NamespaceDefault, metav1.NamespaceSystem, metav1.NamespacePublic} {
				if _, err := client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		info, err := client.Discovery().ServerVersion()
		if err != nil {
			return fmt.Errorf("reading the server version: %w", err)
		}
		e.Version = info.GitVersion
		return writeKubeconfig(e.Kubeconfig, url, caPEM, admin.CertPEM, admin.KeyPEM, adminUser)
	}
}

// portTaken reports whether p died because its port was in use.
func portTaken(p *process) bool {
	return !p.Running() && strings.Contains(spawner.Tail(p.LogFile, 30), "address already in use")
}

// readyz asks kube-apiserver's /readyz.
func readyz(ctx context.Context, client kubernetes.Interface) error {
	body, err := client.CoreV1().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("/readyz: %w: %s", err, lastLines(string(body), 3))
	}
	return nil
}

// lastLines keeps the end of a long body, where /readyz lists what failed.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "; ")
}

// Ready returns nil when kube-apiserver answers /readyz with success.
func (e *Env) Ready(ctx context.Context) error {
	if !e.running(apiServerName) {
		return fmt.Errorf("%s is not running", apiServerName)
	}
	client, err := kubernetes.NewForConfig(e.RESTConfig)
	if err != nil {
		return fmt.Errorf("creating a client: %w", err)
	}
	return readyz(ctx, client)
}

var etcdNamePattern = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// StartEtcd starts another etcd, named etcd-<name> in Dir (data, log and pid
// file), on free loopback ports, and returns its client URL once it is
// healthy. Stop stops it with the rest.
func (e *Env) StartEtcd(ctx context.Context, name string) (string, error) {
	if !etcdNamePattern.MatchString(name) {
		return "", fmt.Errorf("etcd name %q: want lowercase letters, digits and inner dashes", name)
	}
	var ps ports
	p, err := e.startEtcd(ctx, &ps, etcdName+"-"+name, nil, nil, false)
	if err != nil {
		return "", err
	}
	return p.URL, nil
}

// running reports whether the process of that name runs.
func (e *Env) running(name string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, p := range e.procs {
		if p.Name == name {
			return p.Running()
		}
	}
	return false
}

// track adds a started process to the environment and records it in the
// state file at once, so that a detached process whose starter is killed
// half-way can still be found and stopped.
func (e *Env) track(p *process) error {
	e.procs = append(e.procs, p)
	return e.saveState()
}

// stopLast stops the most recently started process after a failed start.
func (e *Env) stopLast() error {
	if len(e.procs) == 0 {
		return nil
	}
	p := e.procs[len(e.procs)-1]
	e.procs = e.procs[:len(e.procs)-1]
	return p.Stop(stopGrace)
}

// stopGrace is how long a process has to exit on SIGTERM before SIGKILL.
const stopGrace = 5 * time.Second

// Stop stops every process of the environment, kube-apiserver before the
// etcds it writes to, and removes Dir when Start made it. Calling it again
// does nothing.
func (e *Env) Stop() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped {
		return nil
	}
	e.stopped = true
	if err := e.stopProcesses(); err != nil {
		return err
	}
	if e.removeDir {
		if err := os.RemoveAll(e.Dir); err != nil {
			return fmt.Errorf("removing the working folder: %w", err)
		}
	}
	return nil
}

func (e *Env) stopProcesses() error {
	// kube-apiserver's clients, then kube-apiserver, and the etcds it
	// writes to last.
	var errs []error
	first := []string{KubeScheduler, KubeControllerManager, apiServerName}
	for _, name := range first {
		for _, p := range e.procs {
			if p.Name == name {
				errs = append(errs, p.Stop(stopGrace))
			}
		}
	}
	var etcds []*process
	for _, p := range e.procs {
		if !slices.Contains(first, p.Name) {
			etcds = append(etcds, p)
		}
	}
	var wg sync.WaitGroup
	etcdErrs := make([]error, len(etcds))
	for i, p := range etcds {
		wg.Go(func() { etcdErrs[i] = p.Stop(stopGrace) })
	}
	wg.Wait()
	errs = append(errs, etcdErrs...)
	return errors.Join(errs...)
}

// ProcessStatus describes one process of an environment.
type ProcessStatus struct {
	// Name is the process's name, such as etcd or kube-apiserver.
	Name string
	// PID is its process id.
	PID int
	// URL is where it serves.
	URL string
	// LogFile is the path of its log.
	LogFile string
	// Running says whether it is alive.
	Running bool
}

// Processes describes the processes of the environment, in start order.
func (e *Env) Processes() []ProcessStatus {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]ProcessStatus, 0, len(e.procs))
	for _, p := range e.procs {
		out = append(out, ProcessStatus{Name: p.Name, PID: p.PID, URL: p.URL, LogFile: p.LogFile, Running: p.Running()})
	}
	return out
}

// Attach returns the environment an earlier Start left in dir, typically a
// detached one, so that another program can inspect or stop it. Its
// processes may have stopped since: see Processes. It fails with an error
// matching os.ErrNotExist when dir holds no environment.
func Attach(dir string) (*Env, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("resolving %s: %w", dir, err)
	}
	st, err := readState(abs)
	if err != nil {
		return nil, err
	}
	e := &Env{
		Dir:          abs,
		Version:      st.Version,
		APIServerURL: st.APIServerURL,
		EtcdURL:      st.EtcdURL,
		BinDir:       st.BinDir,
		procs:        st.Processes,
		address:      st.Address,
		kubelets:     st.Kubelets,
		detached:     st.Detached,
		timeout:      2 * time.Minute,
		progress:     io.Discard,
	}
	e.setFiles()
	if e.RESTConfig, err = loadRESTConfig(e.Kubeconfig); err != nil {
		return nil, err
	}
	return e, nil
}

func readState(dir string) (*envState, error) {
	var st envState
	if err := spawner.ReadState(filepath.Join(dir, stateFile), &st); err != nil {
		return nil, fmt.Errorf("reading the environment state: %w", err)
	}
	return &st, nil
}

func (e *Env) saveState() error {
	err := spawner.WriteState(filepath.Join(e.Dir, stateFile), envState{
		Version:      e.Version,
		APIServerURL: e.APIServerURL,
		EtcdURL:      e.EtcdURL,
		BinDir:       e.BinDir,
		Detached:     e.detached,
		Processes:    e.procs,
		Address:      e.address,
		Kubelets:     e.kubelets,
	})
	if err != nil {
		return fmt.Errorf("writing the environment state: %w", err)
	}
	return nil
}

// process returns the process of that name from an earlier start, or nil.
func (st *envState) process(name string) *process {
	if st == nil {
		return nil
	}
	for _, p := range st.Processes {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// port returns the client (or peer) port an earlier start used, or 0.
func (p *process) port(peer bool) int {
	switch {
	case p == nil:
		return 0
	case peer:
		return urlPort(p.PeerURL)
	default:
		return urlPort(p.URL)
	}
}

func (e *Env) printf(format string, args ...any) {
	fmt.Fprintf(e.progress, format+"\n", args...)
}
