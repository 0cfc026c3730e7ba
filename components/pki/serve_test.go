package pki_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/generated/clientset/versioned"
	"github.com/kos-sdn/kos/components/pki"
	"github.com/kos-sdn/kos/tools/poll"
	"github.com/kos-sdn/kos/tools/testenv"
)

// TestIntegrationServe runs what the certificates are for: a three-member
// etcd with TLS for clients and peers (client certificates required) on the
// etcd server and peer certificates, and kos-apiserver on its serving
// certificate and its etcd client certificate, registered through the
// APIService whose CA bundle ensure set. kube-apiserver then proxies the
// KOS API to it, checking its certificate against that bundle for the
// Service's name, and what is written lands in the TLS etcd.
func TestIntegrationServe(t *testing.T) {
	env := testenv.Shared(t)
	ctx := context.Background()
	kosBin := testenv.Build(t, "cmd/kos-apiserver")
	ns := newNamespace(t)
	ports := freePorts(t, 7)
	apiPort := ports[6]

	// As the addons do: the Service and the APIService first, without a CA
	// bundle; then the init container's ensure.
	admin := kubeClient(t, env.RESTConfig)
	_, err := admin.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kos-apiserver"},
		Spec: corev1.ServiceSpec{
			// Endpoints may not hold loopback addresses.
			Type:         corev1.ServiceTypeExternalName,
			ExternalName: "localhost",
			Ports:        []corev1.ServicePort{{Name: "https", Port: int32(apiPort), Protocol: corev1.ProtocolTCP}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating the Service: %v", err)
	}
	apiService := applyAPIService(t, v1alpha1.GroupName, v1alpha1.SchemeGroupVersion.Version, ns, apiPort, 15)
	dir := t.TempDir()
	mustEnsure(t, "--kubeconfig", env.Kubeconfig, "--namespace", ns, "--secrets", "all", "--apiservice", apiService, "--out-dir", dir)
	file := func(secret, key string) string { return filepath.Join(dir, secret, key) }
	caFile := file(pki.CASecret, pki.CACertKey)

	var names, clientURLs, peers []string
	for i := range 3 {
		name := fmt.Sprintf("pki-etcd-%s-%d", ns, i)
		names = append(names, name)
		clientURLs = append(clientURLs, "https://127.0.0.1:"+strconv.Itoa(ports[2*i]))
		peers = append(peers, name+"=https://127.0.0.1:"+strconv.Itoa(ports[2*i+1]))
	}
	for i, name := range names {
		peerURL := strings.TrimPrefix(peers[i], name+"=")
		args := []string{
			"--name=" + name,
			"--data-dir=" + filepath.Join(env.Dir, name),
			"--listen-client-urls=" + clientURLs[i],
			"--advertise-client-urls=" + clientURLs[i],
			"--listen-peer-urls=" + peerURL,
			"--initial-advertise-peer-urls=" + peerURL,
			"--initial-cluster=" + strings.Join(peers, ","),
			"--initial-cluster-state=new",
			"--cert-file=" + file(pki.EtcdServerSecret, corev1.TLSCertKey),
			"--key-file=" + file(pki.EtcdServerSecret, corev1.TLSPrivateKeyKey),
			"--trusted-ca-file=" + file(pki.EtcdServerSecret, pki.CACertKey),
			"--client-cert-auth",
			"--peer-cert-file=" + file(pki.EtcdPeerSecret, corev1.TLSCertKey),
			"--peer-key-file=" + file(pki.EtcdPeerSecret, corev1.TLSPrivateKeyKey),
			"--peer-trusted-ca-file=" + file(pki.EtcdPeerSecret, pki.CACertKey),
			"--peer-client-cert-auth",
			"--unsafe-no-fsync",
			"--log-level=warn",
		}
		if err := env.StartProcess(ctx, name, filepath.Join(env.BinDir, "etcd"), args, nil); err != nil {
			t.Fatalf("starting %s: %v", name, err)
		}
	}

	// The etcd client certificate, as kos-apiserver presents it.
	etcdClient := httpsClient(t, file(pki.EtcdClientSecret, corev1.TLSCertKey), file(pki.EtcdClientSecret, corev1.TLSPrivateKeyKey), caFile)
	poll.Until(t, 2*time.Minute, "the TLS etcd members healthy (a quorum of peers talking TLS)", func(ctx context.Context) error {
		for _, u := range clientURLs {
			if err := etcdHealthy(ctx, etcdClient, u); err != nil {
				return err
			}
		}
		return nil
	})
	// Without a client certificate etcd refuses.
	if err := etcdHealthy(ctx, httpsClient(t, "", "", caFile), clientURLs[0]); err == nil {
		t.Errorf("etcd answered a client without a certificate")
	}

	apiURL := "https://127.0.0.1:" + strconv.Itoa(apiPort)
	args := []string{
		"--secure-port=" + strconv.Itoa(apiPort),
		"--bind-address=127.0.0.1",
		"--tls-cert-file=" + file(pki.APIServerServingSecret, corev1.TLSCertKey),
		"--tls-private-key-file=" + file(pki.APIServerServingSecret, corev1.TLSPrivateKeyKey),
		"--etcd-servers=" + strings.Join(clientURLs, ","),
		"--etcd-cafile=" + file(pki.EtcdClientSecret, pki.CACertKey),
		"--etcd-certfile=" + file(pki.EtcdClientSecret, corev1.TLSCertKey),
		"--etcd-keyfile=" + file(pki.EtcdClientSecret, corev1.TLSPrivateKeyKey),
		"--kubeconfig=" + env.Kubeconfig,
		"--authentication-kubeconfig=" + env.Kubeconfig,
		"--authorization-kubeconfig=" + env.Kubeconfig,
		"--v=1",
	}
	// A direct client trusts only the KOS CA and checks the name the
	// aggregator checks.
	direct := rest.CopyConfig(env.RESTConfig)
	direct.Host = apiURL
	direct.TLSClientConfig.CAData, direct.TLSClientConfig.CAFile = nil, caFile
	direct.TLSClientConfig.ServerName = "kos-apiserver." + ns + ".svc"
	directKube, err := kubernetes.NewForConfig(direct)
	if err != nil {
		t.Fatal(err)
	}
	err = env.StartProcess(ctx, "pki-kos-apiserver-"+ns, kosBin, args, func(ctx context.Context) error {
		return directKube.CoreV1().RESTClient().Get().AbsPath("/readyz").Do(ctx).Error()
	})
	if err != nil {
		t.Fatalf("starting kos-apiserver on the issued certificates: %v", err)
	}

	agg := aggregatorClient(t)
	poll.Until(t, 2*time.Minute, "APIService "+apiService+" available", func(ctx context.Context) error {
		svc, err := agg.ApiregistrationV1().APIServices().Get(ctx, apiService, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range svc.Status.Conditions {
			if c.Type == apiregistrationv1.Available && c.Status == apiregistrationv1.ConditionTrue {
				return nil
			}
			if c.Type == apiregistrationv1.Available {
				return fmt.Errorf("%s: %s", c.Reason, c.Message)
			}
		}
		return fmt.Errorf("no Available condition")
	})

	aggregated, err := versioned.NewForConfig(env.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	subnet := &v1alpha1.Subnet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "through-the-aggregator"},
		Spec:       v1alpha1.SubnetSpec{IPv4: "10.77.0.0/24", VNI: 77},
	}
	poll.Until(t, time.Minute, "a subnet created through kube-apiserver", func(ctx context.Context) error {
		_, err := aggregated.NetworkV1alpha1().Subnets(ns).Create(ctx, subnet, metav1.CreateOptions{})
		return err
	})
	directKOS, err := versioned.NewForConfig(direct)
	if err != nil {
		t.Fatal(err)
	}
	got, err := directKOS.NetworkV1alpha1().Subnets(ns).Get(ctx, subnet.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading the subnet from kos-apiserver directly: %v", err)
	}
	if got.Spec != subnet.Spec {
		t.Errorf("subnet read back %+v, want %+v", got.Spec, subnet.Spec)
	}
}

// httpsClient trusts caFile and, unless certFile is "", presents that
// client certificate.
func httpsClient(t testing.TB, certFile, keyFile, caFile string) *http.Client {
	t.Helper()
	cfg := &rest.Config{TLSClientConfig: rest.TLSClientConfig{CAFile: caFile, CertFile: certFile, KeyFile: keyFile}}
	tlsConfig, err := rest.TLSConfigFor(cfg)
	if err != nil {
		t.Fatalf("loading TLS files: %v", err)
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig}, Timeout: 5 * time.Second}
}

// etcdHealthy asks an etcd member's /health endpoint.
func etcdHealthy(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/health", nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return err
	}
	var health struct {
		Health string `json:"health"`
	}
	if err := json.Unmarshal(body, &health); err != nil || resp.StatusCode != http.StatusOK || health.Health != "true" {
		return fmt.Errorf("etcd %s not healthy: %s %s", url, resp.Status, body)
	}
	return nil
}
