package channels

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/kos-sdn/kos/tools/testenv"
)

// deploymentWithReplicas is a Deployment of the pause image with the given
// number of replicas.
func deploymentWithReplicas(namespace, name string, replicas int) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: %[2]s, namespace: %[1]s}
spec:
  replicas: %[4]d
  selector: {matchLabels: {app: %[2]s}}
  template:
    metadata: {labels: {app: %[2]s}}
    spec: {containers: [{name: c, image: %[3]s}]}
`, namespace, name, pauseImage, replicas)
}

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
	ours := tool{name: "ours", bin: ourChannels(t), kubeconfig: env.Kubeconfig, home: t.TempDir()}
	dir := t.TempDir()
	sel := selectorOf("ready")
	release := func(version string, replicas int) string {
		return writeSelectorChannel(t, dir, "v"+version+".yaml", selRelease{name: "ready", version: version, selector: sel,
			manifest: manifest(namespace(ns), configMap(ns, "ready-config", version), deploymentWithReplicas(ns, "ready", replicas))})
	}
	recordNow := func() string {
		t.Helper()
		c, err := NewClient(env.RESTConfig)
		if err != nil {
			t.Fatal(err)
		}
		rs, err := c.readRecords(context.Background(), []string{"kube-system"})
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
