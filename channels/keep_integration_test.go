package channels

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kos-sdn/kos/channels/channel"
	"github.com/kos-sdn/kos/channels/internal/channelstest"
	"github.com/kos-sdn/kos/channels/preview"
)

// sortStrings compares string slices whatever their order.
var sortStrings = cmpopts.SortSlices(func(a, b string) bool { return a < b })

// claim is a PersistentVolumeClaim with the given annotations.
func claim(namespace, name string, annotations ...string) string {
	an := ""
	if len(annotations) > 0 {
		an = ", annotations: {" + strings.Join(annotations, ", ") + "}"
	}
	return fmt.Sprintf("apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: %s, namespace: %s%s}\nspec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}\n", name, namespace, an)
}

// claimOf reads a claim; nil when it does not exist or is being deleted
// (without a controller manager, the claim's protection finalizer keeps a
// deleted claim).
func claimOf(t *testing.T, namespace, name string) *corev1.PersistentVolumeClaim {
	t.Helper()
	pvc, err := kube(t).CoreV1().PersistentVolumeClaims(namespace).Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	if pvc.DeletionTimestamp != nil {
		return nil
	}
	return pvc
}

// uidOf is the UID of a claim, "" when there is none.
func uidOf(pvc *corev1.PersistentVolumeClaim) types.UID {
	if pvc == nil {
		return ""
	}
	return pvc.UID
}

func TestIntegrationClaimsAndKeptObjectsSurvivePruneAndDelete(t *testing.T) {
	dir := t.TempDir()
	createNamespace(t, "keep-app")
	kept := fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: kept, namespace: keep-app, annotations: {%s: \"true\"}}\ndata: {key: v}\n", KeepAnnotation)
	v1 := channelstest.Manifest(channelstest.ConfigMap("keep-app", "plain", "1"), channelstest.ConfigMap("keep-app", "dropped", "1"), kept,
		claim("keep-app", "data"), claim("keep-app", "scratch", DeletableAnnotation+`: "true"`))
	loc := channelstest.WriteChannel(t, dir, "v1.yaml", channelstest.Release{Name: "keep-a", Version: "1.0.0", Manifest: v1})
	if res := run(t, newTestClient(t), loc); res.err != nil {
		t.Fatalf("install: %v", res.err)
	}
	data := claimOf(t, "keep-app", "data")
	if data == nil || claimOf(t, "keep-app", "scratch") == nil {
		t.Fatal("the claims were not applied")
	}

	// Release 2 drops all but one: the claim and the annotated ConfigMap
	// stay, the deletable claim and the other ConfigMap go, and the plan
	// said so.
	loc = channelstest.WriteChannel(t, dir, "v2.yaml", channelstest.Release{Name: "keep-a", Version: "2.0.0", Manifest: channelstest.ConfigMap("keep-app", "plain", "2")})
	var planned []string
	for _, p := range planAndPreview(t, newTestClient(t), loc) {
		for _, ch := range p.Objects {
			if ch.Action == preview.ActionPrune || ch.Action == preview.ActionKeep {
				planned = append(planned, string(ch.Action)+" "+ch.String())
			}
		}
	}
	wantPlan := []string{
		"keep ConfigMap keep-app/kept",
		"keep PersistentVolumeClaim keep-app/data",
		"prune ConfigMap keep-app/dropped",
		"prune PersistentVolumeClaim keep-app/scratch",
	}
	if diff := cmp.Diff(planned, wantPlan, sortStrings); diff != "" {
		t.Errorf("planned prunes (-got +want):\n%s", diff)
	}
	res := run(t, newTestClient(t), loc)
	if res.err != nil {
		t.Fatalf("upgrade: %v", res.err)
	}
	if diff := cmp.Diff(res.of(EventPruned), []string{"keep-a: Pruned ConfigMap keep-app/dropped", "keep-a: Pruned PersistentVolumeClaim keep-app/scratch"}); diff != "" {
		t.Errorf("pruned (-got +want):\n%s", diff)
	}
	if got := claimOf(t, "keep-app", "data"); uidOf(got) != data.UID {
		t.Errorf("claim data after the upgrade: %v, want the same claim (uid %s)", got, data.UID)
	}
	if claimOf(t, "keep-app", "scratch") != nil {
		t.Error("the deletable claim scratch was not pruned")
	}
	if diff := cmp.Diff(configMapNames(t, "keep-app"), []string{"kept", "plain"}); diff != "" {
		t.Errorf("ConfigMaps after the upgrade (-got +want):\n%s", diff)
	}
	// The record still lists where the kept objects are.
	if rec := recordOf(t, channel.DefaultNamespace, "keep-a"); !strings.Contains(rec, `"PersistentVolumeClaim"`) {
		t.Errorf("record %s lists no PersistentVolumeClaim", rec)
	}

	// Uninstalling keeps them too.
	c := newTestClient(t)
	u, err := c.PlanUninstall(context.Background(), channel.DefaultNamespace, "keep-a", DeleteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var deleted, keptObjs []string
	for _, o := range u.Delete {
		deleted = append(deleted, o.String())
	}
	for _, o := range u.Keep {
		keptObjs = append(keptObjs, o.String())
	}
	if diff := cmp.Diff(deleted, []string{"ConfigMap keep-app/plain"}); diff != "" {
		t.Errorf("deleted (-got +want):\n%s", diff)
	}
	if diff := cmp.Diff(keptObjs, []string{"ConfigMap keep-app/kept", "PersistentVolumeClaim keep-app/data"}); diff != "" {
		t.Errorf("kept (-got +want):\n%s", diff)
	}
	if err := c.Uninstall(context.Background(), u, DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := claimOf(t, "keep-app", "data"); uidOf(got) != data.UID {
		t.Errorf("claim data after uninstalling: %v, want the same claim", got)
	}
	if diff := cmp.Diff(configMapNames(t, "keep-app"), []string{"kept"}); diff != "" {
		t.Errorf("ConfigMaps after uninstalling (-got +want):\n%s", diff)
	}
}

// TestIntegrationEtcdBackupClaimSurvivesRollbackAndUninstall applies the
// released manifests of kos-etcd 0.2.0 and 0.3.0 as they are (moved to a
// namespace of their own), upgrades, rolls back and uninstalls: the backup
// claim 0.3.0 adds is never deleted, without an edit of the manifests.
func TestIntegrationEtcdBackupClaimSurvivesRollbackAndUninstall(t *testing.T) {
	dir := t.TempDir()
	release := func(version string) string {
		data, err := os.ReadFile("../addons/kos-etcd/" + version + ".yaml")
		if err != nil {
			t.Fatal(err)
		}
		return strings.ReplaceAll(string(data), "example-com", "etcdclaim")
	}
	ctx := context.Background()
	c := newTestClient(t)
	apply := func(file, version string, allowDowngrade bool) runResult {
		t.Helper()
		loc := channelstest.WriteChannel(t, dir, file, channelstest.Release{Name: "etcdclaim", Version: version, Manifest: release(version)})
		releases, err := Load(ctx, NewFetcher(), loc)
		if err != nil {
			t.Fatal(err)
		}
		plan, err := c.PlanWith(ctx, releases, DecideOptions{AllowDowngrade: allowDowngrade})
		if err != nil {
			t.Fatal(err)
		}
		var res runResult
		res.err = c.Apply(ctx, plan, ApplyOptions{OnEvent: func(e Event) { res.events = append(res.events, e) }})
		if res.err != nil {
			t.Fatalf("applying %s: %v", version, res.err)
		}
		return res
	}
	apply("v2.yaml", "0.2.0", false)
	apply("v3.yaml", "0.3.0", false)
	backup := claimOf(t, "etcdclaim", "kos-etcd-backup")
	if backup == nil {
		t.Fatal("0.3.0 applied no claim kos-etcd-backup")
	}

	// Rolling back to 0.2.0 prunes the CronJob, not the claim.
	res := apply("v2-again.yaml", "0.2.0", true)
	if diff := cmp.Diff(res.of(EventPruned), []string{"etcdclaim: Pruned CronJob.batch etcdclaim/kos-etcd-backup"}); diff != "" {
		t.Errorf("pruned by the rollback (-got +want):\n%s", diff)
	}
	if got := claimOf(t, "etcdclaim", "kos-etcd-backup"); uidOf(got) != backup.UID {
		t.Fatalf("claim after the rollback: %v, want the same claim (uid %s)", got, backup.UID)
	}

	// Upgrading again takes it back; uninstalling keeps it.
	apply("v3-again.yaml", "0.3.0", false)
	if got := claimOf(t, "etcdclaim", "kos-etcd-backup"); uidOf(got) != backup.UID || got.Labels[IdentityLabel] != "etcdclaim" {
		t.Fatalf("claim after upgrading again: %v, want the same claim, the addon's", got)
	}
	u, err := c.PlanUninstall(ctx, channel.DefaultNamespace, "etcdclaim", DeleteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Uninstall(ctx, u, DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := claimOf(t, "etcdclaim", "kos-etcd-backup"); uidOf(got) != backup.UID {
		t.Fatalf("claim after uninstalling: %v, want the same claim", got)
	}
	if recordOf(t, channel.DefaultNamespace, "etcdclaim") != "" {
		t.Error("the install record is still there")
	}
}

// TestIntegrationMoveAcrossChannelsIsAHandOver moves a ConfigMap between
// two addons of two channels applied in separate runs: the receiver
// declares it alike while the sender still does (one object, two
// declarers), then the sender drops it, in a run that does not read the
// receiver's channel; the receiver's install record says what it
// declares, so the object is handed over, never deleted.
func TestIntegrationMoveAcrossChannelsIsAHandOver(t *testing.T) {
	dir := t.TempDir()
	createNamespace(t, "xch")
	moving := channelstest.ConfigMap("xch", "moving", "v")
	c := newTestClient(t)
	apply := func(file string, r channelstest.Release) runResult {
		t.Helper()
		res := run(t, c, channelstest.WriteChannel(t, dir, file, r))
		if res.err != nil {
			t.Fatalf("%s: %v", file, res.err)
		}
		return res
	}
	apply("a1.yaml", channelstest.Release{Name: "xch-a", Version: "1.0.0", Manifest: channelstest.Manifest(channelstest.ConfigMap("xch", "own-a", "1"), moving)})
	apply("b1.yaml", channelstest.Release{Name: "xch-b", Version: "1.0.0", Manifest: channelstest.ConfigMap("xch", "own-b", "1")})
	before := configMapOf(t, "xch", "moving")

	// The receiver declares it alike: shared, no annotation needed.
	apply("b2.yaml", channelstest.Release{Name: "xch-b", Version: "2.0.0", Manifest: channelstest.Manifest(channelstest.ConfigMap("xch", "own-b", "1"), moving)})
	if got := configMapOf(t, "xch", "moving").Annotations[DeclaredByAnnotation]; got != "xch-a,xch-b" {
		t.Errorf("moving is annotated %s=%q, want both addons", DeclaredByAnnotation, got)
	}
	// The sender applies it again (another change of its release).
	apply("a2.yaml", channelstest.Release{Name: "xch-a", Version: "1.1.0", Manifest: channelstest.Manifest(channelstest.ConfigMap("xch", "own-a", "2"), moving)})
	if cm := configMapOf(t, "xch", "moving"); cm.Labels[IdentityLabel] != "xch-a" {
		t.Fatalf("moving is %s's, want xch-a's, which applied it last", cm.Labels[IdentityLabel])
	}
	// The sender drops it.
	res := apply("a3.yaml", channelstest.Release{Name: "xch-a", Version: "2.0.0", Manifest: channelstest.ConfigMap("xch", "own-a", "2")})
	after := configMapOf(t, "xch", "moving")
	if after == nil || after.UID != before.UID {
		t.Fatalf("ConfigMap moving was deleted on its way to xch-b; events %v", res.events)
	}
	if got := after.Labels[IdentityLabel]; got != "xch-b" {
		t.Errorf("ConfigMap moving is %s's, want xch-b's", got)
	}
	if diff := cmp.Diff(res.of(EventPruned), []string(nil)); diff != "" {
		t.Errorf("pruned (-got +want):\n%s", diff)
	}

	// A third addon that declares it differently is refused, naming the
	// owner, and changes nothing.
	res = run(t, c, channelstest.WriteChannel(t, dir, "c1.yaml", channelstest.Release{Name: "xch-c", Version: "1.0.0", Manifest: channelstest.ConfigMap("xch", "moving", "other")}))
	if msg := failedAddons(t, res.err)["xch-c"]; !strings.Contains(msg, `belongs to addon "xch-b", which declares it differently`) {
		t.Errorf("xch-c failed with %q, want the owner xch-b named", msg)
	}
	if cm := configMapOf(t, "xch", "moving"); cm.Data["key"] != "v" {
		t.Errorf("moving holds %q after the refused addon, want v", cm.Data["key"])
	}
}

// TestIntegrationDuplicateDeclarationKOpsStyle applies two addons that
// declare one Secret alike, with kOps's labels naming each addon, as
// kOps's scaleway-secret is: one run applies both, the Secret once; when
// one drops it, the other keeps it. Differing declarations still fail.
func TestIntegrationDuplicateDeclarationKOpsStyle(t *testing.T) {
	dir := t.TempDir()
	createNamespace(t, "dup-app")
	secret := func(addon, value string) string {
		return fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata: {name: scaleway-secret, namespace: dup-app, labels: {addon.kops.k8s.io/name: %s.addons.k8s.io, app.kubernetes.io/managed-by: kops}}\nstringData: {SCW_ACCESS_KEY: %q}\n", addon, value)
	}
	c := newTestClient(t)
	loc := channelstest.WriteChannel(t, dir, "v1.yaml",
		channelstest.Release{Name: "dup-ccm", Version: "1.0.0", Manifest: channelstest.Manifest(channelstest.ConfigMap("dup-app", "ccm", "1"), secret("dup-ccm", "key"))},
		channelstest.Release{Name: "dup-csi", Version: "1.0.0", Manifest: channelstest.Manifest(channelstest.ConfigMap("dup-app", "csi", "1"), secret("dup-csi", "key"))})
	if res := run(t, c, loc); res.err != nil {
		t.Fatalf("two addons declaring one Secret alike: %v", res.err)
	}
	s, err := kube(t).CoreV1().Secrets("dup-app").Get(context.Background(), "scaleway-secret", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	loc = channelstest.WriteChannel(t, dir, "v2.yaml",
		channelstest.Release{Name: "dup-ccm", Version: "2.0.0", Manifest: channelstest.ConfigMap("dup-app", "ccm", "1")},
		channelstest.Release{Name: "dup-csi", Version: "1.0.0", Manifest: channelstest.Manifest(channelstest.ConfigMap("dup-app", "csi", "1"), secret("dup-csi", "key"))})
	res := run(t, c, loc)
	if res.err != nil {
		t.Fatalf("dropping it from one: %v", res.err)
	}
	after, err := kube(t).CoreV1().Secrets("dup-app").Get(context.Background(), "scaleway-secret", metav1.GetOptions{})
	if err != nil || after.UID != s.UID || after.Labels[IdentityLabel] != "dup-csi" {
		t.Fatalf("Secret after dup-ccm dropped it: %v (%v), want the same one, dup-csi's; events %v", after, err, res.events)
	}

	loc = channelstest.WriteChannel(t, dir, "v3.yaml",
		channelstest.Release{Name: "dup-ccm", Version: "3.0.0", Manifest: channelstest.Manifest(channelstest.ConfigMap("dup-app", "ccm", "1"), secret("dup-ccm", "other"))},
		channelstest.Release{Name: "dup-csi", Version: "2.0.0", Manifest: channelstest.Manifest(channelstest.ConfigMap("dup-app", "csi", "2"), secret("dup-csi", "changed"))})
	failed := failedAddons(t, run(t, c, loc).err)
	for _, name := range []string{"dup-ccm", "dup-csi"} {
		if msg := failed[name]; !strings.Contains(msg, "declared differently") || !strings.Contains(msg, `"dup-ccm"`) || !strings.Contains(msg, `"dup-csi"`) {
			t.Errorf("addon %s failed with %q, want both named and the declarations said to differ", name, msg)
		}
	}
}

// TestIntegrationForeignObjectNeedsConsent declares objects a user made:
// the plan shows adopt and fails as applying does, until the object is
// annotated or the run adopts.
func TestIntegrationForeignObjectNeedsConsent(t *testing.T) {
	dir := t.TempDir()
	createNamespace(t, "foreign")
	ctx := context.Background()
	for _, name := range []string{"users", "annotated"} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "foreign"}, Data: map[string]string{"key": "mine"}}
		if _, err := kube(t).CoreV1().ConfigMaps("foreign").Create(ctx, cm, metav1.CreateOptions{FieldManager: "kubectl-create"}); err != nil {
			t.Fatal(err)
		}
	}
	c := newTestClient(t)
	loc := channelstest.WriteChannel(t, dir, "v1.yaml", channelstest.Release{Name: "foreign-a", Version: "1.0.0",
		Manifest: channelstest.Manifest(channelstest.ConfigMap("foreign", "users", "release"), channelstest.ConfigMap("foreign", "new", "release"))})
	releases, err := Load(ctx, NewFetcher(), loc)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := c.Plan(ctx, releases)
	if err != nil {
		t.Fatal(err)
	}
	// The plan: adopt, and the refusal applying would meet.
	previews, err := c.Preview(ctx, plan, PreviewOptions{})
	if msg := failedAddons(t, err)["foreign-a"]; !strings.Contains(msg, "ConfigMap foreign/users exists and neither channels nor kOps's channels made it (fields of kubectl-create)") {
		t.Errorf("preview failed with %q, want the foreign ConfigMap named", msg)
	}
	var actions []string
	for _, p := range previews {
		for _, ch := range p.Objects {
			actions = append(actions, string(ch.Action)+" "+ch.String())
		}
	}
	if diff := cmp.Diff(actions, []string{"adopt ConfigMap foreign/users", "create ConfigMap foreign/new"}, sortStrings); diff != "" {
		t.Errorf("plan (-got +want):\n%s", diff)
	}
	// Applying refuses it and changes nothing.
	res := run(t, c, loc)
	if msg := failedAddons(t, res.err)["foreign-a"]; !strings.Contains(msg, AdoptAnnotation) || !strings.Contains(msg, "--adopt") {
		t.Errorf("apply failed with %q, want the ways to consent named", msg)
	}
	if cm := configMapOf(t, "foreign", "users"); cm.Data["key"] != "mine" || cm.Labels[IdentityLabel] != "" {
		t.Errorf("the refused object changed: %v", cm)
	}
	if cm := configMapOf(t, "foreign", "new"); cm != nil {
		t.Error("ConfigMap new was applied although its addon was refused")
	}

	// With consent from the command line.
	if res := runWith(t, c, ApplyOptions{Adopt: true}, loc); res.err != nil {
		t.Fatalf("with Adopt: %v", res.err)
	}
	if cm := configMapOf(t, "foreign", "users"); cm.Data["key"] != "release" || cm.Labels[IdentityLabel] != "foreign-a" {
		t.Errorf("the adopted object: %v, want the release's, labelled foreign-a", cm)
	}

	// With consent on the object.
	cm := configMapOf(t, "foreign", "annotated")
	cm.Annotations = map[string]string{AdoptAnnotation: "true"}
	if _, err := kube(t).CoreV1().ConfigMaps("foreign").Update(ctx, cm, metav1.UpdateOptions{FieldManager: "kubectl-annotate"}); err != nil {
		t.Fatal(err)
	}
	loc = channelstest.WriteChannel(t, dir, "v2.yaml", channelstest.Release{Name: "foreign-a", Version: "2.0.0",
		Manifest: channelstest.Manifest(channelstest.ConfigMap("foreign", "users", "release"), channelstest.ConfigMap("foreign", "new", "release"), channelstest.ConfigMap("foreign", "annotated", "release"))})
	if res := run(t, c, loc); res.err != nil {
		t.Fatalf("an annotated object: %v", res.err)
	}
	if cm := configMapOf(t, "foreign", "annotated"); cm.Labels[IdentityLabel] != "foreign-a" {
		t.Errorf("the annotated object was not adopted: %v", cm)
	}
}

// TestIntegrationDeleteHandsSharedObjectOver uninstalls, one after the
// other, two addons that declare one ConfigMap alike: the first uninstall
// hands it to the other addon (same object, its label), the second
// deletes it.
func TestIntegrationDeleteHandsSharedObjectOver(t *testing.T) {
	dir := t.TempDir()
	createNamespace(t, "delshare")
	ctx := context.Background()
	c := newTestClient(t)
	shared := channelstest.ConfigMap("delshare", "shared", "v")
	loc := channelstest.WriteChannel(t, dir, "v1.yaml",
		channelstest.Release{Name: "delshare-a", Version: "1.0.0", Manifest: channelstest.Manifest(channelstest.ConfigMap("delshare", "a", "1"), shared)},
		channelstest.Release{Name: "delshare-b", Version: "1.0.0", Manifest: channelstest.Manifest(channelstest.ConfigMap("delshare", "b", "1"), shared)})
	if res := run(t, c, loc); res.err != nil {
		t.Fatal(res.err)
	}
	before := configMapOf(t, "delshare", "shared")
	owner := before.Labels[IdentityLabel]
	other := map[string]string{"delshare-a": "delshare-b", "delshare-b": "delshare-a"}[owner]
	if other == "" {
		t.Fatalf("shared is labelled %q, want one of the addons", owner)
	}
	if got := before.Annotations[DeclaredByAnnotation]; got != "delshare-a,delshare-b" {
		t.Errorf("shared is annotated %s=%q, want both addons", DeclaredByAnnotation, got)
	}

	u, err := c.PlanUninstall(ctx, channel.DefaultNamespace, owner, DeleteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, o := range u.Keep {
		kept = append(kept, o.String()+": "+o.Reason)
	}
	if diff := cmp.Diff(kept, []string{"ConfigMap delshare/shared: addon " + other + " declares it, and will own it"}); diff != "" {
		t.Errorf("kept (-got +want):\n%s", diff)
	}
	if err := c.Uninstall(ctx, u, DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	after := configMapOf(t, "delshare", "shared")
	if after == nil || after.UID != before.UID || after.Labels[IdentityLabel] != other {
		t.Fatalf("shared after uninstalling %s: %v, want the same object, %s's", owner, after, other)
	}

	u, err = c.PlanUninstall(ctx, channel.DefaultNamespace, other, DeleteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Uninstall(ctx, u, DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(configMapNames(t, "delshare"), []string(nil)); diff != "" {
		t.Errorf("ConfigMaps after uninstalling both (-got +want):\n%s", diff)
	}
}
