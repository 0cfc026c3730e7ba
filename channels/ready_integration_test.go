package channels

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/kos-sdn/kos/channels/install"
	"github.com/kos-sdn/kos/channels/internal/channelstest"
	"github.com/kos-sdn/kos/tools/testenv"
)

// TestIntegrationReadinessGate runs the channels command, which waits for
// readiness by default, on a control plane with kube-controller-manager
// (which rolls Deployments out) but no scheduler or node: a Deployment of no
// replicas becomes ready, one of one replica never does. The release whose
// Deployment never becomes ready fails with exit 1, says which object and
// why, and leaves the record as it was; the fixed release then installs.
func TestIntegrationReadinessGate(t *testing.T) {
	const ns = "ready-app"
	env, err := testenv.Start(context.Background(), testenv.Options{Components: []string{testenv.KubeControllerManager}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	ours := tool{name: "ours", bin: testenv.Build(t, "cmd/channels"), kubeconfig: env.Kubeconfig, home: t.TempDir()}
	dir := t.TempDir()
	sel := channelstest.SelectorOf("ready")
	release := func(version string, replicas int) string {
		return writeSelectorChannel(t, dir, "v"+version+".yaml", selRelease{name: "ready", version: version, selector: sel,
			manifest: channelstest.Manifest(channelstest.Namespace(ns), channelstest.ConfigMap(ns, "ready-config", version), channelstest.DeploymentWithReplicas(ns, "ready", replicas))})
	}
	recordNow := func() string {
		t.Helper()
		c, err := NewClient(env.RESTConfig)
		if err != nil {
			t.Fatal(err)
		}
		rs, err := install.ReadRecords(context.Background(), c.Kube, []string{"kube-system"})
		if err != nil {
			t.Fatal(err)
		}
		return rs["kube-system"][AnnotationPrefix+"ready"]
	}

	out := ours.mustRun(t, "apply", "channel", release("1.0.0", 0), "--yes")
	if !strings.Contains(out, "ready: Waiting for Deployment.apps ready-app/ready") || !strings.Contains(out, "ready: Ready") {
		t.Errorf("the first release printed no progress while waiting:\n%s", out)
	}
	first := recordNow()
	if !strings.Contains(first, `"version":"1.0.0"`) {
		t.Fatalf("record after the first release: %s", first)
	}

	out, code := ours.run(t, "apply", "channel", release("2.0.0", 1), "--yes", "--timeout=15s")
	if code != 1 {
		t.Errorf("a release that never becomes ready: exit %d, want 1; output:\n%s", code, out)
	}
	for _, want := range []string{"addon \"ready\"", "not ready after 15s", "Deployment.apps ready-app/ready (", "Available: 0/1"} {
		if !strings.Contains(out, want) {
			t.Errorf("the failure does not say %q:\n%s", want, out)
		}
	}
	if got := recordNow(); got != first {
		t.Errorf("record after the failed release = %s, want it unchanged: %s", got, first)
	}

	out = ours.mustRun(t, "apply", "channel", release("2.0.1", 0), "--yes", "--timeout=2m")
	if !strings.Contains(out, "ready: Updated 1.0.0 -> 2.0.1") {
		t.Errorf("the fixed release did not install:\n%s", out)
	}
	if got := recordNow(); !strings.Contains(got, `"version":"2.0.1"`) {
		t.Errorf("record after the fixed release: %s", got)
	}
}

// gadgetCRD defines Gadgets, which have no status subresource, so that a
// manifest can create one with the status it starts in.
const gadgetCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gadgets.ready.test.kos.example.com}
spec:
  group: ready.test.kos.example.com
  scope: Namespaced
  names: {plural: gadgets, singular: gadget, kind: Gadget}
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
`

// TestIntegrationReadinessAcrossAddons installs two addons in one run where
// the first one, as listed and as applied, becomes ready only once the
// second is applied — as KOS's agent needs the API server of an addon listed
// after it. A Gadget of the first addon is Reconciling until an "operator"
// (this test) sees the second addon's ConfigMap. Every addon is applied
// before any is waited for, so the run installs both; waiting addon by
// addon would time the first one out.
func TestIntegrationReadinessAcrossAddons(t *testing.T) {
	const ns = "ready-across"
	env := testenv.Shared(t)
	ours := tool{name: "ours", bin: testenv.Build(t, "cmd/channels"), kubeconfig: env.Kubeconfig, home: t.TempDir()}
	gadget := fmt.Sprintf(`apiVersion: ready.test.kos.example.com/v1
kind: Gadget
metadata: {name: g, namespace: %s}
status:
  conditions: [{type: Reconciling, status: "True", reason: NoOperator, message: the operator is not installed}]
`, ns)
	loc := writeSelectorChannel(t, t.TempDir(), "channel.yaml",
		selRelease{name: "a-gadget", version: "1.0.0", selector: channelstest.SelectorOf("a-gadget"), manifest: channelstest.Manifest(channelstest.Namespace(ns), gadgetCRD, gadget)},
		selRelease{name: "b-operator", version: "1.0.0", selector: channelstest.SelectorOf("b-operator"), manifest: channelstest.ConfigMap(ns, "operator", "on")})

	kube, err := kubernetes.NewForConfig(env.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(env.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	gadgets := dyn.Resource(schema.GroupVersionResource{Group: "ready.test.kos.example.com", Version: "v1", Resource: "gadgets"}).Namespace(ns)
	ctx, cancel := context.WithCancel(context.Background())
	operated := make(chan error, 1)
	go func() {
		operated <- wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			if _, err := kube.CoreV1().ConfigMaps(ns).Get(ctx, "operator", metav1.GetOptions{}); err != nil {
				return false, nil
			}
			_, err := gadgets.Patch(ctx, "g", types.MergePatchType, []byte(`{"status":{"conditions":null}}`), metav1.PatchOptions{})
			return err == nil, nil
		})
	}()
	out := ours.mustRun(t, "apply", "channel", loc, "--yes", "--timeout=1m")
	cancel()
	if err := <-operated; err != nil {
		t.Errorf("the operator never saw b-operator's ConfigMap: %v", err)
	}
	for _, want := range []string{"Gadget.ready.test.kos.example.com ready-across/g (the operator is not installed)", "a-gadget: Installed 1.0.0", "b-operator: Installed 1.0.0"} {
		if !strings.Contains(out, want) {
			t.Errorf("the run does not say %q:\n%s", want, out)
		}
	}
}

// TestIntegrationReadinessWaitingClaim installs a PersistentVolumeClaim of a
// StorageClass that binds only once a pod uses the claim, as a CronJob's
// volume is: it stays Pending, and the release is ready all the same. A
// claim of a class that binds at once but finds no volume is not.
func TestIntegrationReadinessWaitingClaim(t *testing.T) {
	const ns = "ready-claim"
	env := testenv.Shared(t)
	kube, err := kubernetes.NewForConfig(env.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	for name, mode := range map[string]storagev1.VolumeBindingMode{
		"ready-claim-later": storagev1.VolumeBindingWaitForFirstConsumer,
		"ready-claim-now":   storagev1.VolumeBindingImmediate,
	} {
		class := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: "kubernetes.io/no-provisioner", VolumeBindingMode: &mode}
		if _, err := kube.StorageV1().StorageClasses().Create(t.Context(), class, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	claim := func(name, class string) string {
		return fmt.Sprintf(`apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: %s, namespace: %s}
spec:
  storageClassName: %s
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
`, name, ns, class)
	}
	ours := tool{name: "ours", bin: testenv.Build(t, "cmd/channels"), kubeconfig: env.Kubeconfig, home: t.TempDir()}
	dir := t.TempDir()
	sel := channelstest.SelectorOf("claim")

	later := writeSelectorChannel(t, dir, "later.yaml", selRelease{name: "claim", version: "1.0.0", selector: sel,
		manifest: channelstest.Manifest(channelstest.Namespace(ns), claim("backups", "ready-claim-later"))})
	out := ours.mustRun(t, "apply", "channel", later, "--yes", "--timeout=30s")
	if !strings.Contains(out, "claim: Installed 1.0.0") || strings.Contains(out, "Waiting for") {
		t.Errorf("the release of a claim waiting for its first pod waited or did not install:\n%s", out)
	}
	pvc, err := kube.CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), "backups", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pvc.Status.Phase == corev1.ClaimBound {
		t.Fatalf("claim %s/backups is Bound; the test needs it Pending", ns)
	}

	now := writeSelectorChannel(t, dir, "now.yaml", selRelease{name: "claim", version: "2.0.0", selector: sel,
		manifest: channelstest.Manifest(channelstest.Namespace(ns), claim("backups", "ready-claim-later"), claim("unbound", "ready-claim-now"))})
	out, code := ours.run(t, "apply", "channel", now, "--yes", "--timeout=5s")
	if code != 1 || !strings.Contains(out, "PersistentVolumeClaim "+ns+"/unbound") {
		t.Errorf("a claim that should bind at once and cannot: exit %d, want 1 naming it; output:\n%s", code, out)
	}
}
