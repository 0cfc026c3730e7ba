package testenv

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/kos-sdn/kos/tools/poll"
)

var subnetsResource = schema.GroupVersionResource{Group: kosGroup, Version: kosVersion, Resource: "subnets"}

func newSubnetObject(name, cidr string, vni int64) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": kosGroup + "/" + kosVersion,
		"kind":       "Subnet",
		"metadata":   map[string]any{"name": name, "namespace": "default"},
		"spec":       map[string]any{"ipv4": cidr, "vni": vni},
	}}
}

// subnetNames lists the names of the subnets in namespace default that cfg
// reaches.
func subnetNames(t *testing.T, cfg *rest.Config) []string {
	t.Helper()
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("creating a client: %v", err)
	}
	list, err := client.Resource(subnetsResource).Namespace("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("listing subnets at %s: %v", cfg.Host, err)
	}
	var names []string
	for _, item := range list.Items {
		names = append(names, item.GetName())
	}
	return names
}

func createSubnet(t *testing.T, cfg *rest.Config, obj *unstructured.Unstructured) {
	t.Helper()
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("creating a client: %v", err)
	}
	if _, err := client.Resource(subnetsResource).Namespace("default").Create(context.Background(), obj, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating subnet %s at %s: %v", obj.GetName(), cfg.Host, err)
	}
}

// TestIntegrationStartKOS starts kos-apiserver twice in one environment, one
// aggregated and one direct only, writes through each path, and restarts the
// aggregated one: its data and both paths survive. It is the only test of
// the package that registers an APIService on the shared control plane.
func TestIntegrationStartKOS(t *testing.T) {
	ctx := context.Background()
	env := Shared(t)

	kos, err := env.StartKOS(ctx, KOSOptions{})
	if err != nil {
		t.Fatalf("StartKOS: %v", err)
	}
	if !kos.Aggregated {
		t.Error("Aggregated = false, want true")
	}
	if kos.URL == env.APIServerURL || kos.DirectConfig.Host != kos.URL {
		t.Errorf("DirectConfig.Host = %s, URL = %s, kube-apiserver at %s: want the direct config aimed at kos-apiserver", kos.DirectConfig.Host, kos.URL, env.APIServerURL)
	}
	if port := urlPort(kos.URL); port <= 0 || port >= 32768 {
		t.Errorf("kos-apiserver port %d, want in (0,32768)", port)
	}

	createSubnet(t, kos.DirectConfig, newSubnetObject("direct", "10.1.0.0/24", 1))
	createSubnet(t, env.RESTConfig, newSubnetObject("aggregated", "10.2.0.0/24", 1))
	want := []string{"aggregated", "direct"}
	if diff := cmp.Diff(subnetNames(t, kos.DirectConfig), want); diff != "" {
		t.Errorf("subnets listed directly (-got +want):\n%s", diff)
	}
	if diff := cmp.Diff(subnetNames(t, env.RESTConfig), want); diff != "" {
		t.Errorf("subnets listed through kube-apiserver (-got +want):\n%s", diff)
	}

	other, err := env.StartKOS(ctx, KOSOptions{Name: "other", DirectOnly: true})
	if err != nil {
		t.Fatalf("StartKOS of a second, direct-only server: %v", err)
	}
	if other.Aggregated || other.EtcdURL == kos.EtcdURL {
		t.Errorf("second server: Aggregated = %v, etcd %s (first's %s); want a direct-only server with its own etcd", other.Aggregated, other.EtcdURL, kos.EtcdURL)
	}
	if got := subnetNames(t, other.DirectConfig); len(got) != 0 {
		t.Errorf("the second server lists subnets %q, want none: it has its own etcd", got)
	}

	if err := kos.Restart(ctx); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if !kos.Running() {
		t.Fatal("Running() = false after Restart")
	}
	if diff := cmp.Diff(subnetNames(t, env.RESTConfig), want); diff != "" {
		t.Errorf("subnets through kube-apiserver after a restart (-got +want):\n%s", diff)
	}

	if err := kos.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if kos.Running() {
		t.Error("Running() = true after Stop")
	}
}

// TestIntegrationStartKOSEtcdTLS starts kos-apiserver on an etcd that
// requires TLS client certificates, writes, restarts that etcd and checks
// that kos-apiserver serves the data again.
func TestIntegrationStartKOSEtcdTLS(t *testing.T) {
	ctx := context.Background()
	env := Shared(t)

	kos, err := env.StartKOS(ctx, KOSOptions{Name: "tls", DirectOnly: true, EtcdTLS: true})
	if err != nil {
		t.Fatalf("StartKOS: %v", err)
	}
	if !strings.HasPrefix(kos.EtcdURL, "https://127.0.0.1:") {
		t.Errorf("EtcdURL = %s, want https://127.0.0.1:<port>", kos.EtcdURL)
	}
	// A client that trusts the etcd's CA but shows no certificate of its own
	// is turned away.
	caPEM, err := os.ReadFile(kos.etcdTLS.caFile)
	if err != nil {
		t.Fatalf("reading the etcd CA: %v", err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	anonymous := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	if resp, err := anonymous.Get(kos.EtcdURL + "/health"); err == nil {
		resp.Body.Close()
		t.Errorf("etcd answered a client without a certificate: %s", resp.Status)
	}

	createSubnet(t, kos.DirectConfig, newSubnetObject("kept", "10.3.0.0/24", 3))
	etcdURL := kos.EtcdURL
	if err := kos.RestartEtcd(ctx); err != nil {
		t.Fatalf("RestartEtcd: %v", err)
	}
	if kos.EtcdURL != etcdURL {
		t.Errorf("EtcdURL after RestartEtcd = %s, want %s unchanged", kos.EtcdURL, etcdURL)
	}
	// kos-apiserver reconnects on its own; until then its requests fail.
	client, err := dynamic.NewForConfig(kos.DirectConfig)
	if err != nil {
		t.Fatalf("creating a client: %v", err)
	}
	poll.Until(t, 90*time.Second, "kos-apiserver serves again after its etcd restarted", func(ctx context.Context) error {
		_, err := client.Resource(subnetsResource).Namespace("default").List(ctx, metav1.ListOptions{})
		return err
	})
	if diff := cmp.Diff(subnetNames(t, kos.DirectConfig), []string{"kept"}); diff != "" {
		t.Errorf("subnets after an etcd restart (-got +want):\n%s", diff)
	}
	if !kos.Running() {
		t.Error("Running() = false after RestartEtcd, want kos-apiserver left running")
	}
}
