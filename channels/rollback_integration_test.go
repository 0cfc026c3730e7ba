package channels

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kos-sdn/kos/channels/install"
	"github.com/kos-sdn/kos/channels/internal/channelstest"
	"github.com/kos-sdn/kos/tools/testenv"
)

// TestIntegrationRollbackAfterFailedUpgrade installs release 1 of an addon,
// applies release 2, which changes a ConfigMap and adds a ConfigMap and a
// Deployment that never becomes ready (no node runs its pod), and then
// applies the channel of release 1 again. Release 2 fails its readiness
// wait and keeps release 1's record, but its pending release stays: the
// channel of release 1 then applies, by hand and without a flag (the plan
// names it a rollback), restores release 1's ConfigMap, prunes what only
// release 2 added, and leaves the record of release 1 and no pending
// release. Going below the record is a downgrade, refused unless
// --allow-downgrade is given.
func TestIntegrationRollbackAfterFailedUpgrade(t *testing.T) {
	const ns = "rollback-app"
	env := testenv.Shared(t)
	ours := tool{name: "ours", bin: testenv.Build(t, "cmd/channels"), kubeconfig: env.Kubeconfig, home: t.TempDir()}
	dir := t.TempDir()
	sel := channelstest.SelectorOf("rollback")
	release := func(version, m string) string {
		return writeSelectorChannel(t, dir, "v"+version+".yaml", selRelease{name: "rollback", version: version, selector: sel, manifest: m})
	}
	v1 := release("1.0.0", channelstest.Manifest(channelstest.Namespace(ns), channelstest.ConfigMap(ns, "rollback-config", "1")))
	v2 := release("2.0.0", channelstest.Manifest(channelstest.Namespace(ns), channelstest.ConfigMap(ns, "rollback-config", "2"), channelstest.ConfigMap(ns, "rollback-extra", "2"),
		channelstest.DeploymentWithReplicas(ns, "rollback-extra", 1)))
	ctx := context.Background()
	k := kube(t)
	pendingNow := func() (string, bool) {
		t.Helper()
		obj, err := k.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		v, ok := obj.Annotations[install.InventoryAnnotationPrefix+"rollback"]
		return v, ok
	}
	configValue := func() string {
		t.Helper()
		cm, err := k.CoreV1().ConfigMaps(ns).Get(ctx, "rollback-config", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return cm.Data["key"]
	}

	ours.mustRun(t, "apply", "channel", v1, "--yes")
	first := recordOf(t, "kube-system", "rollback")
	if !strings.Contains(first, `"version":"1.0.0"`) {
		t.Fatalf("record after release 1: %s", first)
	}

	out, code := ours.run(t, "apply", "channel", v2, "--yes", "--timeout=5s")
	if code != 1 || !strings.Contains(out, "Deployment.apps rollback-app/rollback-extra") {
		t.Fatalf("release 2 that never becomes ready: exit %d, want 1, naming its Deployment; output:\n%s", code, out)
	}
	if got := recordOf(t, "kube-system", "rollback"); got != first {
		t.Errorf("record after the failed release = %s, want it unchanged: %s", got, first)
	}
	raw, ok := pendingNow()
	if !ok {
		t.Fatal("no pending release after the failed release 2")
	}
	p, err := install.ParseInventory(raw)
	if err != nil {
		t.Fatal(err)
	}
	if p.Version != "2.0.0" || !strings.EqualFold(p.ManifestHash, HashManifest([]byte(channelstest.Manifest(channelstest.Namespace(ns), channelstest.ConfigMap(ns, "rollback-config", "2"), channelstest.ConfigMap(ns, "rollback-extra", "2"), channelstest.DeploymentWithReplicas(ns, "rollback-extra", 1))))) {
		t.Errorf("pending release = %s, want version 2.0.0 and release 2's manifest hash", raw)
	}
	if diff := cmp.Diff(p.Kinds, []string{"ConfigMap", "Deployment.apps", "Namespace"}); diff != "" {
		t.Errorf("pending kinds (-got +want):\n%s", diff)
	}
	out = ours.mustRun(t, "get", "addons")
	if row := linesContaining(out, "rollback"); len(row) != 1 || !strings.Contains(row[0], " 1.0.0 ") || !strings.Contains(row[0], " 2.0.0") {
		t.Errorf("get addons does not show record 1.0.0 and pending 2.0.0:\n%s", out)
	}

	// The plan of release 1's channel applies it, and says why.
	out = ours.mustRun(t, "apply", "channel", v1)
	if strings.Contains(out, "No update required") || !strings.Contains(out, "1.0.0 (rollback: 2.0.0 did not finish)") {
		t.Errorf("the plan of release 1 after the failed release 2 does not apply it:\n%s", out)
	}
	if !strings.Contains(out, "prune ConfigMap rollback-app/rollback-extra") || !strings.Contains(out, "prune Deployment.apps rollback-app/rollback-extra") {
		t.Errorf("the plan does not show release 2's objects pruned:\n%s", out)
	}

	out = ours.mustRun(t, "apply", "channel", v1, "--yes")
	for _, want := range []string{
		"rollback: Rolled back to 1.0.0 (2.0.0 did not finish)",
		"rollback: Pruned ConfigMap rollback-app/rollback-extra",
		"rollback: Pruned Deployment.apps rollback-app/rollback-extra",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the rollback does not say %q:\n%s", want, out)
		}
	}
	if got := configValue(); got != "1" {
		t.Errorf("ConfigMap rollback-config after the rollback holds %q, want release 1's %q", got, "1")
	}
	if diff := cmp.Diff(configMapNames(t, ns), []string{"rollback-config"}); diff != "" {
		t.Errorf("ConfigMaps after the rollback (-got +want):\n%s", diff)
	}
	d, err := k.AppsV1().Deployments(ns).Get(ctx, "rollback-extra", metav1.GetOptions{})
	if err == nil && d.DeletionTimestamp == nil {
		t.Errorf("release 2's Deployment survived the rollback")
	} else if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	if got := recordOf(t, "kube-system", "rollback"); !strings.Contains(got, `"version":"1.0.0"`) {
		t.Errorf("record after the rollback = %s, want release 1", got)
	}
	if raw, ok := pendingNow(); ok {
		t.Errorf("a pending release is left after the rollback: %s", raw)
	}
	if out = ours.mustRun(t, "apply", "channel", v1, "--yes"); !strings.Contains(out, "No update required") {
		t.Errorf("release 1 again after the rollback:\n%s", out)
	}

	// Below the record is a downgrade: refused, unless the operator allows it.
	v0 := release("0.9.0", channelstest.Manifest(channelstest.Namespace(ns), channelstest.ConfigMap(ns, "rollback-config", "0")))
	if out = ours.mustRun(t, "apply", "channel", v0, "--yes"); !strings.Contains(out, "0.9.0 skipped: downgrade refused") {
		t.Errorf("an older release without --allow-downgrade:\n%s", out)
	}
	if got := configValue(); got != "1" {
		t.Errorf("a refused downgrade changed rollback-config to %q", got)
	}
	out = ours.mustRun(t, "apply", "channel", v0, "--yes", "--allow-downgrade")
	if !strings.Contains(out, "rollback: Updated 1.0.0 -> 0.9.0") {
		t.Errorf("--allow-downgrade did not apply the older release:\n%s", out)
	}
	if got := recordOf(t, "kube-system", "rollback"); !strings.Contains(got, `"version":"0.9.0"`) {
		t.Errorf("record after the allowed downgrade = %s", got)
	}
}

// linesContaining returns the lines of out that contain s.
func linesContaining(out, s string) []string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, s) {
			lines = append(lines, l)
		}
	}
	return lines
}
