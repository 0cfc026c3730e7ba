package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"

	"github.com/kos-sdn/kos/channels/cli"
	"github.com/kos-sdn/kos/tools/cluster"
	"github.com/kos-sdn/kos/tools/images"
	"github.com/kos-sdn/kos/tools/kosimages/catalog"
	"github.com/kos-sdn/kos/tools/kosinstall"
	"github.com/kos-sdn/kos/tools/testenv"
)

// builtImages is the result of buildImages.
type builtImages struct {
	tarball string
	err     error
}

// buildImages builds every KOS image, tagged as the newest releases in
// addons/ name them, into one tarball in dir.
func buildImages(ctx context.Context, root, dir string) builtImages {
	versions, err := catalog.AddonVersions(filepath.Join(root, "addons"))
	if err != nil {
		return builtImages{err: err}
	}
	etcd, err := etcdBinary(ctx, root)
	if err != nil {
		return builtImages{err: err}
	}
	tagged, err := catalog.Build(ctx, catalog.Options{Versions: versions, Etcd: etcd, WorkDir: filepath.Join(dir, "work")})
	if err != nil {
		return builtImages{err: err}
	}
	tarball := filepath.Join(dir, "kos.tar")
	return builtImages{tarball: tarball, err: images.Write(tarball, tagged)}
}

// etcdBinary returns the etcd the tests run: $KOS_KUBE_BIN_DIR's, else the
// one tools/etcd/build.sh builds (once).
func etcdBinary(ctx context.Context, root string) (string, error) {
	if dir := os.Getenv(testenv.BinDirEnv); dir != "" {
		if _, err := os.Stat(filepath.Join(dir, "etcd")); err == nil {
			return filepath.Join(dir, "etcd"), nil
		}
	}
	out, err := exec.CommandContext(ctx, "bash", filepath.Join(root, "tools", "etcd", "build.sh")).Output()
	if err != nil {
		return "", fmt.Errorf("building etcd: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return filepath.Join(lines[len(lines)-1], "etcd"), nil
}

// channelsCLI runs the channels command line, as `channels ARGS...
// --kubeconfig <admin>`, and returns its standard output, failing the test
// when it fails.
func (k *kos) channelsCLI(t *testing.T, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := cli.Main(t.Context(), append(args, "--kubeconfig", k.env.Kubeconfig), &stdout, &stderr)
	t.Logf("channels %s:\n%s%s", strings.Join(args, " "), stdout.String(), stderr.String())
	if code != 0 {
		t.Fatalf("channels %s: exit code %d: %s", strings.Join(args, " "), code, stderr.String())
	}
	return stdout.String()
}

// kubectl runs the machine's kubectl with the admin kubeconfig and returns
// its standard output, failing the test when it fails.
func (k *kos) kubectl(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "kubectl", append([]string{"--kubeconfig", k.env.Kubeconfig}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	// kubectl says "No resources found" on stderr.
	return string(out) + stderr.String()
}

// ovs runs ovs-vsctl against the Open vSwitch of the agent's pod, failing the test when
// it fails.
func (k *kos) ovs(t *testing.T, args ...string) string {
	t.Helper()
	out, err := k.ovsErr(t.Context(), args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (k *kos) ovsErr(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "ovs-vsctl", append([]string{"--timeout=20"}, args...)...)
	cmd.Env = append(os.Environ(), "OVS_RUNDIR="+k.env.Nodes[0].HostPath(agentOVSRunDir))
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("ovs-vsctl %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// objectVersions returns what channels has made of every addon object (any
// object with the addon label, and the KOS namespace), keyed by
// Kind.group/namespace/name: its generation and the fields the channels
// field manager owns, with when it last changed them. Status writes of the
// controllers do not show; any apply that changed an object does.
func (k *kos) objectVersions(t *testing.T) map[string]string {
	t.Helper()
	ctx := t.Context()
	disc, err := discovery.NewDiscoveryClientForConfig(k.env.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(k.env.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	lists, err := disc.ServerPreferredResources()
	if err != nil {
		t.Fatalf("discovering the served resources: %v", err)
	}
	versions := map[string]string{}
	seen := map[string]bool{}
	for _, list := range lists {
		gv, err := schema.ParseGroupVersion(list.GroupVersion)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range list.APIResources {
			if strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, "list") || r.Kind == "Event" {
				continue
			}
			gk := schema.GroupKind{Group: gv.Group, Kind: r.Kind}
			if seen[gk.String()] {
				continue
			}
			seen[gk.String()] = true
			objs, err := dyn.Resource(gv.WithResource(r.Name)).List(ctx, metav1.ListOptions{LabelSelector: kosinstall.AddonLabel})
			if err != nil {
				t.Fatalf("listing %s: %v", gk, err)
			}
			for i := range objs.Items {
				versions[objectKey(gk, &objs.Items[i])] = appliedState(&objs.Items[i])
			}
		}
	}
	ns, err := dyn.Resource(corev1.SchemeGroupVersion.WithResource("namespaces")).Get(ctx, kosinstall.Namespace, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	versions[objectKey(schema.GroupKind{Kind: "Namespace"}, ns)] = appliedState(ns)
	return versions
}

func objectKey(gk schema.GroupKind, obj *unstructured.Unstructured) string {
	return gk.String() + "/" + obj.GetNamespace() + "/" + obj.GetName()
}

// appliedState sums up an object's generation and the channels field
// manager's entries.
func appliedState(obj *unstructured.Unstructured) string {
	var b strings.Builder
	fmt.Fprintf(&b, "generation %d", obj.GetGeneration())
	for _, mf := range obj.GetManagedFields() {
		if mf.Manager != "channels" {
			continue
		}
		sum := ""
		if mf.FieldsV1 != nil {
			h := sha256.Sum256(mf.FieldsV1.Raw)
			sum = hex.EncodeToString(h[:8])
		}
		fmt.Fprintf(&b, "; %s %s at %s fields %s", mf.Operation, mf.Subresource, mf.Time, sum)
	}
	return b.String()
}

// dumpState logs what went on in the KOS namespaces: each pod with its
// containers' states, the end of the logs of those not ready (and of
// kos-pki), and the namespaces' warning events.
func (k *kos) dumpState() {
	for _, ns := range kosinstall.Namespaces() {
		k.dumpNamespace(ns)
	}
}

func (k *kos) dumpNamespace(ns string) {
	t := k.t
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pods, err := k.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Logf("listing the pods of %s: %v", ns, err)
		return
	}
	for _, p := range pods.Items {
		t.Logf("pod %s/%s on %q: %s", ns, p.Name, p.Spec.NodeName, p.Status.Phase)
		statuses := append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...)
		for _, c := range statuses {
			t.Logf("  container %s: ready %t, restarts %d, state %+v, last %+v", c.Name, c.Ready, c.RestartCount, c.State, c.LastTerminationState)
			// kos-pki's log says what it did to the APIService and the
			// Secrets, which a failure of the KOS API comes back to.
			if c.Ready && c.Name != "kos-pki" {
				continue
			}
			for _, previous := range []bool{false, true} {
				lines := int64(30)
				logs, err := k.kube.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: c.Name, TailLines: &lines, Previous: previous}).DoRaw(ctx)
				if err == nil && len(logs) > 0 {
					t.Logf("  logs of %s (previous %t):\n%s", c.Name, previous, logs)
				}
			}
		}
	}
	events, err := k.kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Logf("listing the events of %s: %v", ns, err)
		return
	}
	for _, e := range events.Items {
		if e.Type != corev1.EventTypeNormal {
			t.Logf("event %s %s/%s/%s: %s: %s (x%d)", e.Type, ns, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message, e.Count)
		}
	}
}

func since(t time.Time) time.Duration { return time.Since(t).Round(100 * time.Millisecond) }

// testWriter logs what is written to it, a line a call.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// startStandardCluster starts the cluster the multi-node tests install KOS
// on: standardNodes nodes labelled for KOS, kube-proxy, a registry the
// nodes pull from, kube-controller-manager and kube-scheduler; stopped
// when the test ends. ovs gives every node its own Open vSwitch, as KOS
// 0.1.0 needs.
func startStandardCluster(t *testing.T, ovs bool) *cluster.Cluster {
	t.Helper()
	return startCluster(t, ovs, false)
}

// startCluster is startStandardCluster, with Multus on every node when
// multus is set (the pods' tests).
func startCluster(t *testing.T, ovs, multus bool) *cluster.Cluster {
	t.Helper()
	var nodes []cluster.NodeOptions
	for i := 1; i <= standardNodes; i++ {
		nodes = append(nodes, cluster.NodeOptions{Name: fmt.Sprintf("kos-node-%d", i), Labels: kosinstall.NodeLabels(), OVS: ovs})
	}
	env, err := cluster.Start(t.Context(), cluster.Options{
		ControlPlane: testenv.Options{
			Components: []string{testenv.KubeControllerManager, testenv.KubeScheduler},
			Progress:   testWriter{t},
		},
		Nodes:     nodes,
		KubeProxy: true,
		Registry:  true,
		Multus:    multus,
	})
	if err != nil {
		t.Fatalf("starting the cluster: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping the cluster: %v", err)
		}
	})
	return env
}

// step is one step of a test whose steps each need the ones before.
type step struct {
	name string
	run  func(t *testing.T)
}

// runSteps runs the steps in turn as subtests, logging how long each
// took, and ends the test at the first that fails.
func runSteps(t *testing.T, steps []step) {
	t.Helper()
	runStepsDumping(t, nil, steps)
}

// runStepsDumping is runSteps that calls dump, when not nil, as soon as a
// step failed: before the test's cleanups remove what it would show.
func runStepsDumping(t *testing.T, dump func(), steps []step) {
	t.Helper()
	for _, s := range steps {
		began := time.Now()
		ok := t.Run(s.name, s.run)
		t.Logf("step %q took %s", s.name, since(began))
		if !ok {
			if dump != nil {
				dump()
			}
			t.Fatalf("step %q failed; the steps after it need it", s.name)
		}
	}
}
