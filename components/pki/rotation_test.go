package pki_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kos-sdn/kos/components/pki"
	"github.com/kos-sdn/kos/tools/testenv"
)

// Lifetimes of the rotation test: a leaf lasts 24 s and is re-issued 10 s
// before it expires (the margin the servers have to read a renewed one), so
// every 14 s, and the test sees at least three rotations of each in 50 s.
const (
	rotationValidity    = 24 * time.Second
	rotationRenewBefore = 10 * time.Second
	rotationRun         = 50 * time.Second
)

// TestIntegrationRotation runs the signer (kos-pki run) with short-lived
// leaves against real servers: an etcd with client certificates required
// and kos-apiserver on its serving certificate and its etcd client
// certificate. The Secrets reach the servers as a kubelet's Secret volumes
// do (every key a symlink into a data folder swapped at once), and neither
// server restarts. A client makes a request on a new TLS connection every
// few milliseconds all along, and must never see an error while it sees
// kos-apiserver's serving certificate change. Half-way, after the first etcd
// client certificate has expired, the connections between kos-apiserver and
// etcd are cut (the client waits meanwhile): kos-apiserver can only go on by
// dialing again with its renewed certificate, which etcd reads per
// handshake, as kos-apiserver reads etcd's renewed server certificate.
func TestIntegrationRotation(t *testing.T) {
	env := testenv.Shared(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kosBin := testenv.Build(t, "cmd/kos-apiserver")
	ns := newNamespace(t)
	ports := freePorts(t, 4)
	etcdPort, peerPort, proxyPort, apiPort := ports[0], ports[1], ports[2], ports[3]

	leaves, err := pki.SetAll.Leaves(ns)
	if err != nil {
		t.Fatal(err)
	}
	run, err := pki.EnsureConfig{REST: env.RESTConfig, Namespace: ns, Leaves: leaves, LeafValidity: rotationValidity, RenewBefore: rotationRenewBefore}.Complete().New()
	if err != nil {
		t.Fatal(err)
	}
	var signerOut syncBuffer
	signer := &pki.Signer{Run: run, Interval: time.Minute, Metrics: pki.NewSignerMetrics(), Out: &signerOut}
	if _, err := signer.Pass(ctx); err != nil {
		t.Fatalf("the first pass: %v", err)
	}
	signed := make(chan struct{})
	go func() {
		defer close(signed)
		_ = signer.Loop(ctx)
	}()
	defer func() { cancel(); <-signed }()

	dir := t.TempDir()
	volumes := &secretVolumes{dir: dir, client: kubeClient(t, env.RESTConfig), ns: ns}
	volumes.sync(t)
	projected := make(chan struct{})
	go func() {
		defer close(projected)
		for ctx.Err() == nil {
			volumes.sync(t)
			time.Sleep(200 * time.Millisecond)
		}
	}()
	defer func() { cancel(); <-projected }()
	file := func(secret, key string) string { return filepath.Join(dir, secret, key) }

	etcdURL := "https://127.0.0.1:" + strconv.Itoa(etcdPort)
	name := "pki-rot-etcd-" + ns
	peerURL := "https://127.0.0.1:" + strconv.Itoa(peerPort)
	err = env.StartProcess(ctx, name, filepath.Join(env.BinDir, "etcd"), []string{
		"--name=" + name,
		"--data-dir=" + filepath.Join(env.Dir, name),
		"--listen-client-urls=" + etcdURL,
		"--advertise-client-urls=" + etcdURL,
		"--listen-peer-urls=" + peerURL,
		"--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=" + name + "=" + peerURL,
		"--cert-file=" + file(pki.EtcdServerSecret, corev1.TLSCertKey),
		"--key-file=" + file(pki.EtcdServerSecret, corev1.TLSPrivateKeyKey),
		"--trusted-ca-file=" + file(pki.EtcdServerSecret, pki.CACertKey),
		"--client-cert-auth",
		"--peer-cert-file=" + file(pki.EtcdPeerSecret, corev1.TLSCertKey),
		"--peer-key-file=" + file(pki.EtcdPeerSecret, corev1.TLSPrivateKeyKey),
		"--peer-trusted-ca-file=" + file(pki.EtcdPeerSecret, pki.CACertKey),
		"--peer-client-cert-auth",
		"--unsafe-no-fsync",
		"--log-level=error",
	}, func(ctx context.Context) error {
		return etcdHealthy(ctx, httpsClient(t, file(pki.EtcdClientSecret, corev1.TLSCertKey), file(pki.EtcdClientSecret, corev1.TLSPrivateKeyKey), file(pki.CASecret, pki.CACertKey)), etcdURL)
	})
	if err != nil {
		t.Fatalf("starting etcd: %v", err)
	}
	proxy := startProxy(t, "127.0.0.1:"+strconv.Itoa(proxyPort), "127.0.0.1:"+strconv.Itoa(etcdPort))

	apiURL := "https://127.0.0.1:" + strconv.Itoa(apiPort)
	direct := rest.CopyConfig(env.RESTConfig)
	direct.Host = apiURL
	direct.TLSClientConfig.CAData, direct.TLSClientConfig.CAFile = nil, file(pki.CASecret, pki.CACertKey)
	direct.TLSClientConfig.ServerName = "kos-apiserver." + ns + ".svc"
	tlsConfig, err := rest.TLSConfigFor(direct)
	if err != nil {
		t.Fatal(err)
	}
	// A new connection, so a new handshake, for every request.
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig, DisableKeepAlives: true}}
	err = env.StartProcess(ctx, "pki-rot-kos-apiserver-"+ns, kosBin, []string{
		"--secure-port=" + strconv.Itoa(apiPort),
		"--bind-address=127.0.0.1",
		"--tls-cert-file=" + file(pki.APIServerServingSecret, corev1.TLSCertKey),
		"--tls-private-key-file=" + file(pki.APIServerServingSecret, corev1.TLSPrivateKeyKey),
		"--etcd-servers=https://localhost:" + strconv.Itoa(proxyPort),
		"--etcd-cafile=" + file(pki.EtcdClientSecret, pki.CACertKey),
		"--etcd-certfile=" + file(pki.EtcdClientSecret, corev1.TLSCertKey),
		"--etcd-keyfile=" + file(pki.EtcdClientSecret, corev1.TLSPrivateKeyKey),
		"--kubeconfig=" + env.Kubeconfig,
		"--authentication-kubeconfig=" + env.Kubeconfig,
		"--authorization-kubeconfig=" + env.Kubeconfig,
		"--agent-identities=",
	}, func(ctx context.Context) error {
		_, err := request(ctx, client, http.MethodGet, apiURL+"/readyz", nil)
		return err
	})
	if err != nil {
		t.Fatalf("starting kos-apiserver: %v", err)
	}

	// The client: a subnet created, then listed, over and over.
	subnets := apiURL + "/apis/network.example.com/v1alpha1/namespaces/" + ns + "/subnets"
	var (
		paused                sync.RWMutex
		requests, failures    atomic.Int64
		servingSerials        sync.Map
		firstFailure          atomic.Value
		clientDone            = make(chan struct{})
		clientCtx, stopClient = context.WithCancel(ctx)
	)
	go func() {
		defer close(clientDone)
		for i := 0; clientCtx.Err() == nil; i++ {
			paused.RLock()
			var body []byte
			method, url := http.MethodGet, subnets
			if i%2 == 0 {
				method = http.MethodPost
				// A VNI and a range of its own: no conflicts.
				body = fmt.Appendf(nil, `{"apiVersion":"network.example.com/v1alpha1","kind":"Subnet","metadata":{"name":"s%d"},"spec":{"ipv4":"10.%d.%d.0/24","vni":%d}}`, i, i/256%256, i%256, 1+i)
			}
			serial, err := request(clientCtx, client, method, url, body)
			paused.RUnlock()
			if clientCtx.Err() != nil {
				return
			}
			requests.Add(1)
			if err != nil {
				if failures.Add(1) == 1 {
					firstFailure.Store(fmt.Sprintf("%s %s: %v", method, url, err))
				}
				continue
			}
			servingSerials.Store(serial, true)
		}
	}()

	began := time.Now()
	// Cut kos-apiserver's etcd connections once its first client
	// certificate has expired.
	time.Sleep(rotationValidity + rotationRenewBefore/2)
	paused.Lock()
	cut := proxy.cut()
	cutAt := time.Since(began)
	paused.Unlock()
	time.Sleep(time.Until(began.Add(rotationRun)))
	stopClient()
	<-clientDone

	serials := 0
	servingSerials.Range(func(any, any) bool { serials++; return true })
	renewals := map[string]float64{}
	for _, l := range leaves {
		renewals[l.Secret] = testutil.ToFloat64(signer.Metrics.Renewals.WithLabelValues(ns, l.Secret))
	}
	t.Logf("%d requests in %s, %d failed; kos-apiserver served %d different certificates; etcd connections cut at %s: %d; renewals: %v",
		requests.Load(), rotationRun, failures.Load(), serials, cutAt.Round(time.Second), cut, renewals)
	if f := failures.Load(); f > 0 {
		t.Errorf("the client saw %d errors, the first: %v", f, firstFailure.Load())
	}
	// 50 s at a renewal every 14 s: at least 3 renewals of each leaf.
	for secret, n := range renewals {
		if n < 3 {
			t.Errorf("secret %s renewed %v times in %s, want at least 3", secret, n, rotationRun)
		}
	}
	if serials < 3 {
		t.Errorf("the client saw %d serving certificates, want at least 3: kos-apiserver did not pick up renewed ones", serials)
	}
	if cut == 0 {
		t.Errorf("no etcd connection was cut: the test proved nothing about the etcd client certificate")
	}
	if proxy.accepted() <= cut {
		t.Errorf("kos-apiserver made no new etcd connection after the cut")
	}
	expiry := testutil.ToFloat64(signer.Metrics.Expiry.WithLabelValues(ns, pki.APIServerServingSecret))
	if left := time.Until(time.Unix(int64(expiry), 0)); left <= 0 || left > rotationValidity {
		t.Errorf("kos_certificate_expiry_timestamp_seconds of %s is %v, %s from now; want within %s", pki.APIServerServingSecret, expiry, left, rotationValidity)
	}
	if t.Failed() {
		t.Logf("signer output:\n%s", signerOut.String())
	}
}

// request makes one request and returns the serial number of the server's
// certificate; a status other than 2xx is an error.
func request(ctx context.Context, client *http.Client, method, url string, body []byte) (string, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode/100 != 2 {
		return "", fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(data)))
	}
	if resp.TLS == nil || len(resp.TLS.PeerCertificates) == 0 {
		return "", nil
	}
	return resp.TLS.PeerCertificates[0].SerialNumber.String(), nil
}

// secretVolumes writes the Secrets of a namespace as the kubelet's Secret
// volumes do: dir/<secret>/<key> is a symlink to ..data/<key>, and ..data a
// symlink to a folder of the version, replaced by one rename; the old
// folder is then removed.
type secretVolumes struct {
	dir      string
	client   kubernetes.Interface
	ns       string
	versions map[string]string
	n        int
}

func (v *secretVolumes) sync(t testing.TB) {
	list, err := v.client.CoreV1().Secrets(v.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Logf("listing secrets: %v", err)
		return
	}
	if v.versions == nil {
		v.versions = map[string]string{}
	}
	for _, s := range list.Items {
		if v.versions[s.Name] == s.ResourceVersion {
			continue
		}
		if err := v.write(&s); err != nil {
			t.Errorf("projecting secret %s: %v", s.Name, err)
			continue
		}
		v.versions[s.Name] = s.ResourceVersion
	}
}

func (v *secretVolumes) write(s *corev1.Secret) error {
	vol := filepath.Join(v.dir, s.Name)
	v.n++
	version := fmt.Sprintf("..%d", v.n)
	if err := os.MkdirAll(filepath.Join(vol, version), 0o755); err != nil {
		return err
	}
	for k, data := range s.Data {
		if k == pki.CAKeyKey {
			continue
		}
		if err := os.WriteFile(filepath.Join(vol, version, k), data, 0o600); err != nil {
			return err
		}
		link := filepath.Join(vol, k)
		if _, err := os.Lstat(link); os.IsNotExist(err) {
			if err := os.Symlink(filepath.Join("..data", k), link); err != nil {
				return err
			}
		}
	}
	old, _ := os.Readlink(filepath.Join(vol, "..data"))
	tmp := filepath.Join(vol, "..data_tmp")
	if err := os.Symlink(version, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(vol, "..data")); err != nil {
		return err
	}
	if old != "" {
		return os.RemoveAll(filepath.Join(vol, old))
	}
	return nil
}

// proxy forwards TCP connections and can cut them all at once.
type tcpProxy struct {
	mu       sync.Mutex
	conns    map[net.Conn]bool
	accepts  int
	listener net.Listener
}

func startProxy(t testing.TB, addr, target string) *tcpProxy {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("proxy: %v", err)
	}
	p := &tcpProxy{conns: map[net.Conn]bool{}, listener: l}
	t.Cleanup(func() { l.Close(); p.cut() })
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			p.accepts++
			p.conns[in], p.conns[out] = true, true
			p.mu.Unlock()
			go func() { _, _ = io.Copy(out, in); out.Close(); in.Close() }()
			go func() { _, _ = io.Copy(in, out); out.Close(); in.Close() }()
		}
	}()
	return p
}

// cut closes every connection and returns how many client connections it
// closed.
func (p *tcpProxy) cut() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.conns) / 2
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
	return n
}

func (p *tcpProxy) accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepts
}

// syncBuffer is a bytes.Buffer safe for one writer and one reader.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
