package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
)

// podAttachmentDeleters are the users kos-apiserver lets delete a pod's
// NetworkAttachment: its defaults (spelled out, as the API group is below),
// and the admin, as whom tests run kos-controller-manager in-process.
var podAttachmentDeleters = []string{
	"system:serviceaccount:example-com:kos-controller-manager",
	"system:serviceaccount:kube-system:generic-garbage-collector",
	"system:kube-controller-manager",
	adminUser,
}

// The KOS API group and version that kos-apiserver serves. They are spelled
// out here, not imported, so that the test environment does not depend on
// the product's API packages.
const (
	kosGroup   = "network.example.com"
	kosVersion = "v1alpha1"
)

// KOSOptions say how StartKOS starts a kos-apiserver. The zero value starts
// one named "kos", registered with the aggregator through a Service in the
// namespace example-com.
type KOSOptions struct {
	// Name tells several KOS servers of one environment apart: it names the
	// etcd (etcd-kos-<name>), the process and its log (kos-apiserver-<name>),
	// the working folder Dir/kos-<name> and the Service. "" means "kos".
	Name string

	// Namespace holds the Service that the APIService refers to; "" means
	// example-com. It is created when missing.
	Namespace string

	// DirectOnly skips the APIService: the server is reachable only through
	// DirectConfig. An environment has one APIService for the KOS group, so
	// only one of its KOS servers at a time can be the aggregated one; the
	// last one started without DirectOnly is.
	DirectOnly bool

	// ExtraArgs are more kos-apiserver flags, given last so that they win.
	// A list flag given twice adds to its list instead (--etcd-servers):
	// use EtcdServers for that.
	ExtraArgs []string

	// EtcdServers are the client URLs of an etcd the test runs, which
	// kos-apiserver then uses instead of an etcd of its own: StartKOS starts
	// none, and StopEtcd and RestartEtcd fail. EtcdTLS and EtcdFsync do not
	// apply.
	EtcdServers []string

	// EtcdTLS makes its etcd serve clients over TLS only and require a
	// client certificate, both from a CA of its own in Dir/etcd-certs;
	// kos-apiserver gets the matching --etcd-cafile, --etcd-certfile and
	// --etcd-keyfile.
	EtcdTLS bool

	// EtcdFsync makes its etcd write to disk durably, as a released
	// kos-etcd does, instead of running with --unsafe-no-fsync as test
	// etcds do: for benchmarks that compare against the storage's write
	// rate.
	EtcdFsync bool
}

// KOS is a running kos-apiserver with an etcd of its own (unless
// KOSOptions.EtcdServers named another), delegating
// authentication and authorization to the environment's kube-apiserver. Its
// exported fields are read-only.
type KOS struct {
	// Name is the name it was started with.
	Name string
	// Dir holds its certificates (Dir/certs).
	Dir string
	// URL is https://127.0.0.1:<port>, where it serves.
	URL string
	// EtcdURL is the client URL of its etcd, "" when KOSOptions.EtcdServers
	// named another.
	EtcdURL string
	// EtcdMember, EtcdPeerURL and EtcdDataDir are its etcd's --name,
	// peer URL and --data-dir, which a restore of that etcd needs.
	EtcdMember  string
	EtcdPeerURL string
	EtcdDataDir string
	// EtcdCAFile, EtcdCertFile and EtcdKeyFile are the CA and the client
	// key pair for its etcd when KOSOptions.EtcdTLS is set, else "".
	EtcdCAFile, EtcdCertFile, EtcdKeyFile string
	// CACertFile is its self-signed serving certificate, which is also the
	// CA a direct client trusts.
	CACertFile string
	// LogFile is the path of its log.
	LogFile string
	// DirectConfig is an admin client configuration (group system:masters)
	// that talks straight to kos-apiserver, as the controllers and node agents
	// do. Change a copy (rest.CopyConfig), not it.
	DirectConfig *rest.Config
	// Aggregated is true when the environment's kube-apiserver proxies the
	// KOS API group to this server: env.RESTConfig then reaches it too.
	Aggregated bool

	env       *Env
	namespace string
	service   string
	args      []string
	port      int
	// etcdTLS is nil when its etcd serves plain HTTP.
	etcdTLS *etcdTLS
	// etcdFsync is KOSOptions.EtcdFsync.
	etcdFsync bool

	mu   sync.Mutex
	proc *process
	etcd *process
}

var kosNamePattern = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// StartKOS builds cmd/kos-apiserver (once per test program under Main, else
// once per environment: see Build), starts an etcd for it (etcd-kos-<name>,
// with its data, log and pid file in Dir as StartEtcd's) unless
// opts.EtcdServers names one, starts it on a
// free loopback port and, unless opts.DirectOnly, registers it with the
// aggregator through an ExternalName Service to localhost. It returns once
// the server is ready directly and, when registered, through kube-apiserver.
// The environment's Stop stops it and its etcd.
func (e *Env) StartKOS(ctx context.Context, opts KOSOptions) (*KOS, error) {
	name := opts.Name
	if name == "" {
		name = "kos"
	}
	if !kosNamePattern.MatchString(name) {
		return nil, fmt.Errorf("KOS name %q: want lowercase letters, digits and inner dashes", name)
	}
	namespace := opts.Namespace
	if namespace == "" {
		namespace = "example-com"
	}
	bin, err := e.kosAPIServerBinary(ctx)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(e.Dir, "kos-"+name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating the folder of kos-apiserver %s: %w", name, err)
	}
	k := &KOS{
		Name:       name,
		Dir:        dir,
		CACertFile: filepath.Join(dir, "certs", "apiserver.crt"),
		env:        e,
		namespace:  namespace,
		service:    "kos-apiserver-" + name,
		etcdFsync:  opts.EtcdFsync,
	}
	if opts.EtcdTLS {
		if k.etcdTLS, err = newEtcdTLS(filepath.Join(dir, "etcd-certs")); err != nil {
			return nil, err
		}
		k.EtcdCAFile, k.EtcdCertFile, k.EtcdKeyFile = k.etcdTLS.caFile, k.etcdTLS.clientCertFile, k.etcdTLS.clientKeyFile
	}
	etcdServers := strings.Join(opts.EtcdServers, ",")
	if len(opts.EtcdServers) == 0 {
		if err := k.startEtcd(ctx); err != nil {
			return nil, err
		}
		etcdServers = k.EtcdURL
	}
	k.args = []string{
		"--bind-address=127.0.0.1",
		"--cert-dir=" + filepath.Join(dir, "certs"),
		// The aggregator checks the serving certificate against the
		// Service's DNS name.
		"--alternate-dns=" + k.service + "." + namespace + ".svc",
		"--etcd-servers=" + etcdServers,
		"--etcd-prefix=/kos",
		"--kubeconfig=" + e.Kubeconfig,
		"--authentication-kubeconfig=" + e.Kubeconfig,
		"--authorization-kubeconfig=" + e.Kubeconfig,
		"--pod-attachment-deleters=" + strings.Join(podAttachmentDeleters, ","),
		"--v=1",
	}
	if t := k.etcdTLS; t != nil {
		k.args = append(k.args, "--etcd-cafile="+t.caFile, "--etcd-certfile="+t.clientCertFile, "--etcd-keyfile="+t.clientKeyFile)
	}
	k.args = append(k.args, opts.ExtraArgs...)
	if err := k.start(ctx, bin, 0); err != nil {
		return nil, err
	}
	if !opts.DirectOnly {
		if err := k.register(ctx); err != nil {
			return nil, errors.Join(err, k.Stop())
		}
		k.Aggregated = true
	}
	return k, nil
}

// start starts the process on preferred (or a free port when that is 0 or
// taken) and waits until it answers /readyz.
func (k *KOS) start(ctx context.Context, bin string, preferred int) error {
	e := k.env
	procName := "kos-apiserver-" + k.Name
	for attempt := 1; ; attempt++ {
		var ps ports
		port, err := ps.pick(preferred)
		if err != nil {
			return err
		}
		args := append([]string{"--secure-port=" + strconv.Itoa(port)}, k.args...)
		e.mu.Lock()
		if e.stopped {
			e.mu.Unlock()
			return errors.New("the environment is stopped")
		}
		p, err := startProcess(e.Dir, procName, bin, args, e.detached)
		if err == nil {
			p.URL = "https://127.0.0.1:" + strconv.Itoa(port)
			err = e.track(p)
		}
		e.mu.Unlock()
		if err != nil {
			return err
		}
		k.mu.Lock()
		k.proc, k.port, k.URL, k.LogFile = p, port, p.URL, p.LogFile
		k.mu.Unlock()
		k.DirectConfig = k.directConfig()
		err = p.WaitReady(ctx, e.timeout, func(ctx context.Context) error {
			// The server writes its self-signed certificate as it starts,
			// and a client reads its CA file when it is made.
			if _, err := os.Stat(k.CACertFile); err != nil {
				return err
			}
			client, err := kubernetes.NewForConfig(k.DirectConfig)
			if err != nil {
				return err
			}
			return readyz(ctx, client)
		})
		if err != nil && attempt < 3 && portTaken(p) {
			_ = p.Stop(stopGrace)
			preferred = 0
			continue
		}
		if err != nil {
			return errors.Join(err, p.Stop(stopGrace))
		}
		return nil
	}
}

// directConfig is the environment's admin identity aimed at kos-apiserver,
// trusting its self-signed certificate.
func (k *KOS) directConfig() *rest.Config {
	cfg := rest.CopyConfig(k.env.RESTConfig)
	cfg.Host = k.URL
	cfg.TLSClientConfig.CAData, cfg.TLSClientConfig.CAFile = nil, k.CACertFile
	return cfg
}

// register points the KOS APIService at this server through an
// ExternalName Service to localhost (Endpoints may not hold loopback
// addresses), creating or updating both, and waits until kube-apiserver
// serves the group.
func (k *KOS) register(ctx context.Context) error {
	kube, err := kubernetes.NewForConfig(k.env.RESTConfig)
	if err != nil {
		return fmt.Errorf("creating a client: %w", err)
	}
	agg, err := aggregator.NewForConfig(k.env.RESTConfig)
	if err != nil {
		return fmt.Errorf("creating an aggregator client: %w", err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: k.namespace}}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", k.namespace, err)
	}
	port := int32(k.port)
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: k.namespace, Name: k.service},
		Spec: corev1.ServiceSpec{
			Type:         corev1.ServiceTypeExternalName,
			ExternalName: "localhost",
			Ports:        []corev1.ServicePort{{Name: "https", Port: port, Protocol: corev1.ProtocolTCP}},
		},
	}
	services := kube.CoreV1().Services(k.namespace)
	if old, err := services.Get(ctx, svc.Name, metav1.GetOptions{}); err == nil {
		old.Spec.Ports = svc.Spec.Ports
		if _, err := services.Update(ctx, old, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("updating service %s/%s: %w", k.namespace, svc.Name, err)
		}
	} else if _, err := services.Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating service %s/%s: %w", k.namespace, svc.Name, err)
	}

	caPEM, err := os.ReadFile(k.CACertFile)
	if err != nil {
		return fmt.Errorf("reading the serving certificate of kos-apiserver: %w", err)
	}
	want := apiregistrationv1.APIServiceSpec{
		Service:              &apiregistrationv1.ServiceReference{Namespace: k.namespace, Name: k.service, Port: &port},
		Group:                kosGroup,
		Version:              kosVersion,
		CABundle:             caPEM,
		GroupPriorityMinimum: 1000,
		VersionPriority:      15,
	}
	apiServices := agg.ApiregistrationV1().APIServices()
	name := kosVersion + "." + kosGroup
	if old, err := apiServices.Get(ctx, name, metav1.GetOptions{}); err == nil {
		old.Spec = want
		if _, err := apiServices.Update(ctx, old, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("updating APIService %s: %w", name, err)
		}
	} else {
		apiService := &apiregistrationv1.APIService{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: want}
		if _, err := apiServices.Create(ctx, apiService, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating APIService %s: %w", name, err)
		}
	}
	return k.waitAggregated(ctx, kube, agg)
}

// waitAggregated waits until the APIService is Available and kube-apiserver
// lists the KOS resources; the condition can turn true a moment before the
// proxy serves.
func (k *KOS) waitAggregated(ctx context.Context, kube *kubernetes.Clientset, agg *aggregator.Clientset) error {
	k.mu.Lock()
	p := k.proc
	k.mu.Unlock()
	name := kosVersion + "." + kosGroup
	return p.WaitReady(ctx, k.env.timeout, func(ctx context.Context) error {
		got, err := agg.ApiregistrationV1().APIServices().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		available := false
		for _, c := range got.Status.Conditions {
			if c.Type == apiregistrationv1.Available {
				if c.Status != apiregistrationv1.ConditionTrue {
					return fmt.Errorf("APIService %s not available: %s: %s", name, c.Reason, c.Message)
				}
				available = true
			}
		}
		if !available {
			return fmt.Errorf("APIService %s has no Available condition yet", name)
		}
		// A list through the aggregator proves the proxy path end to end.
		err = kube.CoreV1().RESTClient().Get().AbsPath("/apis", kosGroup, kosVersion, "subnets").Param("limit", "1").Do(ctx).Error()
		if err != nil {
			return fmt.Errorf("listing subnets through kube-apiserver: %w", err)
		}
		return nil
	})
}

// Running reports whether the kos-apiserver process is alive.
func (k *KOS) Running() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.proc != nil && k.proc.Running()
}

// Stop stops kos-apiserver (SIGTERM, then SIGKILL after a grace period) and
// leaves its etcd running, so that Restart finds the data again. Calling it
// on a stopped server does nothing.
func (k *KOS) Stop() error {
	k.mu.Lock()
	p := k.proc
	k.mu.Unlock()
	if p == nil {
		return nil
	}
	return p.Stop(stopGrace)
}

// Restart stops kos-apiserver when it runs and starts it again on the same
// port, certificates and etcd data, and waits as StartKOS does. When the
// port was taken meanwhile it moves to another and updates DirectConfig,
// URL and the registration.
func (k *KOS) Restart(ctx context.Context) error {
	if err := k.Stop(); err != nil {
		return err
	}
	bin, err := k.env.kosAPIServerBinary(ctx)
	if err != nil {
		return err
	}
	old := k.port
	if err := k.start(ctx, bin, old); err != nil {
		return err
	}
	if !k.Aggregated {
		return nil
	}
	if k.port != old {
		return k.register(ctx)
	}
	kube, err := kubernetes.NewForConfig(k.env.RESTConfig)
	if err != nil {
		return fmt.Errorf("creating a client: %w", err)
	}
	agg, err := aggregator.NewForConfig(k.env.RESTConfig)
	if err != nil {
		return fmt.Errorf("creating an aggregator client: %w", err)
	}
	return k.waitAggregated(ctx, kube, agg)
}

// StopEtcd stops the etcd of kos-apiserver, so that a test can change its
// data folder; RestartEtcd starts it again. kos-apiserver keeps running.
func (k *KOS) StopEtcd() error {
	k.mu.Lock()
	p := k.etcd
	k.mu.Unlock()
	if p == nil {
		return fmt.Errorf("kos-apiserver %s has no etcd of its own", k.Name)
	}
	return p.Stop(stopGrace)
}

// RestartEtcd stops the etcd of kos-apiserver when it runs and starts it
// again on the same ports, data folder and certificates, and returns once it
// is healthy. kos-apiserver keeps running and reconnects on its own; until it
// has, its requests fail.
func (k *KOS) RestartEtcd(ctx context.Context) error {
	k.mu.Lock()
	old := k.etcd
	k.mu.Unlock()
	if old == nil {
		return fmt.Errorf("kos-apiserver %s has no etcd of its own", k.Name)
	}
	if err := old.Stop(stopGrace); err != nil {
		return err
	}
	// kos-apiserver knows only this client URL, so the ports cannot move.
	p, err := k.env.runEtcd(ctx, old.Name, old.Args, old.URL, old.PeerURL, k.etcdTLS)
	if err != nil {
		return err
	}
	k.mu.Lock()
	k.etcd = p
	k.mu.Unlock()
	return nil
}

// startEtcd starts the etcd of kos-apiserver on free loopback ports and
// sets EtcdURL.
func (k *KOS) startEtcd(ctx context.Context) error {
	var ps ports
	p, err := k.env.startEtcd(ctx, &ps, "etcd-kos-"+k.Name, nil, k.etcdTLS, k.etcdFsync)
	if err != nil {
		return err
	}
	k.mu.Lock()
	k.etcd = p
	k.mu.Unlock()
	k.EtcdURL, k.EtcdPeerURL = p.URL, p.PeerURL
	k.EtcdMember, k.EtcdDataDir = p.Name, filepath.Join(k.env.Dir, p.Name)
	return nil
}

// kosAPIServerPackage is the command StartKOS runs.
const kosAPIServerPackage = "cmd/kos-apiserver"

// kosAPIServerBinary builds cmd/kos-apiserver and returns its path: once per
// test program under Main (see Build), else once per environment, into its
// folder bin, which goes with the environment.
func (e *Env) kosAPIServerBinary(ctx context.Context) (string, error) {
	bin, err := programBuild(kosAPIServerPackage)
	if !errors.Is(err, errNoMain) {
		return bin, err
	}
	e.kosBuildMu.Lock()
	defer e.kosBuildMu.Unlock()
	if e.kosBin == "" {
		if e.kosBin, err = buildInto(ctx, filepath.Join(e.Dir, "bin"), kosAPIServerPackage); err != nil {
			return "", err
		}
	}
	return e.kosBin, nil
}
