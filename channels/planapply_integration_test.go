package channels

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	"github.com/kos-sdn/kos/channels/internal/channelstest"
	"github.com/kos-sdn/kos/channels/preview"
)

// planRow is one object of a plan, or what applying did to it.
type planRow struct {
	Addon, Object string
	Action        preview.Action
}

// observed is what applying did to an object, seen from an addon, by its
// state before and after (nil when absent or being deleted).
func observed(addon string, before, after *unstructured.Unstructured) preview.Action {
	label := func(u *unstructured.Unstructured) string { return u.GetLabels()[IdentityLabel] }
	switch {
	case before == nil && after != nil:
		return preview.ActionCreate
	case before != nil && after == nil:
		return preview.ActionPrune
	case before == nil:
		return "absent"
	case before.GetUID() != after.GetUID():
		return "re-created"
	case label(before) == "" && label(after) == addon:
		return preview.ActionAdopt
	case label(before) == addon && label(after) != addon && label(after) != "":
		return preview.ActionHandOver
	case before.GetResourceVersion() == after.GetResourceVersion():
		return preview.ActionUnchanged
	default:
		return preview.ActionUpdate
	}
}

// TestIntegrationPlanEqualsApply runs, case by case, the plan and then the
// apply of a channel, and compares each object's row of the plan with what
// applying did to it (created, updated, left alone, pruned, handed over,
// adopted), and the addons the plan refuses with those applying refuses.
func TestIntegrationPlanEqualsApply(t *testing.T) {
	ctx := context.Background()
	c := newTestClient(t)
	cm := func(ns, name, value string) string { return channelstest.ConfigMap(ns, name, value) }
	for _, tc := range []struct {
		name string
		// setup prepares the cluster, with earlier runs of the channel
		// files it writes in dir.
		setup func(t *testing.T, dir, ns string)
		// final is the channel planned, then applied.
		final func(t *testing.T, dir, ns string) string
		adopt bool
		// want are the plan's rows, as "addon action object"; refused the
		// addons it refuses.
		want    []planRow
		refused []string
	}{
		{
			name: "create",
			final: func(t *testing.T, dir, ns string) string {
				return channelstest.WriteChannel(t, dir, "c.yaml", channelstest.Release{Name: ns + "-a", Version: "1.0.0", Manifest: cm(ns, "x", "1")})
			},
			want: []planRow{{"-a", "ConfigMap %s/x", preview.ActionCreate}},
		},
		{
			name: "update, unchanged, prune",
			setup: func(t *testing.T, dir, ns string) {
				mustRun(t, c, channelstest.WriteChannel(t, dir, "v1.yaml", channelstest.Release{Name: ns + "-a", Version: "1.0.0", Manifest: channelstest.Manifest(cm(ns, "a", "1"), cm(ns, "b", "1"), cm(ns, "c", "1"))}))
			},
			final: func(t *testing.T, dir, ns string) string {
				return channelstest.WriteChannel(t, dir, "v2.yaml", channelstest.Release{Name: ns + "-a", Version: "2.0.0", Manifest: channelstest.Manifest(cm(ns, "a", "2"), cm(ns, "b", "1"))})
			},
			want: []planRow{{"-a", "ConfigMap %s/a", preview.ActionUpdate}, {"-a", "ConfigMap %s/b", preview.ActionUnchanged}, {"-a", "ConfigMap %s/c", preview.ActionPrune}},
		},
		{
			name: "keep a claim and an annotated object",
			setup: func(t *testing.T, dir, ns string) {
				kept := fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: k, namespace: %s, annotations: {%s: \"true\"}}\n", ns, KeepAnnotation)
				mustRun(t, c, channelstest.WriteChannel(t, dir, "v1.yaml", channelstest.Release{Name: ns + "-a", Version: "1.0.0", Manifest: channelstest.Manifest(cm(ns, "a", "1"), kept, claim(ns, "data"))}))
			},
			final: func(t *testing.T, dir, ns string) string {
				return channelstest.WriteChannel(t, dir, "v2.yaml", channelstest.Release{Name: ns + "-a", Version: "2.0.0", Manifest: cm(ns, "a", "1")})
			},
			want: []planRow{{"-a", "ConfigMap %s/a", preview.ActionUnchanged}, {"-a", "ConfigMap %s/k", preview.ActionKeep}, {"-a", "PersistentVolumeClaim %s/data", preview.ActionKeep}},
		},
		{
			name: "hand-over in one run",
			setup: func(t *testing.T, dir, ns string) {
				mustRun(t, c, channelstest.WriteChannel(t, dir, "v1.yaml",
					channelstest.Release{Name: ns + "-a", Version: "1.0.0", Manifest: channelstest.Manifest(cm(ns, "a", "1"), cm(ns, "m", "1"))},
					channelstest.Release{Name: ns + "-b", Version: "1.0.0", Manifest: cm(ns, "b", "1")}))
			},
			final: func(t *testing.T, dir, ns string) string {
				return channelstest.WriteChannel(t, dir, "v2.yaml",
					channelstest.Release{Name: ns + "-a", Version: "2.0.0", Manifest: cm(ns, "a", "1")},
					channelstest.Release{Name: ns + "-b", Version: "2.0.0", Manifest: channelstest.Manifest(cm(ns, "b", "1"), cm(ns, "m", "2"))})
			},
			want: []planRow{
				{"-a", "ConfigMap %s/a", preview.ActionUnchanged}, {"-a", "ConfigMap %s/m", preview.ActionHandOver},
				{"-b", "ConfigMap %s/b", preview.ActionUnchanged}, {"-b", "ConfigMap %s/m", preview.ActionUpdate},
			},
		},
		{
			name: "adopt a user's object when asked",
			setup: func(t *testing.T, dir, ns string) {
				createUserConfigMap(t, ns, "u")
			},
			final: func(t *testing.T, dir, ns string) string {
				return channelstest.WriteChannel(t, dir, "c.yaml", channelstest.Release{Name: ns + "-a", Version: "1.0.0", Manifest: channelstest.Manifest(cm(ns, "u", "release"), cm(ns, "x", "1"))})
			},
			adopt: true,
			want:  []planRow{{"-a", "ConfigMap %s/u", preview.ActionAdopt}, {"-a", "ConfigMap %s/x", preview.ActionCreate}},
		},
		{
			name: "refuse a user's object",
			setup: func(t *testing.T, dir, ns string) {
				createUserConfigMap(t, ns, "u")
			},
			final: func(t *testing.T, dir, ns string) string {
				return channelstest.WriteChannel(t, dir, "c.yaml", channelstest.Release{Name: ns + "-a", Version: "1.0.0", Manifest: channelstest.Manifest(cm(ns, "u", "release"), cm(ns, "x", "1"))})
			},
			want:    []planRow{{"-a", "ConfigMap %s/u", preview.ActionAdopt}, {"-a", "ConfigMap %s/x", preview.ActionCreate}},
			refused: []string{"-a"},
		},
		{
			name: "a field kOps owns that the release drops",
			setup: func(t *testing.T, dir, ns string) {
				// As kOps's channels applied it, with the labels this
				// addon stamps: only the field the release lacks differs.
				labels := map[string]string{IdentityLabel: ns + "-a"}
				for k, v := range channelstest.SelectorOf(ns + "-a") {
					labels[k] = v
				}
				obj := corev1ac.ConfigMap("k", ns).WithLabels(labels).WithData(map[string]string{"key": "1", "old": "gone"})
				if _, err := kube(t).CoreV1().ConfigMaps(ns).Apply(ctx, obj, metav1.ApplyOptions{FieldManager: "kops"}); err != nil {
					t.Fatal(err)
				}
			},
			final: func(t *testing.T, dir, ns string) string {
				return channelstest.WriteChannel(t, dir, "c.yaml", channelstest.Release{Name: ns + "-a", Version: "1.0.0", Manifest: cm(ns, "k", "1")})
			},
			want: []planRow{{"-a", "ConfigMap %s/k", preview.ActionUpdate}},
		},
		{
			name: "two addons declaring one object alike",
			final: func(t *testing.T, dir, ns string) string {
				return channelstest.WriteChannel(t, dir, "c.yaml",
					channelstest.Release{Name: ns + "-a", Version: "1.0.0", Manifest: cm(ns, "s", "1")},
					channelstest.Release{Name: ns + "-b", Version: "1.0.0", Manifest: cm(ns, "s", "1")})
			},
			want: []planRow{{"-a", "ConfigMap %s/s", preview.ActionCreate}, {"-b", "ConfigMap %s/s", preview.ActionCreate}},
		},
		{
			name: "two addons declaring one object differently",
			final: func(t *testing.T, dir, ns string) string {
				return channelstest.WriteChannel(t, dir, "c.yaml",
					channelstest.Release{Name: ns + "-a", Version: "1.0.0", Manifest: cm(ns, "s", "1")},
					channelstest.Release{Name: ns + "-b", Version: "1.0.0", Manifest: cm(ns, "s", "2")})
			},
			want:    []planRow{{"-a", "ConfigMap %s/s", preview.ActionCreate}, {"-b", "ConfigMap %s/s", preview.ActionCreate}},
			refused: []string{"-a", "-b"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := planNamespace(t, tc.name)
			dir := t.TempDir()
			if tc.setup != nil {
				tc.setup(t, dir, ns)
			}
			loc := tc.final(t, dir, ns)
			for i := range tc.want {
				tc.want[i].Addon = ns + tc.want[i].Addon
				tc.want[i].Object = fmt.Sprintf(tc.want[i].Object, ns)
			}
			var wantRefused []string
			for _, r := range tc.refused {
				wantRefused = append(wantRefused, ns+r)
			}

			releases, err := Load(ctx, NewFetcher(), loc)
			if err != nil {
				t.Fatal(err)
			}
			plan, err := c.Plan(ctx, releases)
			if err != nil {
				t.Fatal(err)
			}
			previews, err := c.Preview(ctx, plan, PreviewOptions{Adopt: tc.adopt})
			planRefused := refusedAddons(t, err)
			var rows []planRow
			var objects []ObjectKey
			seen := map[ObjectKey]bool{}
			for _, p := range previews {
				for _, ch := range p.Objects {
					rows = append(rows, planRow{p.Addon, ch.String(), ch.Action})
					if to, ok := strings.CutPrefix(ch.Note, "to addon "); ch.Action == preview.ActionHandOver && (!ok || ch.Merged == nil || ch.Merged.GetLabels()[IdentityLabel] != to) {
						t.Errorf("hand-over row %s (%s) does not show the object as addon %q will have it: %v", ch, ch.Note, to, ch.Merged)
					}
					key := ObjectKey{GroupKind: ch.Kind, Namespace: ch.Namespace, Name: ch.Name}
					if !seen[key] {
						seen[key] = true
						objects = append(objects, key)
					}
				}
			}
			sortRows(rows)
			sortRows(tc.want)
			if diff := cmp.Diff(rows, tc.want); diff != "" {
				t.Errorf("plan (-got +want):\n%s", diff)
			}
			if diff := cmp.Diff(planRefused, wantRefused); diff != "" {
				t.Errorf("addons the plan refuses (-got +want):\n%s", diff)
			}

			before := snapshot(t, objects)
			res := runWith(t, c, ApplyOptions{Adopt: tc.adopt}, loc)
			after := snapshot(t, objects)
			if diff := cmp.Diff(refusedAddons(t, res.err), planRefused); diff != "" {
				t.Errorf("addons applying refused, against the plan's (-got +want):\n%s", diff)
			}
			var did []planRow
			for _, r := range rows {
				key := keyOfRow(r, objects)
				if slices.Contains(planRefused, r.Addon) {
					// Refused: nothing of it changes.
					did = append(did, planRow{r.Addon, r.Object, sameOrChanged(before[key], after[key], r.Action)})
					continue
				}
				got := observed(r.Addon, before[key], after[key])
				if r.Action == preview.ActionKeep && got == preview.ActionUnchanged {
					got = preview.ActionKeep
				}
				did = append(did, planRow{r.Addon, r.Object, got})
			}
			if diff := cmp.Diff(did, rows); diff != "" {
				t.Errorf("what applying did, against the plan (-got +want):\n%s", diff)
			}
		})
	}
}

// planNamespace makes a namespace for a case of TestIntegrationPlanEqualsApply.
func planNamespace(t *testing.T, name string) string {
	t.Helper()
	n := 0
	for _, r := range name {
		n = n*31 + int(r)
	}
	ns := fmt.Sprintf("pe-%x", uint32(n))
	createNamespace(t, ns)
	return ns
}

func mustRun(t *testing.T, c *Client, loc string) {
	t.Helper()
	if res := run(t, c, loc); res.err != nil {
		t.Fatalf("setting up: %v", res.err)
	}
}

// createUserConfigMap makes a ConfigMap as a user does with kubectl create.
func createUserConfigMap(t *testing.T, ns, name string) {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: map[string]string{"key": "mine"}}
	if _, err := kube(t).CoreV1().ConfigMaps(ns).Create(context.Background(), cm, metav1.CreateOptions{FieldManager: "kubectl-create"}); err != nil {
		t.Fatal(err)
	}
}

// refusedAddons names the addons an *ApplyError lists, sorted; nil for no
// error.
func refusedAddons(t *testing.T, err error) []string {
	t.Helper()
	if err == nil {
		return nil
	}
	var ae *ApplyError
	if !errors.As(err, &ae) {
		t.Fatalf("error %v, want an *ApplyError", err)
	}
	var out []string
	for _, f := range ae.Failed {
		out = append(out, f.Addon)
	}
	sort.Strings(out)
	return out
}

func sortRows(rows []planRow) {
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].Addon != rows[j].Addon {
			return rows[i].Addon < rows[j].Addon
		}
		return rows[i].Object < rows[j].Object
	})
}

// snapshot reads the objects (ConfigMaps and claims); an absent object,
// or one being deleted, is left out.
func snapshot(t *testing.T, keys []ObjectKey) map[ObjectKey]*unstructured.Unstructured {
	t.Helper()
	out := map[ObjectKey]*unstructured.Unstructured{}
	for _, k := range keys {
		gvr := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
		if k.GroupKind == claimKind {
			gvr.Resource = "persistentvolumeclaims"
		}
		u, err := newTestClient(t).Dynamic.Resource(gvr).Namespace(k.Namespace).Get(context.Background(), k.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			t.Fatal(err)
		case u.GetDeletionTimestamp() == nil:
			out[k] = u
		}
	}
	return out
}

func keyOfRow(r planRow, keys []ObjectKey) ObjectKey {
	for _, k := range keys {
		if k.String() == r.Object {
			return k
		}
	}
	return ObjectKey{}
}

// sameOrChanged is the plan's action when an object of a refused addon is
// as it was, "changed" otherwise.
func sameOrChanged(before, after *unstructured.Unstructured, planned preview.Action) preview.Action {
	switch {
	case before == nil && after == nil:
		return planned
	case before == nil || after == nil, before.GetResourceVersion() != after.GetResourceVersion():
		return "changed"
	}
	return planned
}
