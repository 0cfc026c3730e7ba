package channels

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/kos-sdn/kos/channels/api"
	"github.com/kos-sdn/kos/channels/install"
	"github.com/kos-sdn/kos/channels/internal/channelstest"
	"github.com/kos-sdn/kos/channels/lease"
	"github.com/kos-sdn/kos/tools/testenv"
)

// networking is the selector kOps gives every networking addon.
var networking = map[string]string{"role.kubernetes.io/networking": "1"}

// selRelease is a release with a selector of the test's choosing.
type selRelease struct {
	name, version, manifest string
	selector                map[string]string
	prune                   *api.PruneSpec
}

// writeSelectorChannel writes a channel of releases whose selectors the test
// gives, with their manifests, and returns its location.
func writeSelectorChannel(t *testing.T, dir, file string, releases ...selRelease) string {
	t.Helper()
	ch := api.Addons{TypeMeta: metav1.TypeMeta{Kind: api.Kind}, ObjectMeta: metav1.ObjectMeta{Name: "sel"}}
	for _, r := range releases {
		m := fmt.Sprintf("%s-%s.yaml", r.name, r.version)
		if err := os.WriteFile(filepath.Join(dir, m), []byte(r.manifest), 0o644); err != nil {
			t.Fatal(err)
		}
		ch.Spec.Addons = append(ch.Spec.Addons, &api.AddonSpec{
			Name: &r.name, Version: r.version, Selector: r.selector, Manifest: &m,
			ManifestHash: HashManifest([]byte(r.manifest)), Prune: r.prune,
		})
	}
	data, err := yaml.Marshal(ch)
	if err != nil {
		t.Fatal(err)
	}
	loc := filepath.Join(dir, file)
	if err := os.WriteFile(loc, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return loc
}

func labeledConfigMap(namespace, name string, labels map[string]string) string {
	l, _ := json.Marshal(labels)
	return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: %s, namespace: %s, labels: %s}\ndata: {key: x}\n", name, namespace, l)
}

func labeledClusterRole(name string, labels map[string]string) string {
	l, _ := json.Marshal(labels)
	return fmt.Sprintf("apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: %s, labels: %s}\nrules: [{apiGroups: [\"\"], resources: [pods], verbs: [get]}]\n", name, l)
}

func labeledDaemonSet(namespace, name string, labels map[string]string) string {
	l, _ := json.Marshal(labels)
	return fmt.Sprintf(`apiVersion: apps/v1
kind: DaemonSet
metadata: {name: %[2]s, namespace: %[1]s, labels: %[4]s}
spec:
  selector: {matchLabels: {app: %[2]s}}
  template:
    metadata: {labels: {app: %[2]s}}
    spec: {containers: [{name: c, image: %[3]s}]}
`, namespace, name, channelstest.PauseImage, l)
}

// versionsOf returns the resourceVersions of the objects of one addon's
// kinds in the test, by "Kind ns/name".
func versionsOf(t *testing.T, k kubernetes.Interface, namespace, selector string) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	opts := metav1.ListOptions{LabelSelector: selector}
	cms, err := k.CoreV1().ConfigMaps(namespace).List(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range cms.Items {
		out["ConfigMap "+o.Namespace+"/"+o.Name] = o.ResourceVersion
	}
	dss, err := k.AppsV1().DaemonSets(namespace).List(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range dss.Items {
		out["DaemonSet "+o.Namespace+"/"+o.Name] = o.ResourceVersion
	}
	crs, err := k.RbacV1().ClusterRoles().List(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range crs.Items {
		out["ClusterRole "+o.Name] = o.ResourceVersion
	}
	return out
}

// TestIntegrationSharedSelector installs two networking addons that share
// kOps's selector role.kubernetes.io/networking=1, then upgrades and deletes
// one: the other's objects are never touched.
func TestIntegrationSharedSelector(t *testing.T) {
	const ns = "shared-net"
	createNamespace(t, ns)
	dir := t.TempDir()
	c := newTestClient(t)
	k := kube(t)
	net := func(name string, objs ...string) string {
		var docs []string
		for _, o := range objs {
			switch o {
			case "ds":
				docs = append(docs, labeledDaemonSet(ns, name, networking))
			case "role":
				docs = append(docs, labeledClusterRole(name+"-role", networking))
			default:
				docs = append(docs, labeledConfigMap(ns, name+"-"+o, networking))
			}
		}
		return channelstest.Manifest(docs...)
	}
	calico := selRelease{name: "shared-calico", version: "1.0.0", selector: networking, manifest: net("shared-calico", "ds", "role", "config", "extra")}
	cilium := selRelease{name: "shared-cilium", version: "1.0.0", selector: networking, manifest: net("shared-cilium", "ds", "role", "config")}
	v1 := writeSelectorChannel(t, dir, "v1.yaml", calico, cilium)
	if res := run(t, c, v1); res.err != nil {
		t.Fatalf("installing both: %v", res.err)
	}
	ciliumSel := IdentityLabel + "=shared-cilium"
	before := versionsOf(t, k, ns, ciliumSel)
	if len(before) != 3 {
		t.Fatalf("shared-cilium's objects: %v, want 3", before)
	}

	// Upgrade calico: it drops its DaemonSet, ClusterRole and a ConfigMap.
	calico2 := selRelease{name: "shared-calico", version: "2.0.0", selector: networking, manifest: net("shared-calico", "config")}
	res := run(t, c, writeSelectorChannel(t, dir, "v2.yaml", calico2, cilium))
	if res.err != nil {
		t.Fatalf("upgrading calico: %v", res.err)
	}
	if diff := cmp.Diff(res.of(EventPruned), []string{
		"shared-calico: Pruned ClusterRole.rbac.authorization.k8s.io shared-calico-role",
		"shared-calico: Pruned ConfigMap shared-net/shared-calico-extra",
		"shared-calico: Pruned DaemonSet.apps shared-net/shared-calico",
	}); diff != "" {
		t.Errorf("pruned by the upgrade (-got +want):\n%s", diff)
	}
	if diff := cmp.Diff(versionsOf(t, k, ns, ciliumSel), before); diff != "" {
		t.Errorf("shared-cilium's objects changed by upgrading shared-calico (-got +want):\n%s", diff)
	}

	// Delete calico: an empty release whose prune spec names every kind.
	all := &api.PruneSpec{Kinds: []api.PruneKindSpec{{Kind: "ConfigMap"}, {Group: "apps", Kind: "DaemonSet"}, {Group: "rbac.authorization.k8s.io", Kind: "ClusterRole"}}}
	calico3 := selRelease{name: "shared-calico", version: "3.0.0", selector: networking, manifest: "", prune: all}
	res = run(t, c, writeSelectorChannel(t, dir, "v3.yaml", calico3, cilium))
	if res.err != nil {
		t.Fatalf("deleting calico: %v", res.err)
	}
	if diff := cmp.Diff(res.of(EventPruned), []string{"shared-calico: Pruned ConfigMap shared-net/shared-calico-config"}); diff != "" {
		t.Errorf("pruned by the deletion (-got +want):\n%s", diff)
	}
	if diff := cmp.Diff(versionsOf(t, k, ns, ciliumSel), before); diff != "" {
		t.Errorf("shared-cilium's objects changed by deleting shared-calico (-got +want):\n%s", diff)
	}
	if left := versionsOf(t, k, ns, IdentityLabel+"=shared-calico"); len(left) != 0 {
		t.Errorf("shared-calico's objects left after deleting it: %v", left)
	}
}

// applyUnlabeled applies objects as an older release of this tool did:
// server-side, as "channels", with the selector but no identity label.
func applyUnlabeled(t *testing.T, c *Client, docs string) {
	t.Helper()
	objs, err := DecodeObjects([]byte(docs))
	if err != nil {
		t.Fatal(err)
	}
	w := &addonWriter{client: c, parallelism: 4}
	rel, err := w.prepare(context.Background(), objs)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.apply(context.Background(), rel); err != nil {
		t.Fatal(err)
	}
}

// TestIntegrationUpgradeFromUnlabeledRelease upgrades addons installed
// before identity labels existed: their records have no identity and their
// objects no label. What the new release drops is still pruned; but not
// when another addon of the channel shares the selector, since the
// unlabeled object may be that addon's.
func TestIntegrationUpgradeFromUnlabeledRelease(t *testing.T) {
	const ns = "legacy-app"
	createNamespace(t, ns)
	dir := t.TempDir()
	c := newTestClient(t)
	k := kube(t)
	sel := map[string]string{"k8s-addon": "legacy.addons.k8s.io"}
	applyUnlabeled(t, c, channelstest.Manifest(labeledConfigMap(ns, "legacy-a", sel), labeledConfigMap(ns, "legacy-b", sel)))
	writeRawRecord(t, "kube-system", "legacy", `{"version":"1.0.0","systemGeneration":1,"inventory":{"kinds":["ConfigMap"],"namespaces":["legacy-app"]}}`)

	applyUnlabeled(t, c, channelstest.Manifest(labeledConfigMap(ns, "legacy-net-a", networking), labeledConfigMap(ns, "legacy-net-b", networking),
		labeledConfigMap(ns, "legacy-other", networking)))
	writeRawRecord(t, "kube-system", "legacy-net", `{"version":"1.0.0","systemGeneration":1,"inventory":{"kinds":["ConfigMap"],"namespaces":["legacy-app"]}}`)
	// legacy-other is up to date: it stays as it is.
	otherManifest := labeledConfigMap(ns, "legacy-other", networking)
	writeRawRecord(t, "kube-system", "legacy-other", fmt.Sprintf(`{"version":"1.0.0","manifestHash":%q,"systemGeneration":1,"inventory":{"kinds":["ConfigMap"],"namespaces":["legacy-app"]}}`,
		HashManifest([]byte(otherManifest))))

	loc := writeSelectorChannel(t, dir, "v2.yaml",
		selRelease{name: "legacy", version: "2.0.0", selector: sel, manifest: labeledConfigMap(ns, "legacy-a", sel)},
		selRelease{name: "legacy-net", version: "2.0.0", selector: networking, manifest: labeledConfigMap(ns, "legacy-net-a", networking)},
		selRelease{name: "legacy-other", version: "1.0.0", selector: networking, manifest: otherManifest},
	)
	res := run(t, c, loc)
	if res.err != nil {
		t.Fatal(res.err)
	}
	if diff := cmp.Diff(res.of(EventPruned), []string{"legacy: Pruned ConfigMap legacy-app/legacy-b"}); diff != "" {
		t.Errorf("pruned (-got +want):\n%s", diff)
	}
	// Unlabeled objects under the shared selector may be either addon's:
	// legacy-net keeps its dropped legacy-net-b and legacy-other's object.
	why := ": it carries no " + IdentityLabel + " label and addon legacy-other has the same selector; delete it by hand if it is this addon's"
	if diff := cmp.Diff(res.of(EventNote), []string{
		"legacy-net: Not pruning ConfigMap legacy-app/legacy-net-b" + why,
		"legacy-net: Not pruning ConfigMap legacy-app/legacy-other" + why,
	}); diff != "" {
		t.Errorf("notes (-got +want):\n%s", diff)
	}
	if diff := cmp.Diff(configMapNames(t, ns), []string{"legacy-a", "legacy-net-a", "legacy-net-b", "legacy-other"}); diff != "" {
		t.Errorf("ConfigMaps left (-got +want):\n%s", diff)
	}
	// The kept objects now carry the identity label, and the record says so.
	cm, err := k.CoreV1().ConfigMaps(ns).Get(context.Background(), "legacy-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := cm.Labels[IdentityLabel]; got != "legacy" {
		t.Errorf("label %s of legacy-a = %q, want legacy", IdentityLabel, got)
	}
	rec, err := install.ParseRecord(recordOf(t, "kube-system", "legacy"))
	if err != nil {
		t.Fatal(err)
	}
	if rec.Inventory == nil || rec.Inventory.Identity != IdentityLabel+"=legacy" {
		t.Errorf("record inventory %+v, want identity %s=legacy", rec.Inventory, IdentityLabel)
	}
}

// TestIntegrationTakesOverOtherManagers applies releases over objects that
// kubectl's client-side apply and kOps's channels wrote first: the fields the
// release drops are gone afterwards, and install records on a namespace the
// release applies survive.
func TestIntegrationTakesOverOtherManagers(t *testing.T) {
	const ns = "takeover"
	ctx := context.Background()
	env := testenv.Shared(t)
	c := newTestClient(t)
	k := kube(t)
	dir := t.TempDir()
	sel := channelstest.SelectorOf("takeover")

	// kubectl apply (client-side) of a ConfigMap with a field the release
	// drops.
	first := channelstest.Manifest(channelstest.Namespace(ns), fmt.Sprintf(`apiVersion: v1
kind: ConfigMap
metadata: {name: by-kubectl, namespace: %s, labels: {k8s-addon: takeover.addons.k8s.io, dropped-label: "1"}}
data: {kept: "1", dropped: "1"}
`, ns))
	path := filepath.Join(dir, "first.yaml")
	if err := os.WriteFile(path, []byte(first), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("kubectl", "--kubeconfig", env.Kubeconfig, "apply", "-f", path).CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
	// kOps's channels applies server-side as "kops", and records by a
	// patch as "kops" too; here on the namespace the release applies.
	kopsCM := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"by-kops","namespace":%q,"labels":{"k8s-addon":"takeover.addons.k8s.io"}},"data":{"kept":"1","dropped":"1"}}`, ns)
	force := true
	if _, err := k.CoreV1().ConfigMaps(ns).Patch(ctx, "by-kops", types.ApplyPatchType, []byte(kopsCM), metav1.PatchOptions{FieldManager: "kops", Force: &force}); err != nil {
		t.Fatal(err)
	}
	kopsRecord := `{"version":"9.0.0","systemGeneration":1}`
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, AnnotationPrefix+"kops-addon", kopsRecord)
	if _, err := k.CoreV1().Namespaces().Patch(ctx, ns, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: "kops"}); err != nil {
		t.Fatal(err)
	}
	// A namespace field kOps applied as well, so that its entry holds more
	// than the record.
	nsApply := fmt.Sprintf(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":%q,"labels":{"by-kops":"1"}}}`, ns)
	if _, err := k.CoreV1().Namespaces().Patch(ctx, ns, types.ApplyPatchType, []byte(nsApply), metav1.PatchOptions{FieldManager: "kops", Force: &force}); err != nil {
		t.Fatal(err)
	}

	release := channelstest.Manifest(channelstest.Namespace(ns),
		fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: by-kubectl, namespace: %s}\ndata: {kept: \"1\"}\n", ns),
		fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: by-kops, namespace: %s}\ndata: {kept: \"1\"}\n", ns))
	loc := writeSelectorChannel(t, dir, "channel.yaml", selRelease{name: "takeover", version: "1.0.0", selector: sel, manifest: release})
	if res := run(t, c, loc); res.err != nil {
		t.Fatal(res.err)
	}
	for _, name := range []string{"by-kubectl", "by-kops"} {
		cm, err := k.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(cm.Data, map[string]string{"kept": "1"}); diff != "" {
			t.Errorf("data of %s (-got +want):\n%s", name, diff)
		}
		if _, ok := cm.Labels["dropped-label"]; ok {
			t.Errorf("%s keeps the label the release dropped", name)
		}
		if _, ok := cm.Annotations[corev1.LastAppliedConfigAnnotation]; ok {
			t.Errorf("%s keeps kubectl's last-applied annotation", name)
		}
		var managers []string
		for _, mf := range cm.ManagedFields {
			managers = append(managers, mf.Manager+"/"+string(mf.Operation))
		}
		if diff := cmp.Diff(managers, []string{"channels/Apply"}); diff != "" {
			t.Errorf("managers of %s (-got +want):\n%s", name, diff)
		}
	}
	if got := recordOf(t, ns, "kops-addon"); got != kopsRecord {
		t.Errorf("kOps's record on the applied namespace = %q, want %q", got, kopsRecord)
	}
	// Applying the namespace again (a new release) still leaves the record.
	loc2 := writeSelectorChannel(t, dir, "channel2.yaml", selRelease{name: "takeover", version: "2.0.0", selector: sel, manifest: release})
	if res := run(t, c, loc2); res.err != nil {
		t.Fatal(res.err)
	}
	if got := recordOf(t, ns, "kops-addon"); got != kopsRecord {
		t.Errorf("kOps's record after a second release = %q, want %q", got, kopsRecord)
	}
	nsObj, err := k.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := nsObj.Labels["by-kops"]; ok {
		t.Errorf("namespace keeps the label kOps applied and the release does not have")
	}
}

// TestIntegrationKilledMidApply kills a run (SIGKILL) after it applied a
// release and while it waits for it to be ready: the record stays, the
// pending inventory names what it applied, and the next run takes the lease
// over, converges and prunes exactly the objects of the killed release that
// the next release does not have.
func TestIntegrationKilledMidApply(t *testing.T) {
	const ns = "killed"
	env := testenv.Shared(t)
	createNamespace(t, ns)
	k := kube(t)
	bin := testenv.Build(t, "cmd/channels")
	dir := t.TempDir()
	ours := tool{name: "ours", bin: bin, kubeconfig: env.Kubeconfig, home: t.TempDir()}
	sel := channelstest.SelectorOf("killed")
	otherSel := channelstest.SelectorOf("killed-other")
	other := selRelease{name: "killed-other", version: "1.0.0", selector: otherSel, manifest: channelstest.Manifest(
		labeledConfigMap(ns, "other-a", otherSel),
		"apiVersion: v1\nkind: Secret\nmetadata: {name: other-s, namespace: "+ns+"}\nstringData: {k: v}\n")}
	secret := "apiVersion: v1\nkind: Secret\nmetadata: {name: killed-s, namespace: " + ns + "}\nstringData: {k: v}\n"

	v1 := writeSelectorChannel(t, dir, "v1.yaml", other,
		selRelease{name: "killed", version: "1.0.0", selector: sel, manifest: channelstest.Manifest(channelstest.ConfigMap(ns, "killed-a", "1"), channelstest.ConfigMap(ns, "killed-b", "1"))})
	ours.mustRun(t, "apply", "channel", v1, "--yes", "--wait=false")
	recV1 := recordOf(t, "kube-system", "killed")
	otherBefore := versionsOf(t, k, ns, IdentityLabel+"=killed-other")

	// Release 2 adds a Secret (a kind release 1 had not) and a Deployment
	// that never becomes ready here: no controller manager runs.
	v2 := writeSelectorChannel(t, dir, "v2.yaml", other,
		selRelease{name: "killed", version: "2.0.0", selector: sel, manifest: channelstest.Manifest(channelstest.ConfigMap(ns, "killed-a", "2"), secret, deployment(ns, "killed-d"))})
	cmd := exec.Command(bin, "apply", "channel", v2, "--yes", "--timeout=10m", "--kubeconfig", env.Kubeconfig)
	cmd.Env = append(os.Environ(), "HOME="+ours.home)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waiting := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		var seen []string
		for sc.Scan() {
			seen = append(seen, sc.Text())
			if strings.Contains(sc.Text(), "Waiting for Deployment.apps "+ns+"/killed-d") {
				waiting <- strings.Join(seen, "\n")
				break
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case <-waiting:
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		t.Fatal("the run never reported waiting for the Deployment")
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	lease, err := k.CoordinationV1().Leases(lease.Namespace).Get(context.Background(), lease.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	killedHolder := ""
	if lease.Spec.HolderIdentity != nil {
		killedHolder = *lease.Spec.HolderIdentity
	}
	if killedHolder == "" {
		t.Fatal("the killed run holds no lease")
	}
	if got := recordOf(t, "kube-system", "killed"); got != recV1 {
		t.Errorf("record after the killed run = %s, want it unchanged: %s", got, recV1)
	}
	ksNS, err := k.CoreV1().Namespaces().Get(context.Background(), "kube-system", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pending, err := install.ParseInventory(ksNS.Annotations[install.InventoryAnnotationPrefix+"killed"])
	if err != nil {
		t.Fatalf("pending inventory after the killed run: %v", err)
	}
	if diff := cmp.Diff(pending.Kinds, []string{"ConfigMap", "Deployment.apps", "Secret"}); diff != "" {
		t.Errorf("pending inventory kinds (-got +want):\n%s", diff)
	}

	// Release 3 keeps only killed-a and adds killed-c: the next run waits
	// for the dead run's lease, then prunes killed-b (release 1), the
	// Secret and the Deployment (the killed release 2).
	v3 := writeSelectorChannel(t, dir, "v3.yaml", other,
		selRelease{name: "killed", version: "3.0.0", selector: sel, manifest: channelstest.Manifest(channelstest.ConfigMap(ns, "killed-a", "3"), channelstest.ConfigMap(ns, "killed-c", "3"))})
	out := ours.mustRun(t, "apply", "channel", v3, "--yes", "--wait=false")
	if !strings.Contains(out, "Waiting for another run ("+killedHolder+")") {
		t.Errorf("the next run did not report waiting for the killed run's lease (%s):\n%s", killedHolder, out)
	}
	var pruned []string
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "Pruned") {
			pruned = append(pruned, strings.TrimSpace(line))
		}
	}
	sort.Strings(pruned)
	if diff := cmp.Diff(pruned, []string{
		"killed: Pruned ConfigMap killed/killed-b",
		"killed: Pruned Deployment.apps killed/killed-d",
		"killed: Pruned Secret killed/killed-s",
	}); diff != "" {
		t.Errorf("pruned by the next run (-got +want):\n%s\noutput:\n%s", diff, out)
	}
	rec, err := install.ParseRecord(recordOf(t, "kube-system", "killed"))
	if err != nil {
		t.Fatal(err)
	}
	if rec.Version != "3.0.0" {
		t.Errorf("record version %s, want 3.0.0", rec.Version)
	}
	ksNS, err = k.CoreV1().Namespaces().Get(context.Background(), "kube-system", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := ksNS.Annotations[install.InventoryAnnotationPrefix+"killed"]; ok {
		t.Errorf("pending inventory left after the run converged: %s", v)
	}
	if diff := cmp.Diff(versionsOf(t, k, ns, IdentityLabel+"=killed-other"), otherBefore); diff != "" {
		t.Errorf("the other addon's objects changed (-got +want):\n%s", diff)
	}
	if _, err := k.CoreV1().Secrets(ns).Get(context.Background(), "other-s", metav1.GetOptions{}); err != nil {
		t.Errorf("the other addon's Secret: %v", err)
	}
	lease, err = k.CoordinationV1().Leases(lease.Namespace).Get(context.Background(), lease.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity == killedHolder {
		t.Errorf("the lease is still the killed run's")
	}
	if lease.Spec.LeaseTransitions == nil || *lease.Spec.LeaseTransitions == 0 {
		t.Errorf("lease transitions %v, want the lease taken over", lease.Spec.LeaseTransitions)
	}
}
