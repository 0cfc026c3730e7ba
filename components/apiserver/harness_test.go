package apiserver_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	mathrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	kosclient "github.com/kos-sdn/kos/components/generated/clientset/versioned"
	"github.com/kos-sdn/kos/tools/testenv"
)

// startTimeout bounds the wait for a process to become ready; generous, for a
// busy two-core machine.
const startTimeout = 90 * time.Second

var (
	buildOnce sync.Once
	kosBin    string
	buildErr  error
)

// kosAPIServerBinary builds cmd/kos-apiserver once per test run, into the
// repository's git-ignored cache, and returns its path.
func kosAPIServerBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		root, err := testenv.RepoRoot()
		if err != nil {
			buildErr = err
			return
		}
		kosBin = filepath.Join(root, ".cache", "test-bin", "kos-apiserver")
		cmd := exec.Command("go", "build", "-o", kosBin, "./cmd/kos-apiserver")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("building kos-apiserver: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return kosBin
}

// freePort returns a TCP port on 127.0.0.1 below 32768, where Linux's
// ephemeral range starts, that nothing listens on right now.
func freePort(t testing.TB) int {
	t.Helper()
	for range 100 {
		port := 10000 + mathrand.IntN(32768-10000)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		l.Close()
		return port
	}
	t.Fatal("no free port below 32768 on 127.0.0.1")
	return 0
}

// process is a child program whose output goes to a log file. It gets
// SIGKILL when the test binary dies, however that happens.
type process struct {
	name    string
	bin     string
	args    []string
	logFile string

	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

func (p *process) start() error {
	log, err := os.OpenFile(p.logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("opening the log of %s: %w", p.name, err)
	}
	fmt.Fprintf(log, "=== %s %s\n", time.Now().Format(time.RFC3339Nano), strings.Join(p.args, " "))
	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("starting %s: %w", p.name, err)
	}
	p.cmd, p.done = cmd, make(chan struct{})
	go func() {
		p.err = cmd.Wait()
		log.Close()
		close(p.done)
	}()
	return nil
}

func (p *process) running() bool {
	if p.done == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// stop sends SIGTERM and waits for the exit, with SIGKILL after a grace period.
func (p *process) stop() {
	if !p.running() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// waitReady polls check until it succeeds, the process exits or the timeout
// passes; the error then carries the end of the log.
func (p *process) waitReady(ctx context.Context, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	var last error
	for {
		if last = check(ctx); last == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited (%v) before it was ready; log:\n%s", p.name, p.err, p.tail())
		case <-ctx.Done():
			return fmt.Errorf("%s not ready after %s: %v; log:\n%s", p.name, startTimeout, last, p.tail())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (p *process) tail() string {
	data, _ := os.ReadFile(p.logFile)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	return strings.Join(lines, "\n")
}

// etcdTLS holds the files of an etcd that serves clients over TLS and requires
// client certificates.
type etcdTLS struct {
	caFile, serverCertFile, serverKeyFile, clientCertFile, clientKeyFile string
}

// kosEtcd is the etcd of one kos-apiserver, separate from the main cluster's.
type kosEtcd struct {
	process
	url string
	tls *etcdTLS
}

// startKOSEtcd starts an etcd for kos-apiserver with its data in dir, from the
// binary folder of the test environment. With tls, clients must use TLS and
// present a certificate.
func startKOSEtcd(t testing.TB, dir string, tls *etcdTLS) *kosEtcd {
	t.Helper()
	clientPort, peerPort := freePort(t), freePort(t)
	scheme := "http"
	if tls != nil {
		scheme = "https"
	}
	clientURL := fmt.Sprintf("%s://127.0.0.1:%d", scheme, clientPort)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	args := []string{
		"--name=kos",
		"--data-dir=" + filepath.Join(dir, "data"),
		"--listen-client-urls=" + clientURL,
		"--advertise-client-urls=" + clientURL,
		"--listen-peer-urls=" + peerURL,
		"--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=kos=" + peerURL,
		"--unsafe-no-fsync",
		"--log-level=warn",
	}
	if tls != nil {
		args = append(args,
			"--cert-file="+tls.serverCertFile, "--key-file="+tls.serverKeyFile,
			"--trusted-ca-file="+tls.caFile, "--client-cert-auth")
	}
	e := &kosEtcd{
		process: process{name: "etcd", bin: filepath.Join(env.BinDir, "etcd"), args: args, logFile: filepath.Join(dir, "etcd.log")},
		url:     clientURL,
		tls:     tls,
	}
	e.restart(t)
	t.Cleanup(e.stop)
	return e
}

// restart starts the etcd, again after a stop, and waits until it is healthy.
func (e *kosEtcd) restart(t testing.TB) {
	t.Helper()
	if err := e.start(); err != nil {
		t.Fatal(err)
	}
	client := http.DefaultClient
	if e.tls != nil {
		c, err := rest.HTTPClientFor(&rest.Config{TLSClientConfig: rest.TLSClientConfig{
			CAFile: e.tls.caFile, CertFile: e.tls.clientCertFile, KeyFile: e.tls.clientKeyFile,
		}})
		if err != nil {
			t.Fatalf("building an etcd client: %v", err)
		}
		client = c
	}
	err := e.waitReady(context.Background(), func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.url+"/health", nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("etcd health: %s", resp.Status)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// kosServer is one kos-apiserver process with its own etcd.
type kosServer struct {
	process
	port int
	// CAFile holds the server's self-signed serving certificate chain.
	caFile string
	// direct is an admin client configuration that talks to the server
	// directly, as the controllers and agents do.
	direct *rest.Config
}

// kosServerOptions say how to start a kos-apiserver.
type kosServerOptions struct {
	// serviceDNS is the name the aggregator checks the serving certificate
	// against: <service>.<namespace>.svc.
	serviceDNS string
	// extraArgs are more flags, given last.
	extraArgs []string
}

// startKOSServer starts kos-apiserver on a free port with its files in dir,
// storing in etcd, delegating to the test environment's kube-apiserver, and
// waits until it is ready.
func startKOSServer(t testing.TB, dir string, etcd *kosEtcd, opts kosServerOptions) *kosServer {
	t.Helper()
	port := freePort(t)
	certDir := filepath.Join(dir, "certs")
	args := []string{
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + certDir,
		"--etcd-servers=" + etcd.url,
		"--etcd-prefix=/kos-test",
		"--kubeconfig=" + env.Kubeconfig,
		"--authentication-kubeconfig=" + env.Kubeconfig,
		"--authorization-kubeconfig=" + env.Kubeconfig,
		"--v=2",
	}
	if opts.serviceDNS != "" {
		args = append(args, "--alternate-dns="+opts.serviceDNS)
	}
	if etcd.tls != nil {
		args = append(args, "--etcd-cafile="+etcd.tls.caFile, "--etcd-certfile="+etcd.tls.clientCertFile, "--etcd-keyfile="+etcd.tls.clientKeyFile)
	}
	args = append(args, opts.extraArgs...)
	s := &kosServer{
		process: process{name: "kos-apiserver", bin: kosAPIServerBinary(t), args: args, logFile: filepath.Join(dir, "kos-apiserver.log")},
		port:    port,
		caFile:  filepath.Join(certDir, "apiserver.crt"),
	}
	s.restart(t)
	t.Cleanup(s.stop)
	return s
}

// restart starts the server, again after a stop, and waits until /readyz
// answers ok.
func (s *kosServer) restart(t testing.TB) {
	t.Helper()
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
	err := s.waitReady(context.Background(), func(ctx context.Context) error {
		if s.direct == nil {
			// The server writes its self-signed certificate on start.
			if _, err := os.Stat(s.caFile); err != nil {
				return err
			}
			cfg := rest.CopyConfig(env.RESTConfig)
			cfg.Host = fmt.Sprintf("https://127.0.0.1:%d", s.port)
			cfg.TLSClientConfig.CAData, cfg.TLSClientConfig.CAFile = nil, s.caFile
			s.direct = cfg
		}
		client, err := kubernetes.NewForConfig(s.direct)
		if err != nil {
			return err
		}
		body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			return fmt.Errorf("readyz: %w (%s)", err, body)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// kosClient returns a KOS clientset for cfg.
func kosClient(t testing.TB, cfg *rest.Config) *kosclient.Clientset {
	t.Helper()
	c, err := kosclient.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("creating a KOS client: %v", err)
	}
	return c
}

// registerAPIService makes the main cluster's aggregator proxy the KOS API
// group to s: an ExternalName Service to localhost (Endpoints cannot hold
// loopback addresses) and an APIService on it. It returns once the APIService
// is Available.
func registerAPIService(t testing.TB, s *kosServer, namespace, service string) {
	t.Helper()
	ctx := context.Background()
	kube, err := kubernetes.NewForConfig(env.RESTConfig)
	if err != nil {
		t.Fatalf("creating a client: %v", err)
	}
	agg, err := aggregator.NewForConfig(env.RESTConfig)
	if err != nil {
		t.Fatalf("creating an aggregator client: %v", err)
	}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating namespace %s: %v", namespace, err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: service},
		Spec: corev1.ServiceSpec{
			Type:         corev1.ServiceTypeExternalName,
			ExternalName: "localhost",
			Ports:        []corev1.ServicePort{{Name: "https", Port: int32(s.port), Protocol: corev1.ProtocolTCP}},
		},
	}
	if _, err := kube.CoreV1().Services(namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the service: %v", err)
	}
	caPEM, err := os.ReadFile(s.caFile)
	if err != nil {
		t.Fatalf("reading the serving certificate: %v", err)
	}
	port := int32(s.port)
	apiService := &apiregistrationv1.APIService{
		ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.SchemeGroupVersion.Version + "." + v1alpha1.GroupName},
		Spec: apiregistrationv1.APIServiceSpec{
			Service:              &apiregistrationv1.ServiceReference{Namespace: namespace, Name: service, Port: &port},
			Group:                v1alpha1.GroupName,
			Version:              v1alpha1.SchemeGroupVersion.Version,
			CABundle:             caPEM,
			GroupPriorityMinimum: 1000,
			VersionPriority:      15,
		},
	}
	if _, err := agg.ApiregistrationV1().APIServices().Create(ctx, apiService, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the APIService: %v", err)
	}
	t.Cleanup(func() {
		_ = agg.ApiregistrationV1().APIServices().Delete(context.Background(), apiService.Name, metav1.DeleteOptions{})
	})
	var last string
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, startTimeout, true, func(ctx context.Context) (bool, error) {
		got, err := agg.ApiregistrationV1().APIServices().Get(ctx, apiService.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range got.Status.Conditions {
			if c.Type == apiregistrationv1.Available {
				last = fmt.Sprintf("%s: %s", c.Reason, c.Message)
				return c.Status == apiregistrationv1.ConditionTrue, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("APIService %s not available: %v (last condition: %s)", apiService.Name, err, last)
	}
}

// newEtcdTLS writes a CA, a serving certificate for 127.0.0.1 and a client
// certificate into dir, for an etcd that requires TLS from its clients.
func newEtcdTLS(t testing.TB, dir string) *etcdTLS {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTemplate := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "kos-etcd-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(serial int64, name string, usage x509.ExtKeyUsage, ips []net.IP) (certPEM, keyPEM []byte) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: name},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
			IPAddresses:  ips,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
			pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	}
	serverCert, serverKey := issue(2, "kos-etcd", x509.ExtKeyUsageServerAuth, []net.IP{net.ParseIP("127.0.0.1")})
	clientCert, clientKey := issue(3, "kos-apiserver", x509.ExtKeyUsageClientAuth, nil)
	files := &etcdTLS{
		caFile:         filepath.Join(dir, "etcd-ca.crt"),
		serverCertFile: filepath.Join(dir, "etcd-server.crt"),
		serverKeyFile:  filepath.Join(dir, "etcd-server.key"),
		clientCertFile: filepath.Join(dir, "etcd-client.crt"),
		clientKeyFile:  filepath.Join(dir, "etcd-client.key"),
	}
	for path, data := range map[string][]byte{
		files.caFile:         pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		files.serverCertFile: serverCert,
		files.serverKeyFile:  serverKey,
		files.clientCertFile: clientCert,
		files.clientKeyFile:  clientKey,
	} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return files
}

// kubectl runs kubectl as the test environment's admin and returns its
// standard output.
func kubectl(t testing.TB, args ...string) string {
	t.Helper()
	cmd := exec.Command("kubectl", append([]string{"--kubeconfig=" + env.Kubeconfig}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl %s: %v\nstderr: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}
