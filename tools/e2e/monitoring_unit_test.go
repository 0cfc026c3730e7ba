package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kos-sdn/kos/channels"
	"github.com/kos-sdn/kos/release/api"
)

// TestMonitoringReleaseIsShipped renders kos-monitoring as
// TestIntegrationMonitoring installs it and compares it with the shipped
// manifest: every object is the same but for Prometheus's image and
// retention and Grafana's replicas, so that the cluster test tries what
// ships.
func TestMonitoringReleaseIsShipped(t *testing.T) {
	if !slices.Contains(api.Images, upstreamPrometheus) {
		t.Fatalf("the release configuration cannot replace %s (release/api.Images: %v)", upstreamPrometheus, api.Images)
	}
	const prometheus = "registry.test:5000/kos/prometheus:3.16.0@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	rendered, err := renderMonitoring(t.Context(), t.TempDir(), "registry.test:5000/kos", prometheus)
	if err != nil {
		t.Fatal(err)
	}
	shipped, err := os.ReadFile(filepath.Join("..", "..", "addons", monitoringManifest))
	if err != nil {
		t.Fatal(err)
	}
	got, want := objectsByKey(t, rendered), objectsByKey(t, shipped)

	// The three differences, checked, then put back as shipped.
	const prom, grafana = "Deployment.apps/kos-monitoring/prometheus", "Deployment.apps/kos-monitoring/grafana"
	if image := onlyContainerField(t, got[prom], "image"); image != prometheus {
		t.Errorf("the rendered Prometheus runs %s, want %s", image, prometheus)
	}
	setOnlyContainerField(t, got[prom], "image", onlyContainerField(t, want[prom], "image"))
	retention := "--storage.tsdb.retention.time=" + monitoringRetention
	if args := onlyContainerField(t, got[prom], "args"); !slices.Contains(args.([]any), any(retention)) {
		t.Errorf("the rendered Prometheus runs with %v, want %s among them", args, retention)
	}
	setOnlyContainerField(t, got[prom], "args", onlyContainerField(t, want[prom], "args"))
	if replicas, _, _ := unstructured.NestedInt64(got[grafana], "spec", "replicas"); replicas != 0 {
		t.Errorf("the rendered Grafana has %d replicas, want 0", replicas)
	}
	shippedReplicas, found, err := unstructured.NestedFieldCopy(want[grafana], "spec", "replicas")
	if err != nil || !found {
		t.Fatalf("the shipped Grafana's replicas: %v, %v", found, err)
	}
	if err := unstructured.SetNestedField(got[grafana], shippedReplicas, "spec", "replicas"); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the render beyond the image and Grafana's replicas (-shipped +rendered):\n%s", diff)
	}
}

// objectsByKey decodes a manifest into its objects' content, by
// Kind.group/namespace/name.
func objectsByKey(t *testing.T, manifest []byte) map[string]map[string]any {
	t.Helper()
	objs, err := channels.DecodeObjects(manifest)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]any{}
	for _, o := range objs {
		out[objectKey(o.GroupVersionKind().GroupKind(), o)] = o.Object
	}
	return out
}

// onlyContainerField returns a field (image, args) of the only container of a
// Deployment.
func onlyContainerField(t *testing.T, deployment map[string]any, field string) any {
	t.Helper()
	containers, _, err := unstructured.NestedSlice(deployment, "spec", "template", "spec", "containers")
	if err != nil || len(containers) != 1 {
		t.Fatalf("want one container in %v (%v)", deployment, err)
	}
	return containers[0].(map[string]any)[field]
}

// setOnlyContainerField sets a field of the only container of a Deployment.
func setOnlyContainerField(t *testing.T, deployment map[string]any, field string, value any) {
	t.Helper()
	containers, _, err := unstructured.NestedSlice(deployment, "spec", "template", "spec", "containers")
	if err != nil || len(containers) != 1 {
		t.Fatalf("want one container in %v (%v)", deployment, err)
	}
	containers[0].(map[string]any)[field] = value
	if err := unstructured.SetNestedSlice(deployment, containers, "spec", "template", "spec", "containers"); err != nil {
		t.Fatal(err)
	}
}
