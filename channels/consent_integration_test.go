package channels

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/kos-sdn/kos/channels/install"
	"github.com/kos-sdn/kos/channels/internal/channelstest"
	"github.com/kos-sdn/kos/tools/testenv"
)

// pendingOf returns the raw pending annotation of an addon on kube-system,
// "" when there is none.
func pendingOf(t *testing.T, k kubernetes.Interface, name string) string {
	t.Helper()
	ns, err := k.CoreV1().Namespaces().Get(context.Background(), "kube-system", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ns.Annotations[install.InventoryAnnotationPrefix+name]
}

// configValueOf returns the value of key "key" of a ConfigMap.
func configValueOf(t *testing.T, k kubernetes.Interface, ns, name string) string {
	t.Helper()
	cm, err := k.CoreV1().ConfigMaps(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cm.Data["key"]
}

// eventsFor returns the messages of the Events of a reason on Namespace
// kube-system that name addon.
func eventsFor(t *testing.T, k kubernetes.Interface, reason, addon string) []string {
	t.Helper()
	list, err := k.CoreV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{FieldSelector: "reason=" + reason + ",involvedObject.kind=Namespace,involvedObject.name=kube-system"})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		if strings.HasPrefix(e.Message, "addon "+addon+": ") {
			out = append(out, e.Message)
		}
	}
	return out
}

// TestIntegrationRollbackNeedsConsent installs release 1 of an addon and
// upgrades it to release 2, which installs successfully; the channel of
// release 1 then changes nothing (the downgrade is refused, and the plan
// says so) until the operator consents with --allow-downgrade.
func TestIntegrationRollbackNeedsConsent(t *testing.T) {
	const ns = "consent-app"
	testenv.Shared(t)
	k := kube(t)
	ours := tool{name: "ours", bin: testenv.Build(t, "cmd/channels"), kubeconfig: testenv.Shared(t).Kubeconfig, home: t.TempDir()}
	dir := t.TempDir()
	release := func(version, value string) string {
		return writeSelectorChannel(t, dir, "v"+version+".yaml", selRelease{name: "consent", version: version, selector: channelstest.SelectorOf("consent"),
			manifest: channelstest.Manifest(channelstest.Namespace(ns), channelstest.ConfigMap(ns, "consent-config", value))})
	}
	v1, v2 := release("1.0.0", "1"), release("2.0.0", "2")
	ours.mustRun(t, "apply", "channel", v1, "--yes")
	ours.mustRun(t, "apply", "channel", v2, "--yes")

	out := ours.mustRun(t, "apply", "channel", v1, "--yes")
	if !strings.Contains(out, "1.0.0 skipped: downgrade refused") || !strings.Contains(out, "No update required") {
		t.Errorf("release 1 over release 2 without consent:\n%s", out)
	}
	if got := configValueOf(t, k, ns, "consent-config"); got != "2" {
		t.Errorf("the refused rollback changed consent-config to %q", got)
	}
	if got := recordOf(t, "kube-system", "consent"); !strings.Contains(got, `"version":"2.0.0"`) {
		t.Errorf("record after the refused rollback = %s, want release 2", got)
	}

	out = ours.mustRun(t, "apply", "channel", v1, "--yes", "--allow-downgrade")
	if !strings.Contains(out, "consent: Updated 2.0.0 -> 1.0.0") {
		t.Errorf("release 1 over release 2 with --allow-downgrade:\n%s", out)
	}
	if got := configValueOf(t, k, ns, "consent-config"); got != "1" {
		t.Errorf("after the rollback consent-config holds %q, want 1", got)
	}
	if got := recordOf(t, "kube-system", "consent"); !strings.Contains(got, `"version":"1.0.0"`) {
		t.Errorf("record after the rollback = %s, want release 1", got)
	}
}

// TestIntegrationDaemonDoesNotRollBack installs release 1 of an addon and
// lets release 2 fail its readiness wait (a Deployment no node runs). A
// daemon pass on the channel of release 1 (apply channel --yes --drift,
// which runs one) rolls nothing back: it fails naming the addon and why,
// posts a Warning Event RollbackRefused on Namespace kube-system once, and leaves
// release 2's objects, the record of release 1 and the pending release 2.
// With --allow-downgrade the daemon rolls back.
func TestIntegrationDaemonDoesNotRollBack(t *testing.T) {
	const ns = "unattended-app"
	env := testenv.Shared(t)
	k := kube(t)
	ours := tool{name: "ours", bin: testenv.Build(t, "cmd/channels"), kubeconfig: env.Kubeconfig, home: t.TempDir()}
	dir := t.TempDir()
	sel := channelstest.SelectorOf("unattended")
	v1 := writeSelectorChannel(t, dir, "v1.yaml", selRelease{name: "unattended", version: "1.0.0", selector: sel,
		manifest: channelstest.Manifest(channelstest.Namespace(ns), channelstest.ConfigMap(ns, "unattended-config", "1"))})
	v2 := writeSelectorChannel(t, dir, "v2.yaml", selRelease{name: "unattended", version: "2.0.0", selector: sel,
		manifest: channelstest.Manifest(channelstest.Namespace(ns), channelstest.ConfigMap(ns, "unattended-config", "2"), channelstest.DeploymentWithReplicas(ns, "unattended-extra", 1))})

	ours.mustRun(t, "apply", "channel", v1, "--yes")
	if out, code := ours.run(t, "apply", "channel", v2, "--yes", "--timeout=3s"); code != 1 {
		t.Fatalf("release 2 that never becomes ready: exit %d, want 1:\n%s", code, out)
	}
	record := recordOf(t, "kube-system", "unattended")
	pending := pendingOf(t, k, "unattended")
	if !strings.Contains(pending, `"version":"2.0.0"`) || !strings.Contains(pending, `"applied":true`) {
		t.Fatalf("pending release after release 2 timed out = %q, want 2.0.0, applied", pending)
	}

	for pass := 1; pass <= 2; pass++ {
		out, code := ours.run(t, "apply", "channel", v1, "--yes", "--drift=report")
		if code != 1 || !strings.Contains(out, "rollback refused: 2.0.0 did not finish") || !strings.Contains(out, `addon "unattended"`) {
			t.Errorf("daemon pass %d on release 1 over the failed release 2: exit %d, want 1 naming the refused rollback:\n%s", pass, code, out)
		}
	}
	if got := configValueOf(t, k, ns, "unattended-config"); got != "2" {
		t.Errorf("the daemon rolled unattended-config back to %q", got)
	}
	if _, err := k.AppsV1().Deployments(ns).Get(context.Background(), "unattended-extra", metav1.GetOptions{}); err != nil {
		t.Errorf("release 2's Deployment after the daemon's passes: %v", err)
	}
	if got := recordOf(t, "kube-system", "unattended"); got != record {
		t.Errorf("record after the daemon's passes = %s, want %s", got, record)
	}
	if got := pendingOf(t, k, "unattended"); got != pending {
		t.Errorf("pending release after the daemon's passes = %s, want %s", got, pending)
	}
	// Each run is a new daemon: each posts its Event once.
	if got := eventsFor(t, k, "RollbackRefused", "unattended"); len(got) != 2 || !strings.Contains(got[0], "rollback refused: 2.0.0 did not finish") {
		t.Errorf("RollbackRefused events = %q, want one per daemon naming the refused rollback", got)
	}

	out := ours.mustRun(t, "apply", "channel", v1, "--yes", "--drift=report", "--allow-downgrade")
	if !strings.Contains(out, "unattended: Rolled back to 1.0.0 (2.0.0 did not finish)") {
		t.Errorf("daemon pass with --allow-downgrade:\n%s", out)
	}
	if got := configValueOf(t, k, ns, "unattended-config"); got != "1" {
		t.Errorf("after the consented rollback unattended-config holds %q, want 1", got)
	}
	if got := pendingOf(t, k, "unattended"); got != "" {
		t.Errorf("pending release after the consented rollback: %s", got)
	}
}

// TestIntegrationPendingReadyIsCompleted applies release 2 of an addon
// over release 1 with a PersistentVolumeClaim that no volume binds, so its
// readiness wait times out; then a PersistentVolume for it is made by hand
// and kube-controller-manager binds the claim. The channel of release 1 no
// longer rolls release 2 back: the plan and the run complete it (record it
// as installed) without applying its objects again, and going back from
// it is then a downgrade, refused without consent.
func TestIntegrationPendingReadyIsCompleted(t *testing.T) {
	const ns = "complete-app"
	env, err := testenv.Start(context.Background(), testenv.Options{Components: []string{testenv.KubeControllerManager}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	k, err := kubernetes.NewForConfig(env.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ours := tool{name: "ours", bin: testenv.Build(t, "cmd/channels"), kubeconfig: env.Kubeconfig, home: t.TempDir()}
	dir := t.TempDir()
	sel := channelstest.SelectorOf("complete")
	const class = "complete-by-hand"
	claim := fmt.Sprintf(`apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: complete-data, namespace: %s}
spec: {storageClassName: %s, accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Mi}}}
`, ns, class)
	v1 := writeSelectorChannel(t, dir, "v1.yaml", selRelease{name: "complete", version: "1.0.0", selector: sel,
		manifest: channelstest.Manifest(channelstest.Namespace(ns), channelstest.ConfigMap(ns, "complete-config", "1"))})
	v2 := writeSelectorChannel(t, dir, "v2.yaml", selRelease{name: "complete", version: "2.0.0", selector: sel,
		manifest: channelstest.Manifest(channelstest.Namespace(ns), channelstest.ConfigMap(ns, "complete-config", "2"), claim)})

	ours.mustRun(t, "apply", "channel", v1, "--yes")
	out, code := ours.run(t, "apply", "channel", v2, "--yes", "--timeout=3s")
	if code != 1 || !strings.Contains(out, "PersistentVolumeClaim "+ns+"/complete-data") {
		t.Fatalf("release 2 whose claim is not bound: exit %d, want 1 naming the claim:\n%s", code, out)
	}

	// The claim becomes ready: a volume of its class, made by hand.
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "complete-by-hand"},
		Spec: corev1.PersistentVolumeSpec{
			StorageClassName:       class,
			AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Mi")},
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/tmp/complete-by-hand"}},
		},
	}
	if _, err := k.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		c, err := k.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "complete-data", metav1.GetOptions{})
		return err == nil && c.Status.Phase == corev1.ClaimBound, err
	})
	if err != nil {
		t.Fatalf("the claim was not bound: %v", err)
	}
	// The volume controller writes the claim once more after it is
	// Bound (on a loaded machine, after this test read it): the claim
	// to compare with is one that stayed as it is for two seconds.
	var claimBefore *corev1.PersistentVolumeClaim
	err = wait.PollUntilContextTimeout(ctx, 2*time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		c, err := k.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "complete-data", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		stable := claimBefore != nil && claimBefore.ResourceVersion == c.ResourceVersion
		claimBefore = c
		return stable, nil
	})
	if err != nil {
		t.Fatalf("the claim did not settle: %v", err)
	}

	out = ours.mustRun(t, "apply", "channel", v1)
	if !strings.Contains(out, "2.0.0 (complete: 2.0.0 became ready)") || strings.Contains(out, "rollback") {
		t.Errorf("the plan of release 1 over release 2, ready since its wait ended, does not complete release 2:\n%s", out)
	}
	out = ours.mustRun(t, "apply", "channel", v1, "--yes")
	if !strings.Contains(out, "complete: Completed 2.0.0") {
		t.Errorf("release 1 over release 2, ready since its wait ended:\n%s", out)
	}
	if got := recordIn(t, k, "complete"); !strings.Contains(got, `"version":"2.0.0"`) {
		t.Errorf("record after completing = %s, want release 2", got)
	}
	if got := pendingOf(t, k, "complete"); got != "" {
		t.Errorf("pending release after completing: %s", got)
	}
	if got := configValueOf(t, k, ns, "complete-config"); got != "2" {
		t.Errorf("complete-config after completing holds %q, want release 2's", got)
	}
	claimAfter, err := k.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "complete-data", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(claimAfter.ResourceVersion, claimBefore.ResourceVersion); diff != "" {
		t.Errorf("completing applied the claim again (resourceVersion -got +want):\n%s", diff)
	}

	out = ours.mustRun(t, "apply", "channel", v1, "--yes")
	if !strings.Contains(out, "1.0.0 skipped: downgrade refused") {
		t.Errorf("release 1 over the completed release 2, without consent:\n%s", out)
	}
}

// recordIn returns the raw install record of an addon on kube-system of
// the cluster of k.
func recordIn(t *testing.T, k kubernetes.Interface, name string) string {
	t.Helper()
	ns, err := k.CoreV1().Namespaces().Get(context.Background(), "kube-system", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ns.Annotations[AnnotationPrefix+name]
}

// TestIntegrationUpgradePathRefusesJump installs release 0.1.0 of an
// addon, then applies a channel of 0.1.0, 0.2.0 and 0.3.0, which upgrades
// only from 0.2.0 on (upgradesFrom): the plan and the run refuse the jump
// with exit 1, naming 0.2.0 as the release to go through, and change
// nothing. Through 0.2.0, the same channel then reaches 0.3.0.
func TestIntegrationUpgradePathRefusesJump(t *testing.T) {
	const ns = "path-app"
	env := testenv.Shared(t)
	k := kube(t)
	ours := tool{name: "ours", bin: testenv.Build(t, "cmd/channels"), kubeconfig: env.Kubeconfig, home: t.TempDir()}
	dir := t.TempDir()
	rel := func(version, upgradesFrom string) channelstest.Release {
		return channelstest.Release{Name: "path", Version: version, UpgradesFrom: upgradesFrom, Manifest: channelstest.Manifest(channelstest.Namespace(ns), channelstest.ConfigMap(ns, "path-config", version))}
	}
	first := channelstest.WriteChannel(t, dir, "first.yaml", rel("0.1.0", ""))
	second := channelstest.WriteChannel(t, dir, "second.yaml", rel("0.1.0", ""), rel("0.2.0", ""))
	all := channelstest.WriteChannel(t, dir, "all.yaml", rel("0.1.0", ""), rel("0.2.0", ""), rel("0.3.0", "0.2.0"))

	ours.mustRun(t, "apply", "channel", first, "--yes")
	const refusal = "0.3.0 skipped: upgrade path: 0.3.0 upgrades from 0.2.0 or later, not from 0.1.0: upgrade to 0.2.0 first (a channel whose newest path is 0.2.0)"
	for _, args := range [][]string{{"apply", "channel", all}, {"apply", "channel", all, "--yes"}} {
		out, code := ours.run(t, args...)
		if code != 1 || !strings.Contains(out, refusal) || !strings.Contains(out, `error: 1 addon is left behind the channels: addon "path": upgrade path:`) {
			t.Errorf("%s over 0.1.0: exit %d, want 1 with %q and the error:\n%s", strings.Join(args, " "), code, refusal, out)
		}
	}
	if got := configValueOf(t, k, ns, "path-config"); got != "0.1.0" {
		t.Errorf("the refused jump changed path-config to %q", got)
	}
	if got := recordOf(t, "kube-system", "path"); !strings.Contains(got, `"version":"0.1.0"`) {
		t.Errorf("record after the refused jump = %s", got)
	}

	ours.mustRun(t, "apply", "channel", second, "--yes")
	out := ours.mustRun(t, "apply", "channel", all, "--yes")
	if !strings.Contains(out, "path: Updated 0.2.0 -> 0.3.0") {
		t.Errorf("0.3.0 over 0.2.0:\n%s", out)
	}
}

// TestIntegrationNoReleaseFits applies a channel whose only range of one
// addon ends below the cluster's Kubernetes version, next to an addon that
// fits: the plan and the run apply the fitting addon, and fail with exit 1
// naming the cluster's version and the range offered, never "No update
// required". (A daemon's pass: TestIntegrationDaemonNoReleaseFits in
// channels/daemon.)
func TestIntegrationNoReleaseFits(t *testing.T) {
	const ns = "cliff-app"
	env := testenv.Shared(t)
	k := kube(t)
	info, err := k.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	version, err := ServerVersion(info.GitVersion)
	if err != nil {
		t.Fatal(err)
	}
	below := fmt.Sprintf(">=1.20.0 <1.%d.0", version.Minor)
	ours := tool{name: "ours", bin: testenv.Build(t, "cmd/channels"), kubeconfig: env.Kubeconfig, home: t.TempDir()}
	dir := t.TempDir()
	loc := channelstest.WriteChannel(t, dir, "cliff.yaml",
		channelstest.Release{Name: "cliff", Version: "0.3.0", ID: "k8s-1.20", KubernetesVersion: below, Manifest: channelstest.Manifest(channelstest.Namespace(ns), channelstest.ConfigMap(ns, "cliff-config", "0.3.0"))},
		channelstest.Release{Name: "cliff-fits", Version: "1.0.0", Manifest: channelstest.Manifest(channelstest.Namespace(ns), channelstest.ConfigMap(ns, "cliff-fits", "1.0.0"))},
	)
	want := fmt.Sprintf(`addon "cliff": no release fits Kubernetes %s: the channels offer 0.3.0 (k8s-1.20) for %s`, version, below)

	for _, args := range [][]string{{"apply", "channel", loc}, {"apply", "channel", loc, "--yes"}, {"apply", "channel", loc, "--yes"}} {
		out, code := ours.run(t, args...)
		if code != 1 || !strings.Contains(out, want) || strings.Contains(out, "No update required") {
			t.Errorf("%s: exit %d, want 1 with %q:\n%s", strings.Join(args, " "), code, want, out)
		}
	}
	if got := recordOf(t, "kube-system", "cliff-fits"); !strings.Contains(got, `"version":"1.0.0"`) {
		t.Errorf("the addon that fits was not applied next to the one that does not: record %q", got)
	}
}
