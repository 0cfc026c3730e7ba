package e2e

// This file holds TestIntegrationKOS, the cluster its steps share (kos,
// which the standard tests embed), its install and API steps, and the pod
// predicates the package's tests use. The attachments and their state
// through pod deletions are in e2e_attachments_test.go; the install records,
// variants, re-run and upgrade in e2e_releases_test.go.

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/blang/semver/v4"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"

	"github.com/kos-sdn/kos/channels"
	networkv1alpha1 "github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	kosclient "github.com/kos-sdn/kos/components/generated/clientset/versioned"
	"github.com/kos-sdn/kos/tools/cluster"
	"github.com/kos-sdn/kos/tools/kosinstall"
	"github.com/kos-sdn/kos/tools/poll"
	"github.com/kos-sdn/kos/tools/testenv"
)

// TestIntegrationKOS installs KOS from the bootstrap channel on a real
// single-node cluster and runs it: every step needs the ones before it, so a
// failing step ends the test.
func TestIntegrationKOS(t *testing.T) {
	began := time.Now()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	// Images and cluster at once: the images take seconds once their Go
	// build is cached, the cluster tens of seconds.
	built := make(chan builtImages, 1)
	dir := t.TempDir()
	go func() { built <- buildImages(t.Context(), root, dir) }()

	env, err := cluster.Start(t.Context(), cluster.Options{
		ControlPlane: testenv.Options{
			Components: []string{testenv.KubeControllerManager, testenv.KubeScheduler},
			Progress:   testWriter{t},
		},
		Nodes:     []cluster.NodeOptions{{Labels: kosinstall.NodeLabels()}},
		KubeProxy: true,
	})
	if err != nil {
		<-built
		t.Fatalf("starting the cluster: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping the cluster: %v", err)
		}
	})
	t.Logf("cluster ready after %s", since(began))
	// The single-node etcd's local volume: its folder must exist on the
	// node before the install.
	if err := os.MkdirAll(env.Nodes[0].HostPath(kosinstall.VarLib+"/etcd"), 0o755); err != nil {
		t.Fatal(err)
	}
	images := <-built
	if images.err != nil {
		t.Fatalf("building the images: %v", images.err)
	}
	t.Logf("images built after %s", since(began))
	if err := env.ImportImages(t.Context(), images.tarball); err != nil {
		t.Fatal(err)
	}
	t.Logf("images imported after %s", since(began))

	k := newKOS(t, env, root)
	t.Cleanup(func() {
		if t.Failed() {
			k.dumpState()
		}
	})
	runSteps(t, []step{
		{"install", k.testInstall},
		{"API served through the aggregator", k.testAPI},
		{"attachments addressed and implemented", k.testAttachments},
		{"install records", k.testRecords},
		{"kubernetesVersion variant", k.testVariant},
		{"re-run changes nothing", k.testRerun},
		{"upgrade prunes what the release dropped", k.testUpgrade},
		{"deleted pods come back with the state intact", k.testPodDeletion},
	})
	t.Logf("the whole test took %s", since(began))
}

// kos is the cluster KOS is installed on, with what the steps share.
type kos struct {
	t        *testing.T
	env      *cluster.Cluster
	root     string
	kube     kubernetes.Interface
	kos      kosclient.Interface
	agg      aggregator.Interface
	channels []string // the bootstrap channels, as the install gives them
	server   semver.Version

	// What the attachments step made, which later steps expect to last.
	subnet      *networkv1alpha1.Subnet
	attachments []*networkv1alpha1.NetworkAttachment
}

func newKOS(t *testing.T, env *cluster.Cluster, root string) *kos {
	k := &kos{t: t, env: env, root: root}
	var err error
	if k.kube, err = kubernetes.NewForConfig(env.RESTConfig); err != nil {
		t.Fatal(err)
	}
	if k.kos, err = kosclient.NewForConfig(env.RESTConfig); err != nil {
		t.Fatal(err)
	}
	if k.agg, err = aggregator.NewForConfig(env.RESTConfig); err != nil {
		t.Fatal(err)
	}
	info, err := k.kube.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if k.server, err = channels.ServerVersion(info.GitVersion); err != nil {
		t.Fatal(err)
	}
	// The local channel first: its single-node etcd and userspace agent
	// replace the bootstrap channel's releases of equal version.
	k.channels = []string{
		filepath.Join(root, "addons", "local-channel.yaml"),
		filepath.Join(root, "bootstrap-channel.yaml"),
	}
	return k
}

// testInstall applies the bootstrap channels and waits for every KOS pod to
// be Ready and the APIService to be Available.
func (k *kos) testInstall(t *testing.T) {
	out := k.channelsCLI(t, append(append([]string{"apply", "channel"}, k.channels...), "--yes")...)
	for _, name := range k.expectedAddons(t) {
		if !strings.Contains(out, name+": Installed ") {
			t.Errorf("the install says nothing of installing %s:\n%s", name, out)
		}
	}
	k.waitKOSReady(t, 4*time.Minute)
}

// waitKOSReady waits until KOS is ready (kosinstall.Ready).
func (k *kos) waitKOSReady(t *testing.T, timeout time.Duration) {
	t.Helper()
	poll.Until(t, timeout, "every KOS pod to be Ready and the APIService Available", func(ctx context.Context) error {
		return kosinstall.Ready(ctx, k.kube, k.agg)
	})
}

// testAPI reads the KOS API through kube-apiserver's aggregator, with
// kubectl as people do and with the generated client.
func (k *kos) testAPI(t *testing.T) {
	ctx := t.Context()
	if _, err := k.kos.NetworkV1alpha1().Subnets(kosinstall.Namespace).List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("listing subnets through the aggregator: %v", err)
	}
	out := k.kubectl(t, "get", "subnets", "--all-namespaces")
	if !strings.Contains(out, "No resources found") {
		t.Errorf("kubectl get subnets on a new install: got %q, want none found", out)
	}
	out = k.kubectl(t, "api-resources", "--api-group=network.example.com", "-o", "name")
	for _, want := range []string{"subnets.network.example.com", "networkattachments.network.example.com", "iplocks.network.example.com"} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl api-resources does not list %s:\n%s", want, out)
		}
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// ofJob says whether a pod is a Job's (kos-etcd's backups), which comes
// and goes on a schedule, not one of KOS's workloads.
func ofJob(p corev1.Pod) bool {
	ref := metav1.GetControllerOf(&p)
	return ref != nil && ref.Kind == "Job"
}
