package channels

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kos-sdn/kos/channels/api"
	"github.com/kos-sdn/kos/channels/channel"
	"github.com/kos-sdn/kos/channels/internal/channelstest"
	"github.com/kos-sdn/kos/channels/preview"
)

// TestIntegrationDeleteKeepsNamespaceHoldingKeptObjects uninstalls an
// addon with its Namespaces: one holds a kept ConfigMap and a claim of the
// release, one a claim nobody declares (as a StatefulSet makes them), one
// nothing kept. The first two stay, with everything kept in them, and the
// plan says why and what to do; the third goes.
func TestIntegrationDeleteKeepsNamespaceHoldingKeptObjects(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	kept := fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: kept, namespace: holds-kept, annotations: {%s: \"true\"}}\ndata: {key: v}\n", KeepAnnotation)
	m := channelstest.Manifest(
		channelstest.Namespace("holds-kept"), channelstest.Namespace("holds-claim"), channelstest.Namespace("holds-none"),
		kept, claim("holds-kept", "data"), channelstest.ConfigMap("holds-kept", "plain", "1"),
		channelstest.ConfigMap("holds-claim", "plain", "1"),
		channelstest.ConfigMap("holds-none", "plain", "1"))
	loc := channelstest.WriteChannel(t, dir, "v1.yaml", channelstest.Release{Name: "holds", Version: "1.0.0", Manifest: m})
	c := newTestClient(t)
	if res := run(t, c, loc); res.err != nil {
		t.Fatalf("install: %v", res.err)
	}
	made := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data-db-0", Namespace: "holds-claim", Labels: map[string]string{"app": "db"}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	if _, err := kube(t).CoreV1().PersistentVolumeClaims("holds-claim").Create(ctx, made, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	data := claimOf(t, "holds-kept", "data")

	opts := DeleteOptions{Namespaces: true}
	u, err := c.PlanUninstall(ctx, channel.DefaultNamespace, "holds", opts)
	if err != nil {
		t.Fatal(err)
	}
	deleted, keptObjs := uninstallLists(u)
	wantDeleted := []string{
		"ConfigMap holds-claim/plain", "ConfigMap holds-kept/plain", "ConfigMap holds-none/plain",
		"Namespace holds-none",
	}
	if diff := cmp.Diff(deleted, wantDeleted, sortStrings); diff != "" {
		t.Errorf("deleted (-got +want):\n%s", diff)
	}
	wantKept := []string{
		"ConfigMap holds-kept/kept: it is annotated " + KeepAnnotation,
		"Namespace holds-claim: it holds objects channels keeps, which deleting it would delete: PersistentVolumeClaim holds-claim/data-db-0; " +
			"to delete it, delete them yourself first (their data go with them), then the Namespace (kubectl delete namespace holds-claim)",
		"Namespace holds-kept: it holds objects channels keeps, which deleting it would delete: ConfigMap holds-kept/kept, PersistentVolumeClaim holds-kept/data; " +
			"to delete it, delete them yourself first (their data go with them), then the Namespace (kubectl delete namespace holds-kept)",
		"PersistentVolumeClaim holds-kept/data: a PersistentVolumeClaim holds data: deleted only when its manifest annotates it " + DeletableAnnotation,
	}
	if diff := cmp.Diff(keptObjs, wantKept, sortStrings); diff != "" {
		t.Errorf("kept (-got +want):\n%s", diff)
	}

	if err := c.Uninstall(ctx, u, opts); err != nil {
		t.Fatal(err)
	}
	for ns, want := range map[string]bool{"holds-kept": true, "holds-claim": true, "holds-none": false} {
		got, err := kube(t).CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		// Without a namespace controller a deleted Namespace stays,
		// Terminating.
		if active := err == nil && got.DeletionTimestamp == nil; active != want {
			t.Errorf("namespace %s active after the uninstall: %v, want %v", ns, active, want)
		}
	}
	if got := claimOf(t, "holds-kept", "data"); uidOf(got) != data.UID {
		t.Errorf("claim holds-kept/data after uninstalling: %v, want the same claim (uid %s)", got, data.UID)
	}
	if claimOf(t, "holds-claim", "data-db-0") == nil {
		t.Error("claim holds-claim/data-db-0 is gone")
	}
	if diff := cmp.Diff(configMapNames(t, "holds-kept"), []string{"kept"}); diff != "" {
		t.Errorf("ConfigMaps of holds-kept after uninstalling (-got +want):\n%s", diff)
	}
	if recordOf(t, channel.DefaultNamespace, "holds") != "" {
		t.Error("the install record is still there")
	}
}

// TestIntegrationPruneKeepsNamespaceHoldingKeptObjects drops two
// Namespaces with a prune spec naming the kind: the one holding a kept
// ConfigMap stays, as the plan says; the other is pruned.
func TestIntegrationPruneKeepsNamespaceHoldingKeptObjects(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	kept := fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: kept, namespace: pruneheld-kept, annotations: {%s: \"true\"}}\ndata: {key: v}\n", KeepAnnotation)
	v1 := channelstest.Manifest(channelstest.Namespace("pruneheld-kept"), channelstest.Namespace("pruneheld-none"), kept,
		channelstest.ConfigMap("pruneheld-none", "plain", "1"), channelstest.ConfigMap("default", "pruneheld", "1"))
	loc := channelstest.WriteChannel(t, dir, "v1.yaml", channelstest.Release{Name: "pruneheld", Version: "1.0.0", Manifest: v1})
	c := newTestClient(t)
	if res := run(t, c, loc); res.err != nil {
		t.Fatalf("install: %v", res.err)
	}

	loc = channelstest.WriteChannel(t, dir, "v2.yaml", channelstest.Release{Name: "pruneheld", Version: "2.0.0",
		Manifest: channelstest.ConfigMap("default", "pruneheld", "2"),
		Prune:    &api.PruneSpec{Kinds: []api.PruneKindSpec{{Kind: "Namespace"}, {Kind: "ConfigMap"}}}})
	reason := "it holds objects channels keeps, which deleting it would delete: ConfigMap pruneheld-kept/kept; " +
		"to delete it, delete them yourself first (their data go with them), then the Namespace (kubectl delete namespace pruneheld-kept)"
	var planned []string
	for _, p := range planAndPreview(t, c, loc) {
		for _, ch := range p.Objects {
			if ch.Action == preview.ActionPrune || ch.Action == preview.ActionKeep {
				planned = append(planned, string(ch.Action)+" "+ch.String()+" ("+ch.Note+")")
			}
		}
	}
	wantPlan := []string{
		"keep ConfigMap pruneheld-kept/kept (it is annotated " + KeepAnnotation + ")",
		"keep Namespace pruneheld-kept (" + reason + ")",
		"prune ConfigMap pruneheld-none/plain ()",
		"prune Namespace pruneheld-none ()",
	}
	if diff := cmp.Diff(planned, wantPlan, sortStrings); diff != "" {
		t.Errorf("planned prunes (-got +want):\n%s", diff)
	}
	res := run(t, c, loc)
	if res.err != nil {
		t.Fatalf("upgrade: %v", res.err)
	}
	if diff := cmp.Diff(res.of(EventPruned), []string{"pruneheld: Pruned ConfigMap pruneheld-none/plain", "pruneheld: Pruned Namespace pruneheld-none"}); diff != "" {
		t.Errorf("pruned (-got +want):\n%s", diff)
	}
	ns, err := kube(t).CoreV1().Namespaces().Get(ctx, "pruneheld-kept", metav1.GetOptions{})
	if err != nil || ns.DeletionTimestamp != nil {
		t.Errorf("namespace pruneheld-kept after the upgrade: %v, want it active", err)
	}
	if diff := cmp.Diff(configMapNames(t, "pruneheld-kept"), []string{"kept"}); diff != "" {
		t.Errorf("ConfigMaps of pruneheld-kept (-got +want):\n%s", diff)
	}
}

// TestIntegrationDeleteKeepsCRDWithKeptCustomResource uninstalls an addon
// with its CRDs: the CRD of which a kept custom resource exists stays, as
// the plan says; the other custom resource goes.
func TestIntegrationDeleteKeepsCRDWithKeptCustomResource(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	crd := strings.NewReplacer("widgets", "keepsakes", "widget", "keepsake", "Widget", "Keepsake").Replace(widgetCRD)
	kept := fmt.Sprintf("apiVersion: test.kos.example.com/v1\nkind: Keepsake\nmetadata: {name: k1, namespace: crdheld-ns, annotations: {%s: \"true\"}}\n", KeepAnnotation)
	plain := "apiVersion: test.kos.example.com/v1\nkind: Keepsake\nmetadata: {name: k2, namespace: crdheld-ns}\n"
	loc := channelstest.WriteChannel(t, dir, "v1.yaml", channelstest.Release{Name: "crdheld", Version: "1.0.0",
		Manifest: channelstest.Manifest(crd, channelstest.Namespace("crdheld-ns"), kept, plain)})
	c := newTestClient(t)
	if res := run(t, c, loc); res.err != nil {
		t.Fatalf("install: %v", res.err)
	}

	opts := DeleteOptions{CRDs: true}
	u, err := c.PlanUninstall(ctx, channel.DefaultNamespace, "crdheld", opts)
	if err != nil {
		t.Fatal(err)
	}
	deleted, keptObjs := uninstallLists(u)
	if diff := cmp.Diff(deleted, []string{"Keepsake.test.kos.example.com crdheld-ns/k2"}); diff != "" {
		t.Errorf("deleted (-got +want):\n%s", diff)
	}
	wantKept := []string{
		"CustomResourceDefinition.apiextensions.k8s.io keepsakes.test.kos.example.com: it holds objects channels keeps, which deleting it would delete: " +
			"Keepsake.test.kos.example.com crdheld-ns/k1; to delete it, delete them yourself first (their data go with them), " +
			"then the CustomResourceDefinition (kubectl delete crd keepsakes.test.kos.example.com)",
		"Keepsake.test.kos.example.com crdheld-ns/k1: it is annotated " + KeepAnnotation,
		"Namespace crdheld-ns: a Namespace: deleted only when asked",
	}
	if diff := cmp.Diff(keptObjs, wantKept, sortStrings); diff != "" {
		t.Errorf("kept (-got +want):\n%s", diff)
	}
	if err := c.Uninstall(ctx, u, opts); err != nil {
		t.Fatal(err)
	}
	got, err := c.Dynamic.Resource(crdResource).Get(ctx, "keepsakes.test.kos.example.com", metav1.GetOptions{})
	if err != nil || got.GetDeletionTimestamp() != nil {
		t.Errorf("the CRD after uninstalling: %v, want it there", err)
	}
	if _, err := c.Dynamic.Resource(widgetResource.GroupVersion().WithResource("keepsakes")).Namespace("crdheld-ns").Get(ctx, "k1", metav1.GetOptions{}); err != nil {
		t.Errorf("Keepsake k1 after uninstalling: %v", err)
	}
}

// uninstallLists returns what an uninstall plan deletes and what it keeps,
// each kept object with its reason, in the plan's order.
func uninstallLists(u *Uninstall) (deleted, kept []string) {
	for _, o := range u.Delete {
		deleted = append(deleted, o.String())
	}
	for _, o := range u.Keep {
		kept = append(kept, o.String()+": "+o.Reason)
	}
	return deleted, kept
}
