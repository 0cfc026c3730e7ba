package apiserver_test

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	kosclient "github.com/kos-sdn/kos/components/generated/clientset/versioned"
	"github.com/kos-sdn/kos/tools/poll"
	"github.com/kos-sdn/kos/tools/testenv"
)

// kosServers counts the kos-apiservers this test program started, so that
// each gets a name, and so an etcd, of its own, also under -count.
var kosServers atomic.Int64

// startKOS starts a kos-apiserver with an etcd of its own, named
// <opts.Name>-<n>, and stops the server when the test ends; its etcd stops
// with the environment.
func startKOS(t testing.TB, opts testenv.KOSOptions) *testenv.KOS {
	t.Helper()
	env := testenv.Shared(t)
	opts.Name = fmt.Sprintf("%s-%d", opts.Name, kosServers.Add(1))
	kos, err := env.StartKOS(context.Background(), opts)
	if err != nil {
		t.Fatalf("starting kos-apiserver: %v", err)
	}
	t.Cleanup(func() {
		if err := kos.Stop(); err != nil {
			t.Errorf("stopping kos-apiserver %s: %v", kos.Name, err)
		}
	})
	return kos
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

// kubectl runs kubectl as the test environment's admin and returns its
// standard output.
func kubectl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := runKubectl(testenv.Shared(t).Kubeconfig, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// kubectlEventually runs kubectl until it succeeds, for up to 30 seconds:
// the aggregator merges a newly registered server's OpenAPI document, which
// kubectl explain reads, a little after the APIService turns Available.
func kubectlEventually(t testing.TB, args ...string) string {
	t.Helper()
	var out string
	poll.Until(t, 30*time.Second, "kubectl "+strings.Join(args, " "), func(context.Context) error {
		var err error
		out, err = runKubectl(testenv.Shared(t).Kubeconfig, args...)
		return err
	})
	return out
}

// runKubectl runs kubectl with an admin kubeconfig and returns its
// standard output, or an error with its standard error.
func runKubectl(kubeconfig string, args ...string) (string, error) {
	cmd := exec.Command("kubectl", append([]string{"--kubeconfig=" + kubeconfig}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("kubectl %s: %w\nstderr: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// newNamespace creates a namespace in the main cluster, where the server's
// namespace lifecycle admission looks for it.
func newNamespace(t testing.TB) string {
	t.Helper()
	return testenv.Shared(t).NewNamespace(t, "kos-")
}

func newSubnet(ns, name, cidr string, vni uint32) *v1alpha1.Subnet {
	return &v1alpha1.Subnet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       v1alpha1.SubnetSpec{IPv4: cidr, VNI: vni},
	}
}

func newAttachment(ns, name, node, subnet string) *v1alpha1.NetworkAttachment {
	return &v1alpha1.NetworkAttachment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       v1alpha1.NetworkAttachmentSpec{Node: node, Subnet: subnet},
	}
}

func mustCreateSubnet(t testing.TB, c kosclient.Interface, s *v1alpha1.Subnet) *v1alpha1.Subnet {
	t.Helper()
	got, err := c.NetworkV1alpha1().Subnets(s.Namespace).Create(context.Background(), s, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating subnet %s/%s: %v", s.Namespace, s.Name, err)
	}
	return got
}

func mustCreateAttachment(t testing.TB, c kosclient.Interface, a *v1alpha1.NetworkAttachment) *v1alpha1.NetworkAttachment {
	t.Helper()
	got, err := c.NetworkV1alpha1().NetworkAttachments(a.Namespace).Create(context.Background(), a, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating attachment %s/%s: %v", a.Namespace, a.Name, err)
	}
	return got
}
