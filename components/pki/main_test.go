package pki_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	logsapi "k8s.io/component-base/logs/api/v1"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"

	"github.com/kos-sdn/kos/components/pki"
	"github.com/kos-sdn/kos/tools/testenv"
)

// TestMain stops the control plane the integration tests start on first
// use (testenv.Shared).
func TestMain(m *testing.M) {
	// The tests run the command many times in one process, each time with
	// the same logging configuration, which is a process global.
	logsapi.ReapplyHandling = logsapi.ReapplyHandlingIgnoreUnchanged
	testenv.Main(m)
}

// channelsFieldManager is the field manager channels applies addons with.
const channelsFieldManager = "channels"

func kubeClient(t testing.TB, cfg *rest.Config) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("creating a client: %v", err)
	}
	return c
}

func aggregatorClient(t testing.TB) aggregator.Interface {
	t.Helper()
	env := testenv.Shared(t)
	c, err := aggregator.NewForConfig(env.RESTConfig)
	if err != nil {
		t.Fatalf("creating an aggregator client: %v", err)
	}
	return c
}

func newNamespace(t testing.TB) string {
	t.Helper()
	return testenv.Shared(t).NewNamespace(t, "pki-")
}

// runEnsure runs `kos-pki ensure` in process with args, and returns what it
// printed and its error.
func runEnsure(t testing.TB, args ...string) (out string, errOut string, err error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := pki.NewCommand(&stdout, &stderr)
	cmd.SetArgs(append([]string{"ensure"}, args...))
	err = cmd.ExecuteContext(context.Background())
	return stdout.String(), stderr.String(), err
}

// mustEnsure runs `kos-pki ensure` and fails the test unless it succeeds.
func mustEnsure(t testing.TB, args ...string) []string {
	t.Helper()
	out, errOut, err := runEnsure(t, args...)
	if err != nil {
		t.Fatalf("kos-pki ensure %s: %v\n%s%s", strings.Join(args, " "), err, out, errOut)
	}
	return strings.Split(strings.TrimSpace(out), "\n")
}

// versions returns the resourceVersion of every Secret of the namespace.
func versions(t testing.TB, ns string) map[string]string {
	t.Helper()
	env := testenv.Shared(t)
	list, err := kubeClient(t, env.RESTConfig).CoreV1().Secrets(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("listing secrets: %v", err)
	}
	out := map[string]string{}
	for _, s := range list.Items {
		out[s.Name] = s.ResourceVersion
	}
	return out
}

// checkConsistent fails the test unless the namespace holds exactly the CA
// and the leaves of set, every leaf valid from the one CA.
func checkConsistent(t testing.TB, ns string, set pki.Set) *pki.CA {
	t.Helper()
	env := testenv.Shared(t)
	secrets := kubeClient(t, env.RESTConfig).CoreV1().Secrets(ns)
	caSecret, err := secrets.Get(context.Background(), pki.CASecret, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading the CA: %v", err)
	}
	ca, err := pki.ParseCA(caSecret.Data[pki.CACertKey], caSecret.Data[pki.CAKeyKey])
	if err != nil {
		t.Fatalf("reading the CA: %v", err)
	}
	leaves, err := set.Leaves(ns)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{pki.CASecret: true}
	for _, l := range leaves {
		want[l.Secret] = true
		s, err := secrets.Get(context.Background(), l.Secret, metav1.GetOptions{})
		if err != nil {
			t.Errorf("reading secret %s: %v", l.Secret, err)
			continue
		}
		if reason := ca.Check(l, s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey], s.Data[pki.CACertKey], time.Now()); reason != "" {
			t.Errorf("secret %s: %s", l.Secret, reason)
		}
	}
	for name := range versions(t, ns) {
		if !want[name] {
			t.Errorf("unexpected secret %s", name)
		}
	}
	return ca
}

// applyAPIService applies an APIService for group and version backed by the
// Service ns/kos-apiserver on port, as channels applies the addon's: with
// its field manager and without a CA bundle.
func applyAPIService(t testing.TB, group, version, ns string, port, versionPriority int) string {
	t.Helper()
	name := version + "." + group
	patch, err := json.Marshal(map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1",
		"kind":       "APIService",
		"metadata":   map[string]any{"name": name},
		"spec": map[string]any{
			"group":                group,
			"version":              version,
			"groupPriorityMinimum": 1000,
			"versionPriority":      versionPriority,
			"service":              map[string]any{"namespace": ns, "name": "kos-apiserver", "port": port},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	force := true
	_, err = aggregatorClient(t).ApiregistrationV1().APIServices().Patch(context.Background(), name, types.ApplyPatchType, patch,
		metav1.PatchOptions{FieldManager: channelsFieldManager, Force: &force})
	if err != nil {
		t.Fatalf("applying apiservice %s as channels: %v", name, err)
	}
	return name
}

// freePorts returns n loopback ports that are free now.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ports []int
	var listeners []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("finding a free port: %v", err)
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range listeners {
		l.Close()
	}
	return ports
}

// lines formats results as kos-pki prints them.
func lines(results []pki.Result) []string {
	var out []string
	for _, r := range results {
		out = append(out, r.String())
	}
	return out
}

func secretLines(ns, action string, names ...string) []string {
	var out []string
	for _, n := range names {
		out = append(out, fmt.Sprintf("secret %s/%s %s", ns, n, action))
	}
	return out
}
