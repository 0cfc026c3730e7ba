package channels

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kos-sdn/kos/channels/channel"
	"github.com/kos-sdn/kos/channels/internal/channelstest"
	"github.com/kos-sdn/kos/channels/preview"
)

// adoptedConfigMap is a ConfigMap whose manifest adopts it.
func adoptedConfigMap(namespace, name, value string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: %s, namespace: %s, annotations: {%s: \"true\"}}\ndata: {key: %q}\n",
		name, namespace, AdoptAnnotation, value)
}

// configMapOf reads a ConfigMap; nil when it does not exist.
func configMapOf(t *testing.T, namespace, name string) *corev1.ConfigMap {
	t.Helper()
	cm, err := kube(t).CoreV1().ConfigMaps(namespace).Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return cm
}

// failedAddons returns the addons an ApplyError names, with their errors.
func failedAddons(t *testing.T, err error) map[string]string {
	t.Helper()
	var ae *ApplyError
	if !errors.As(err, &ae) {
		t.Fatalf("error %v, want an *ApplyError", err)
	}
	out := map[string]string{}
	for _, f := range ae.Failed {
		out[f.Addon] = f.Err.Error()
	}
	return out
}

func TestIntegrationSharedObjectOwnership(t *testing.T) {
	dir := t.TempDir()
	a1 := channelstest.Manifest(channelstest.Namespace("own-shared"), channelstest.ConfigMap("own-shared", "own-a", "a"), channelstest.ConfigMap("own-shared", "shared", "from a"))
	b1 := channelstest.Manifest(channelstest.Namespace("own-shared"), channelstest.ConfigMap("own-shared", "own-b", "b"), channelstest.ConfigMap("own-shared", "shared", "from b"))

	// Two addons declare one object, neither adopts it: both fail, each
	// naming the other, and nothing of them is applied.
	loc := channelstest.WriteChannel(t, dir, "conflict.yaml",
		channelstest.Release{Name: "own-a", Version: "1.0.0", Manifest: a1},
		channelstest.Release{Name: "own-b", Version: "1.0.0", Manifest: b1})
	res := run(t, newTestClient(t), loc)
	failed := failedAddons(t, res.err)
	for _, name := range []string{"own-a", "own-b"} {
		msg := failed[name]
		if !strings.Contains(msg, `"own-a"`) || !strings.Contains(msg, `"own-b"`) || !strings.Contains(msg, AdoptAnnotation) {
			t.Errorf("addon %s failed with %q, want both addons and %s named", name, msg, AdoptAnnotation)
		}
	}
	if cm := configMapOf(t, "own-shared", "own-a"); cm != nil {
		t.Errorf("ConfigMap own-a was applied although its addon failed")
	}

	// Both adopt it: one run applies both.
	a1 = channelstest.Manifest(channelstest.Namespace("own-shared"), channelstest.ConfigMap("own-shared", "own-a", "a"), adoptedConfigMap("own-shared", "shared", "from a"))
	b1 = channelstest.Manifest(channelstest.Namespace("own-shared"), channelstest.ConfigMap("own-shared", "own-b", "b"), adoptedConfigMap("own-shared", "shared", "from b"))
	loc = channelstest.WriteChannel(t, dir, "v1.yaml",
		channelstest.Release{Name: "own-a", Version: "1.0.0", Manifest: a1},
		channelstest.Release{Name: "own-b", Version: "1.0.0", Manifest: b1})
	if res := run(t, newTestClient(t), loc); res.err != nil {
		t.Fatalf("first run: %v", res.err)
	}
	shared := configMapOf(t, "own-shared", "shared")
	if shared == nil {
		t.Fatal("ConfigMap shared was not applied")
	}

	// own-b drops it: own-a still declares it, so it stays (same object)
	// and becomes own-a's.
	b2 := channelstest.Manifest(channelstest.Namespace("own-shared"), channelstest.ConfigMap("own-shared", "own-b", "b"))
	loc = channelstest.WriteChannel(t, dir, "v2.yaml",
		channelstest.Release{Name: "own-a", Version: "1.0.0", Manifest: a1},
		channelstest.Release{Name: "own-b", Version: "2.0.0", Manifest: b2})
	res = run(t, newTestClient(t), loc)
	if res.err != nil {
		t.Fatalf("second run: %v", res.err)
	}
	after := configMapOf(t, "own-shared", "shared")
	if after == nil || after.UID != shared.UID {
		t.Fatalf("ConfigMap shared was pruned (or made again) although addon own-a declares it; events %v", res.events)
	}
	if got := after.Labels[IdentityLabel]; got != "own-a" {
		t.Errorf("ConfigMap shared has %s=%q, want own-a", IdentityLabel, got)
	}
	if diff := cmp.Diff(res.of(EventPruned), []string(nil)); diff != "" {
		t.Errorf("pruned (-got +want):\n%s", diff)
	}
	if got := after.Data["key"]; got != "from a" {
		t.Errorf("ConfigMap shared holds %q, want own-a's %q", got, "from a")
	}

	// A third addon that declares it without adopting fails, naming the
	// owner; nothing of it is applied.
	c1 := channelstest.Manifest(channelstest.ConfigMap("own-shared", "own-c", "c"), channelstest.ConfigMap("own-shared", "shared", "from c"))
	loc = channelstest.WriteChannel(t, dir, "v3.yaml",
		channelstest.Release{Name: "own-a", Version: "1.0.0", Manifest: a1},
		channelstest.Release{Name: "own-b", Version: "2.0.0", Manifest: b2},
		channelstest.Release{Name: "own-c", Version: "1.0.0", Manifest: c1})
	res = run(t, newTestClient(t), loc)
	msg := failedAddons(t, res.err)["own-c"]
	if !strings.Contains(msg, `belongs to addon "own-a"`) || !strings.Contains(msg, `addon "own-c"`) {
		t.Errorf("addon own-c failed with %q, want the owner own-a and own-c named", msg)
	}
	if cm := configMapOf(t, "own-shared", "own-c"); cm != nil {
		t.Errorf("ConfigMap own-c was applied although its addon failed")
	}
}

func TestIntegrationObjectMovesBetweenAddons(t *testing.T) {
	dir := t.TempDir()
	createNamespace(t, "mv-app")
	loc := channelstest.WriteChannel(t, dir, "v1.yaml",
		channelstest.Release{Name: "mv-a", Version: "1.0.0", Manifest: channelstest.Manifest(channelstest.ConfigMap("mv-app", "mv-a", "a"), channelstest.ConfigMap("mv-app", "moving", "a"))},
		channelstest.Release{Name: "mv-b", Version: "1.0.0", Manifest: channelstest.ConfigMap("mv-app", "mv-b", "b")})
	if res := run(t, newTestClient(t), loc); res.err != nil {
		t.Fatalf("first run: %v", res.err)
	}
	before := configMapOf(t, "mv-app", "moving")

	// In one run, mv-a drops it and mv-b takes it: no adopt needed, and
	// mv-a's prune leaves it to mv-b.
	loc = channelstest.WriteChannel(t, dir, "v2.yaml",
		channelstest.Release{Name: "mv-a", Version: "2.0.0", Manifest: channelstest.ConfigMap("mv-app", "mv-a", "a")},
		channelstest.Release{Name: "mv-b", Version: "2.0.0", Manifest: channelstest.Manifest(channelstest.ConfigMap("mv-app", "mv-b", "b"), channelstest.ConfigMap("mv-app", "moving", "b"))})
	// The plan shows no prune of it either.
	for _, p := range planAndPreview(t, newTestClient(t), loc) {
		for _, ch := range p.Objects {
			if ch.Action == preview.ActionPrune {
				t.Errorf("the plan prunes %s of addon %s", ch, p.Addon)
			}
		}
	}
	res := run(t, newTestClient(t), loc)
	if res.err != nil {
		t.Fatalf("second run: %v", res.err)
	}
	after := configMapOf(t, "mv-app", "moving")
	if after == nil || after.UID != before.UID {
		t.Fatalf("ConfigMap moving was deleted on its way to mv-b; events %v", res.events)
	}
	if got, want := after.Labels[IdentityLabel]+" "+after.Data["key"], "mv-b b"; got != want {
		t.Errorf("ConfigMap moving: owner and value %q, want %q", got, want)
	}

	// And back, across two runs: mv-b drops it while mv-a, which declares
	// it, fails before its manifest is read (its hash does not match).
	// What mv-a declares is unknown, so mv-b keeps it.
	back := channelstest.Manifest(channelstest.ConfigMap("mv-app", "mv-a", "a"), channelstest.ConfigMap("mv-app", "moving", "a"))
	loc = channelstest.WriteChannel(t, dir, "v3.yaml",
		channelstest.Release{Name: "mv-a", Version: "3.0.0", Manifest: back, Hash: strings.Repeat("0", 64)},
		channelstest.Release{Name: "mv-b", Version: "3.0.0", Manifest: channelstest.ConfigMap("mv-app", "mv-b", "b")})
	res = run(t, newTestClient(t), loc)
	if failed := failedAddons(t, res.err); len(failed) != 1 || failed["mv-a"] == "" {
		t.Fatalf("third run failed %v, want mv-a alone", failed)
	}
	kept := configMapOf(t, "mv-app", "moving")
	if kept == nil || kept.UID != before.UID {
		t.Fatalf("ConfigMap moving was pruned while mv-a, which declares it, failed; events %v", res.events)
	}
	if diff := cmp.Diff(res.of(EventPruned), []string(nil)); diff != "" {
		t.Errorf("pruned (-got +want):\n%s", diff)
	}
	if notes := strings.Join(res.of(EventNote), "\n"); !strings.Contains(notes, "Not pruning ConfigMap mv-app/moving: what addon mv-a") {
		t.Errorf("notes %q, want one saying why moving is kept", notes)
	}
	// It stays mv-b's until mv-a takes it, so mv-b's record still lists
	// where it is.
	if rec := recordOf(t, channel.DefaultNamespace, "mv-b"); !strings.Contains(rec, `"ConfigMap"`) || !strings.Contains(rec, `"mv-app"`) {
		t.Errorf("mv-b's record %s lists no ConfigMap in mv-app", rec)
	}
	// Once mv-a's manifest loads, it takes it: the same object.
	loc = channelstest.WriteChannel(t, dir, "v4.yaml",
		channelstest.Release{Name: "mv-a", Version: "3.0.0", Manifest: back},
		channelstest.Release{Name: "mv-b", Version: "3.0.0", Manifest: channelstest.ConfigMap("mv-app", "mv-b", "b")})
	if res := run(t, newTestClient(t), loc); res.err != nil {
		t.Fatalf("fourth run: %v", res.err)
	}
	cm := configMapOf(t, "mv-app", "moving")
	if cm == nil || cm.UID != before.UID || cm.Labels[IdentityLabel] != "mv-a" || cm.Data["key"] != "a" {
		t.Errorf("ConfigMap moving after mv-a's manifest loaded: %v, want the same object (uid %s), mv-a's with value a", cm, before.UID)
	}
}

func TestIntegrationSelectorChangeLeaksNothing(t *testing.T) {
	dir := t.TempDir()
	createNamespace(t, "selchg")
	v1 := channelstest.Manifest(channelstest.ConfigMap("selchg", "kept", "1"), channelstest.ConfigMap("selchg", "dropped", "1"))
	loc := writeSelectorChannel(t, dir, "v1.yaml", selRelease{name: "selchg", version: "1.0.0", manifest: v1, selector: map[string]string{"k8s-addon": "old.addons.k8s.io"}})
	if res := run(t, newTestClient(t), loc); res.err != nil {
		t.Fatalf("first run: %v", res.err)
	}
	v2 := channelstest.ConfigMap("selchg", "kept", "2")
	loc = writeSelectorChannel(t, dir, "v2.yaml", selRelease{name: "selchg", version: "2.0.0", manifest: v2, selector: map[string]string{"k8s-addon": "new.addons.k8s.io"}})
	res := run(t, newTestClient(t), loc)
	if res.err != nil {
		t.Fatalf("second run: %v", res.err)
	}
	if diff := cmp.Diff(configMapNames(t, "selchg"), []string{"kept"}); diff != "" {
		t.Errorf("ConfigMaps after the selector changed (-got +want):\n%s", diff)
	}
	if diff := cmp.Diff(res.of(EventPruned), []string{"selchg: Pruned ConfigMap selchg/dropped"}); diff != "" {
		t.Errorf("pruned (-got +want):\n%s", diff)
	}
	if got := configMapOf(t, "selchg", "kept").Labels["k8s-addon"]; got != "new.addons.k8s.io" {
		t.Errorf("ConfigMap kept has k8s-addon=%q, want the new selector's value", got)
	}
}

func TestIntegrationDeleteKeepsNamespaceOthersUse(t *testing.T) {
	dir := t.TempDir()
	loc := channelstest.WriteChannel(t, dir, "channel.yaml",
		channelstest.Release{Name: "nsuse-a", Version: "1.0.0", Manifest: channelstest.Manifest(channelstest.Namespace("nsuse"), channelstest.ConfigMap("nsuse", "a", "a"))},
		channelstest.Release{Name: "nsuse-b", Version: "1.0.0", Manifest: channelstest.Manifest(channelstest.Namespace("nsuse"), channelstest.ConfigMap("nsuse", "b", "b"))})
	c := newTestClient(t)
	if res := run(t, c, loc); res.err != nil {
		t.Fatal(res.err)
	}
	// The namespace carries the label of the addon applied last.
	u, err := c.PlanUninstall(context.Background(), channel.DefaultNamespace, "nsuse-b", DeleteOptions{Namespaces: true})
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, o := range u.Keep {
		kept = append(kept, o.String()+": "+o.Reason)
	}
	if diff := cmp.Diff(kept, []string{"Namespace nsuse: the install record of addon nsuse-a uses it"}); diff != "" {
		t.Errorf("kept (-got +want):\n%s", diff)
	}
	var deleted []string
	for _, o := range u.Delete {
		deleted = append(deleted, o.String())
	}
	if diff := cmp.Diff(deleted, []string{"ConfigMap nsuse/b"}); diff != "" {
		t.Errorf("deleted (-got +want):\n%s", diff)
	}
	// Deleted together (channels delete addon nsuse-a nsuse-b), the two do
	// not keep each other's Namespace.
	u, err = c.PlanUninstall(context.Background(), channel.DefaultNamespace, "nsuse-b", DeleteOptions{Namespaces: true, Along: []string{"nsuse-a", "nsuse-b"}})
	if err != nil {
		t.Fatal(err)
	}
	deleted = nil
	for _, o := range u.Delete {
		deleted = append(deleted, o.String())
	}
	if diff := cmp.Diff(deleted, []string{"ConfigMap nsuse/b", "Namespace nsuse"}, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("deleted along with nsuse-a (-got +want):\n%s", diff)
	}
}
