package channels

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kos-sdn/kos/channels/api"
	"github.com/kos-sdn/kos/channels/install"
	"github.com/kos-sdn/kos/channels/internal/channelstest"
)

// deployment is a Deployment of the pause image.
func deployment(namespace, name string) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: %[2]s, namespace: %[1]s}
spec:
  selector: {matchLabels: {app: %[2]s}}
  template:
    metadata: {labels: {app: %[2]s}}
    spec: {containers: [{name: c, image: %[3]s}]}
`, namespace, name, channelstest.PauseImage)
}

// createNamespace makes a namespace the addons of a test do not own.
func createNamespace(t *testing.T, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := kube(t).CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestIntegrationApplyWritesRecordAndRerunIsNoop(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	recMan := channelstest.Manifest(
		// Out of order on purpose: phases put the namespace first.
		deployment("rec-app", "rec"),
		channelstest.ConfigMap("rec-app", "rec-config", "v1"),
		`apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: rec-reader}
rules: [{apiGroups: [""], resources: [configmaps], verbs: [get]}]
`,
		"apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: rec, namespace: rec-app}\n",
		channelstest.Namespace("rec-app"),
	)
	loc := channelstest.WriteChannel(t, dir, "channel.yaml",
		channelstest.Release{Name: "rec", Version: "1.0.0", ID: "k8s-1.34", Manifest: recMan},
		channelstest.Release{Name: "rec-two", Version: "0.1.0", Namespace: "rec-records", Manifest: channelstest.ConfigMap("rec-app", "rec-two", "x")},
		channelstest.Release{Name: "rec-three", Version: "2.0.0", ID: "a", Namespace: "rec-records", Manifest: channelstest.ConfigMap("rec-app", "rec-three", "y")},
	)

	res := run(t, newTestClient(t), loc)
	if res.err != nil {
		t.Fatalf("first run: %v", res.err)
	}
	if diff := cmp.Diff(res.of(EventApplied), []string{
		"rec-three: Installed 2.0.0 (a)",
		"rec-two: Installed 0.1.0",
		"rec: Installed 1.0.0 (k8s-1.34)",
	}); diff != "" {
		t.Errorf("applied events (-got +want):\n%s", diff)
	}

	// The record holds exactly these fields, in this order.
	wantRecord := fmt.Sprintf(`{"version":"1.0.0","channel":%q,"id":"k8s-1.34","manifestHash":%q,"systemGeneration":1,`+
		`"inventory":{"kinds":["ClusterRole.rbac.authorization.k8s.io","ConfigMap","Deployment.apps","Namespace","ServiceAccount"],"namespaces":["rec-app"],"identity":"channels.kos.example.com/addon=rec"}}`,
		loc, HashManifest([]byte(recMan)))
	if got := recordOf(t, "kube-system", "rec"); got != wantRecord {
		t.Errorf("record of rec =\n%s\nwant\n%s", got, wantRecord)
	}
	wantTwo := fmt.Sprintf(`{"version":"0.1.0","channel":%q,"manifestHash":%q,"systemGeneration":1,"inventory":{"kinds":["ConfigMap"],"namespaces":["rec-app"],"identity":"channels.kos.example.com/addon=rec-two"}}`,
		loc, HashManifest([]byte(channelstest.ConfigMap("rec-app", "rec-two", "x"))))
	if got := recordOf(t, "rec-records", "rec-two"); got != wantTwo {
		t.Errorf("record of rec-two =\n%s\nwant\n%s", got, wantTwo)
	}

	// Objects are applied server-side by "channels", carry the selector and
	// no last-applied annotation.
	cm, err := kube(t).CoreV1().ConfigMaps("rec-app").Get(ctx, "rec-config", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := cm.Labels["k8s-addon"]; got != "rec.addons.k8s.io" {
		t.Errorf("label k8s-addon = %q, want rec.addons.k8s.io", got)
	}
	if _, ok := cm.Annotations[corev1.LastAppliedConfigAnnotation]; ok {
		t.Errorf("ConfigMap has a %s annotation", corev1.LastAppliedConfigAnnotation)
	}
	var managers []string
	for _, mf := range cm.ManagedFields {
		managers = append(managers, mf.Manager+"/"+string(mf.Operation))
	}
	if diff := cmp.Diff(managers, []string{"channels/Apply"}); diff != "" {
		t.Errorf("managed fields (-got +want):\n%s", diff)
	}

	before := resourceVersions(t)

	// The second run finds nothing to do: it reads the version and the two
	// record namespaces, and writes nothing, not even the lease.
	c, log := newCountingClient(t)
	again := run(t, c, loc)
	if again.err != nil {
		t.Fatalf("second run: %v", again.err)
	}
	if got := len(again.plan.Pending()); got != 0 {
		t.Errorf("second run: %d addons pending, want 0", got)
	}
	if len(again.events) != 0 {
		t.Errorf("second run: events %v, want none", again.events)
	}
	reqs := log.requests()
	sort.Strings(reqs)
	if diff := cmp.Diff(reqs, []string{
		"GET /api/v1/namespaces/kube-system",
		"GET /api/v1/namespaces/rec-records",
		"GET /version",
	}); diff != "" {
		t.Errorf("second run's requests (-got +want):\n%s", diff)
	}
	if diff := cmp.Diff(resourceVersions(t), before); diff != "" {
		t.Errorf("resourceVersions changed by a no-op run (-got +want):\n%s", diff)
	}
}

// resourceVersions returns the resourceVersions of what the record test
// applies and of the record namespaces.
func resourceVersions(t *testing.T) map[string]string {
	t.Helper()
	ctx := context.Background()
	k := kube(t)
	out := map[string]string{}
	add := func(name string, obj metav1.Object, err error) {
		if err != nil {
			t.Fatalf("reading %s: %v", name, err)
		}
		out[name] = obj.GetResourceVersion()
	}
	ns, err := k.CoreV1().Namespaces().Get(ctx, "rec-app", metav1.GetOptions{})
	add("namespace rec-app", ns, err)
	ks, err := k.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{})
	add("namespace kube-system", ks, err)
	rr, err := k.CoreV1().Namespaces().Get(ctx, "rec-records", metav1.GetOptions{})
	add("namespace rec-records", rr, err)
	sa, err := k.CoreV1().ServiceAccounts("rec-app").Get(ctx, "rec", metav1.GetOptions{})
	add("serviceaccount", sa, err)
	cr, err := k.RbacV1().ClusterRoles().Get(ctx, "rec-reader", metav1.GetOptions{})
	add("clusterrole", cr, err)
	d, err := k.AppsV1().Deployments("rec-app").Get(ctx, "rec", metav1.GetOptions{})
	add("deployment", d, err)
	for _, name := range []string{"rec-config", "rec-two", "rec-three"} {
		cm, err := k.CoreV1().ConfigMaps("rec-app").Get(ctx, name, metav1.GetOptions{})
		add("configmap "+name, cm, err)
	}
	return out
}

func TestIntegrationUpgradePrunesExactlyWhatWasDropped(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	const ns = "prune-app"
	service := fmt.Sprintf("apiVersion: v1\nkind: Service\nmetadata: {name: svc, namespace: %s}\nspec: {ports: [{port: 80}]}\n", ns)
	other := channelstest.Release{Name: "pruner-other", Version: "1.0.0", Manifest: channelstest.ConfigMap(ns, "other-cm", "o")}
	v1 := channelstest.WriteChannel(t, dir, "v1.yaml",
		channelstest.Release{Name: "pruner", Version: "1.0.0", Manifest: channelstest.Manifest(
			channelstest.Namespace(ns), channelstest.ConfigMap(ns, "keep", "1"), channelstest.ConfigMap(ns, "drop", "1"),
			deployment(ns, "keep"), deployment(ns, "drop"), service)},
		other,
	)
	if res := run(t, newTestClient(t), v1); res.err != nil {
		t.Fatalf("installing v1: %v", res.err)
	}
	// Neither labelled nor of the addon: pruning must not see it.
	bystander := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "bystander", Namespace: ns}}
	if _, err := kube(t).CoreV1().ConfigMaps(ns).Create(ctx, bystander, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	v2 := channelstest.WriteChannel(t, dir, "v2.yaml",
		channelstest.Release{Name: "pruner", Version: "2.0.0", Manifest: channelstest.Manifest(
			channelstest.Namespace(ns), channelstest.ConfigMap(ns, "keep", "2"), deployment(ns, "keep"), service)},
		other,
	)
	res := run(t, newTestClient(t), v2)
	if res.err != nil {
		t.Fatalf("upgrading to v2: %v", res.err)
	}
	if diff := cmp.Diff(res.of(EventPruned), []string{
		"pruner: Pruned ConfigMap prune-app/drop",
		"pruner: Pruned Deployment.apps prune-app/drop",
	}); diff != "" {
		t.Errorf("pruned (-got +want):\n%s", diff)
	}
	if diff := cmp.Diff(res.of(EventApplied), []string{"pruner: Updated 1.0.0 -> 2.0.0"}); diff != "" {
		t.Errorf("applied (-got +want):\n%s", diff)
	}
	if diff := cmp.Diff(configMapNames(t, ns), []string{"bystander", "keep", "other-cm"}); diff != "" {
		t.Errorf("ConfigMaps left (-got +want):\n%s", diff)
	}
	deps, err := kube(t).AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range deps.Items {
		names = append(names, d.Name)
	}
	if diff := cmp.Diff(names, []string{"keep"}); diff != "" {
		t.Errorf("Deployments left (-got +want):\n%s", diff)
	}
	if _, err := kube(t).CoreV1().Services(ns).Get(ctx, "svc", metav1.GetOptions{}); err != nil {
		t.Errorf("Service svc: %v", err)
	}
}

const widgetCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.test.kos.example.com}
spec:
  group: test.kos.example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
`

var widgetResource = schema.GroupVersionResource{Group: "test.kos.example.com", Version: "v1", Resource: "widgets"}

func TestIntegrationCRDAndCustomResourceInOneRunAndPruneSparesDefinitions(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	c := newTestClient(t)
	widget := "apiVersion: test.kos.example.com/v1\nkind: Widget\nmetadata: {name: w1, namespace: widgets-app}\nsize: 3\n"
	keep := channelstest.ConfigMap("default", "widgets-config", "1")

	// The custom resource comes before its CRD and namespace in the file.
	v1 := channelstest.WriteChannel(t, dir, "v1.yaml", channelstest.Release{Name: "widgets", Version: "1.0.0",
		Manifest: channelstest.Manifest(widget, keep, widgetCRD, channelstest.Namespace("widgets-app"))})
	if res := run(t, c, v1); res.err != nil {
		t.Fatalf("applying a CRD with its custom resource: %v", res.err)
	}
	w, err := c.Dynamic.Resource(widgetResource).Namespace("widgets-app").Get(ctx, "w1", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the custom resource was not applied: %v", err)
	}
	if got := w.GetLabels()["k8s-addon"]; got != "widgets.addons.k8s.io" {
		t.Errorf("Widget label k8s-addon = %q, want widgets.addons.k8s.io", got)
	}

	// Dropping the CRD, the namespace and the widget prunes only the widget.
	v2 := channelstest.WriteChannel(t, dir, "v2.yaml", channelstest.Release{Name: "widgets", Version: "2.0.0", Manifest: keep})
	res := run(t, c, v2)
	if res.err != nil {
		t.Fatalf("v2: %v", res.err)
	}
	if diff := cmp.Diff(res.of(EventPruned), []string{"widgets: Pruned Widget.test.kos.example.com widgets-app/w1"}); diff != "" {
		t.Errorf("v2 pruned (-got +want):\n%s", diff)
	}
	if _, err := kube(t).CoreV1().Namespaces().Get(ctx, "widgets-app", metav1.GetOptions{}); err != nil {
		t.Errorf("namespace widgets-app did not survive: %v", err)
	}
	if _, err := c.Dynamic.Resource(crdResource).Get(ctx, "widgets.test.kos.example.com", metav1.GetOptions{}); err != nil {
		t.Errorf("the CRD did not survive: %v", err)
	}

	// Naming them in prune.kinds prunes them.
	v3 := channelstest.WriteChannel(t, dir, "v3.yaml", channelstest.Release{Name: "widgets", Version: "3.0.0", Manifest: keep,
		Prune: &api.PruneSpec{Kinds: []api.PruneKindSpec{
			{Kind: "Namespace"},
			{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"},
		}}})
	res = run(t, c, v3)
	if res.err != nil {
		t.Fatalf("v3: %v", res.err)
	}
	if diff := cmp.Diff(res.of(EventPruned), []string{
		"widgets: Pruned CustomResourceDefinition.apiextensions.k8s.io widgets.test.kos.example.com",
		"widgets: Pruned Namespace widgets-app",
	}); diff != "" {
		t.Errorf("v3 pruned (-got +want):\n%s", diff)
	}
	// Without a namespace controller the namespace stays Terminating.
	ns, err := kube(t).CoreV1().Namespaces().Get(ctx, "widgets-app", metav1.GetOptions{})
	if err == nil && ns.DeletionTimestamp == nil {
		t.Errorf("namespace widgets-app is not being deleted")
	}
	if _, err := kube(t).CoreV1().ConfigMaps("default").Get(ctx, "widgets-config", metav1.GetOptions{}); err != nil {
		t.Errorf("ConfigMap widgets-config: %v", err)
	}
}

func TestIntegrationEmptyManifestWithPruneSpecUninstalls(t *testing.T) {
	const ns = "gone-app"
	createNamespace(t, ns)
	dir := t.TempDir()
	c := newTestClient(t)
	v1 := channelstest.WriteChannel(t, dir, "v1.yaml", channelstest.Release{Name: "gone", Version: "1.0.0",
		Manifest: channelstest.Manifest(channelstest.ConfigMap(ns, "a", "1"), channelstest.ConfigMap(ns, "b", "1"), deployment(ns, "d"))})
	if res := run(t, c, v1); res.err != nil {
		t.Fatalf("v1: %v", res.err)
	}
	// Written as kOps would: no inventory, so only the prune spec finds the
	// objects.
	kopsRecord := `{"version":"1.0.0","channel":"` + v1 + `","systemGeneration":1}`
	writeRawRecord(t, "kube-system", "gone", kopsRecord)

	v2 := channelstest.WriteChannel(t, dir, "v2.yaml", channelstest.Release{Name: "gone", Version: "2.0.0", Manifest: "",
		Prune: &api.PruneSpec{Kinds: []api.PruneKindSpec{{Kind: "ConfigMap"}, {Group: "apps", Kind: "Deployment", Namespaces: []string{ns}}}}})
	res := run(t, c, v2)
	if res.err != nil {
		t.Fatalf("v2: %v", res.err)
	}
	if diff := cmp.Diff(res.of(EventPruned), []string{
		"gone: Pruned ConfigMap gone-app/a",
		"gone: Pruned ConfigMap gone-app/b",
		"gone: Pruned Deployment.apps gone-app/d",
	}); diff != "" {
		t.Errorf("pruned (-got +want):\n%s", diff)
	}
	if got := configMapNames(t, ns); len(got) != 0 {
		t.Errorf("ConfigMaps left: %v", got)
	}
	want := fmt.Sprintf(`{"version":"2.0.0","channel":%q,"manifestHash":%q,"systemGeneration":1,"inventory":{"identity":"channels.kos.example.com/addon=gone"}}`, v2, HashManifest(nil))
	if got := recordOf(t, "kube-system", "gone"); got != want {
		t.Errorf("record = %s, want %s", got, want)
	}
}

func writeRawRecord(t *testing.T, namespace, name, value string) {
	t.Helper()
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{AnnotationPrefix + name: value}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kube(t).CoreV1().Namespaces().Patch(context.Background(), namespace, "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestIntegrationFailingManifestChangesNoRecordAndPrunesNothing(t *testing.T) {
	const ns = "halfway-app"
	createNamespace(t, ns)
	dir := t.TempDir()
	c := newTestClient(t)
	v1 := channelstest.WriteChannel(t, dir, "v1.yaml", channelstest.Release{Name: "halfway", Version: "1.0.0",
		Manifest: channelstest.Manifest(channelstest.ConfigMap(ns, "old", "1"), channelstest.ConfigMap(ns, "a", "1"))})
	if res := run(t, c, v1); res.err != nil {
		t.Fatalf("v1: %v", res.err)
	}
	recordV1 := recordOf(t, "kube-system", "halfway")

	// The Deployment has no selector: the server refuses it, after the
	// ConfigMaps of an earlier phase went in.
	broken := fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: broken, namespace: %s}
spec:
  template:
    metadata: {labels: {app: broken}}
    spec: {containers: [{name: c, image: %s}]}
`, ns, channelstest.PauseImage)
	v2 := channelstest.WriteChannel(t, dir, "v2.yaml", channelstest.Release{Name: "halfway", Version: "2.0.0",
		Manifest: channelstest.Manifest(channelstest.ConfigMap(ns, "a", "2"), channelstest.ConfigMap(ns, "b", "2"), broken)})
	res := run(t, c, v2)
	var applyErr *ApplyError
	if !errors.As(res.err, &applyErr) {
		t.Fatalf("v2: error %v, want an *ApplyError", res.err)
	}
	for _, want := range []string{`addon "halfway"`, "Deployment.apps halfway-app/broken", "spec.selector: Required value"} {
		if !strings.Contains(res.err.Error(), want) {
			t.Errorf("v2 error %q does not contain %q", res.err, want)
		}
	}
	if got := recordOf(t, "kube-system", "halfway"); got != recordV1 {
		t.Errorf("record after a failed run = %s, want it unchanged: %s", got, recordV1)
	}
	if diff := cmp.Diff(configMapNames(t, ns), []string{"a", "b", "old"}); diff != "" {
		t.Errorf("ConfigMaps after a failed run (-got +want):\n%s", diff)
	}
	if got := res.of(EventPruned); len(got) != 0 {
		t.Errorf("a failed run pruned %v", got)
	}

	// Corrected, the next run converges: record written, old pruned.
	v3 := channelstest.WriteChannel(t, dir, "v3.yaml", channelstest.Release{Name: "halfway", Version: "2.0.1",
		Manifest: channelstest.Manifest(channelstest.ConfigMap(ns, "a", "2"), channelstest.ConfigMap(ns, "b", "2"), deployment(ns, "broken"))})
	res = run(t, c, v3)
	if res.err != nil {
		t.Fatalf("v3: %v", res.err)
	}
	if diff := cmp.Diff(res.of(EventPruned), []string{"halfway: Pruned ConfigMap halfway-app/old"}); diff != "" {
		t.Errorf("v3 pruned (-got +want):\n%s", diff)
	}
	if rec := recordOf(t, "kube-system", "halfway"); !strings.Contains(rec, `"version":"2.0.1"`) {
		t.Errorf("record after the corrected run = %s, want version 2.0.1", rec)
	}
}

func TestIntegrationHashMismatchAppliesNothing(t *testing.T) {
	dir := t.TempDir()
	wrong := HashManifest([]byte("something else"))
	man := channelstest.Manifest(channelstest.ConfigMap("default", "tampered-a", "1"), channelstest.ConfigMap("default", "tampered-b", "1"))
	loc := channelstest.WriteChannel(t, dir, "channel.yaml",
		channelstest.Release{Name: "tampered", Version: "1.0.0", Manifest: man, Hash: wrong},
		channelstest.Release{Name: "untampered", Version: "1.0.0", Manifest: channelstest.ConfigMap("default", "untampered", "1")},
	)
	res := run(t, newTestClient(t), loc)
	if res.err == nil {
		t.Fatal("applying a manifest whose hash differs succeeded")
	}
	for _, want := range []string{`addon "tampered"`, wrong, HashManifest([]byte(man))} {
		if !strings.Contains(res.err.Error(), want) {
			t.Errorf("error %q does not contain %q", res.err, want)
		}
	}
	for _, name := range []string{"tampered-a", "tampered-b"} {
		_, err := kube(t).CoreV1().ConfigMaps("default").Get(context.Background(), name, metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("ConfigMap %s of a refused manifest: got error %v, want NotFound", name, err)
		}
	}
	if got := recordOf(t, "kube-system", "tampered"); got != "" {
		t.Errorf("record of a refused addon = %s, want none", got)
	}
	// The other addon of the channel went on.
	if got := recordOf(t, "kube-system", "untampered"); got == "" {
		t.Errorf("the addon after the refused one was not applied")
	}
}

func TestIntegrationEmptySelectorRefusesToPrune(t *testing.T) {
	dir := t.TempDir()
	loc := channelstest.WriteChannel(t, dir, "channel.yaml", channelstest.Release{Name: "noselector", Version: "1.0.0",
		Manifest: channelstest.ConfigMap("default", "noselector", "1"),
		Prune:    &api.PruneSpec{Kinds: []api.PruneKindSpec{{Kind: "ConfigMap"}}}})
	// Load keeps the selector writeChannel gives; drop it as a channel
	// without one would.
	releases, err := Load(context.Background(), NewFetcher(), loc)
	if err != nil {
		t.Fatal(err)
	}
	releases[0].Selector = nil
	c := newTestClient(t)
	plan, err := c.Plan(context.Background(), releases)
	if err != nil {
		t.Fatal(err)
	}
	err = c.Apply(context.Background(), plan, ApplyOptions{})
	if err == nil || !strings.Contains(err.Error(), "empty selector") {
		t.Fatalf("Apply() error = %v, want a refusal naming the empty selector", err)
	}
	_, err = kube(t).CoreV1().ConfigMaps("default").Get(context.Background(), "noselector", metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("ConfigMap of a refused addon: got error %v, want NotFound", err)
	}
}

func TestIntegrationKOpsRecord(t *testing.T) {
	const recordNS = "kops-records"
	createNamespace(t, recordNS)
	dir := t.TempDir()
	c := newTestClient(t)
	manA := channelstest.ConfigMap("default", "kopsy", "a")
	// kOps 1.22 and later write no version.
	writeRawRecord(t, recordNS, "kopsy", fmt.Sprintf(
		`{"channel":"s3://state/cluster/addons/bootstrap-channel.yaml","id":"k8s-1.16","manifestHash":%q,"systemGeneration":1}`,
		HashManifest([]byte(manA))))

	same := channelstest.WriteChannel(t, dir, "same.yaml", channelstest.Release{Name: "kopsy", Version: "1.0.0", ID: "k8s-1.16", Namespace: recordNS, Manifest: manA})
	res := run(t, c, same)
	if res.err != nil {
		t.Fatal(res.err)
	}
	if len(res.plan.Items) != 1 {
		t.Fatalf("plan has %d items, want 1", len(res.plan.Items))
	}
	it := res.plan.Items[0]
	if it.Current == nil || it.Current.ID != "k8s-1.16" || it.Current.Version != "" {
		t.Errorf("kOps record read as %+v", it.Current)
	}
	if it.Decision.Apply {
		t.Errorf("same id and hash over a kOps record: decision %+v, want no apply", it.Decision)
	}

	manB := channelstest.ConfigMap("default", "kopsy", "b")
	changed := channelstest.WriteChannel(t, dir, "changed.yaml", channelstest.Release{Name: "kopsy", Version: "1.0.0", ID: "k8s-1.16", Namespace: recordNS, Manifest: manB})
	res = run(t, c, changed)
	if res.err != nil {
		t.Fatal(res.err)
	}
	if got := res.plan.Items[0].Decision; !got.Apply || got.Reason != install.ReasonManifestChanged {
		t.Errorf("another hash over a kOps record: decision %+v, want apply (%s)", got, install.ReasonManifestChanged)
	}
	var kops channelstest.KOpsRecord
	raw := recordOf(t, recordNS, "kopsy")
	if err := json.Unmarshal([]byte(raw), &kops); err != nil {
		t.Fatalf("kOps cannot parse our record %s: %v", raw, err)
	}
	version, channel := "1.0.0", changed
	want := channelstest.KOpsRecord{Version: &version, Channel: &channel, ID: "k8s-1.16", ManifestHash: HashManifest([]byte(manB)), SystemGeneration: 1}
	if diff := cmp.Diff(kops, want); diff != "" {
		t.Errorf("our record as kOps reads it (-got +want):\n%s", diff)
	}
}

func TestIntegrationPruneSkipsKindsNoLongerServed(t *testing.T) {
	dir := t.TempDir()
	writeRawRecord(t, "kube-system", "ghost",
		`{"version":"0.1.0","systemGeneration":1,"inventory":{"kinds":["Gadget.gone.example.com","ConfigMap"],"namespaces":["default"]}}`)
	loc := channelstest.WriteChannel(t, dir, "channel.yaml", channelstest.Release{Name: "ghost", Version: "0.2.0", Manifest: channelstest.ConfigMap("default", "ghost", "1")})
	res := run(t, newTestClient(t), loc)
	if res.err != nil {
		t.Fatal(res.err)
	}
	if diff := cmp.Diff(res.of(EventNote), []string{"ghost: Not pruning Gadget.gone.example.com: the server does not serve this kind"}); diff != "" {
		t.Errorf("notes (-got +want):\n%s", diff)
	}
}

func TestIntegrationNeedsRollingUpdateMarksNodes(t *testing.T) {
	ctx := context.Background()
	nodes := kube(t).CoreV1().Nodes()
	for _, n := range []*corev1.Node{
		{ObjectMeta: metav1.ObjectMeta{Name: "test-cp", Labels: map[string]string{ControlPlaneLabel: ""}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "test-worker"}},
	} {
		if _, err := nodes.Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = nodes.Delete(context.Background(), n.Name, metav1.DeleteOptions{}) })
	}
	marked := func() []string {
		list, err := nodes.List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, n := range list.Items {
			if _, ok := n.Annotations[NeedsUpdateAnnotation]; ok {
				out = append(out, n.Name)
			}
		}
		return out
	}
	dir := t.TempDir()
	c := newTestClient(t)
	v1 := channelstest.WriteChannel(t, dir, "v1.yaml", channelstest.Release{Name: "rolling", Version: "1.0.0", NeedsRollingUpdate: api.NeedsRollingUpdateWorkers,
		Manifest: channelstest.ConfigMap("default", "rolling", "1")})
	if res := run(t, c, v1); res.err != nil {
		t.Fatal(res.err)
	}
	if got := marked(); len(got) != 0 {
		t.Errorf("a first install marked nodes %v", got)
	}
	v2 := channelstest.WriteChannel(t, dir, "v2.yaml", channelstest.Release{Name: "rolling", Version: "1.1.0", NeedsRollingUpdate: api.NeedsRollingUpdateWorkers,
		Manifest: channelstest.ConfigMap("default", "rolling", "2")})
	if res := run(t, c, v2); res.err != nil {
		t.Fatal(res.err)
	}
	if diff := cmp.Diff(marked(), []string{"test-worker"}); diff != "" {
		t.Errorf("nodes marked by an update (-got +want):\n%s", diff)
	}
}
