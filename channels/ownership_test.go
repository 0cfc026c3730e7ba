package channels

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kos-sdn/kos/channels/install"
)

func TestCheckDuplicates(t *testing.T) {
	t.Parallel()
	obj := func(kind, name, value string, adopt bool) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"data": map[string]any{"key": value}}}
		u.SetAPIVersion("v1")
		u.SetKind(kind)
		u.SetName(name)
		if kind != "Namespace" {
			u.SetNamespace("ns")
		}
		if adopt {
			u.SetAnnotations(map[string]string{AdoptAnnotation: "true"})
		}
		return u
	}
	ro := func(name string, objs ...*unstructured.Unstructured) *rollout {
		sel := map[string]string{"k8s-addon": name + ".addons.k8s.io"}
		r := &rollout{item: PlanItem{Addon: &Addon{Name: name, Selector: sel}}, objs: objs, adopt: map[ObjectKey]bool{}}
		// As releaseObjects stamps them: the addons' labels differ.
		StampLabels(objs, sel)
		StampLabels(objs, map[string]string{IdentityLabel: name})
		for _, u := range objs {
			if adopts(u) {
				r.adopt[keyOf(u)] = true
			}
		}
		return r
	}
	kopsLabelled := func(u *unstructured.Unstructured, addon string) *unstructured.Unstructured {
		u.SetLabels(map[string]string{kopsAddonLabel: addon, managedByLabel: "kops"})
		return u
	}
	for _, tc := range []struct {
		name string
		ros  []*rollout
		want []string // the addons that fail
	}{
		{"distinct objects", []*rollout{ro("a", obj("ConfigMap", "x", "1", false)), ro("b", obj("ConfigMap", "y", "1", false))}, nil},
		{"a shared namespace", []*rollout{ro("a", obj("Namespace", "ns", "1", false)), ro("b", obj("Namespace", "ns", "2", false))}, nil},
		{"declared alike", []*rollout{ro("a", obj("ConfigMap", "x", "1", false)), ro("b", obj("ConfigMap", "x", "1", false))}, nil},
		{"declared alike, kOps's labels naming each addon", []*rollout{
			ro("a", kopsLabelled(obj("Secret", "scaleway-secret", "1", false), "a.addons.k8s.io")),
			ro("b", kopsLabelled(obj("Secret", "scaleway-secret", "1", false), "b.addons.k8s.io")),
		}, nil},
		{"declared differently, neither adopts", []*rollout{ro("a", obj("ConfigMap", "x", "1", false)), ro("b", obj("ConfigMap", "x", "2", false))}, []string{"a", "b"}},
		{"three declarers, one differs", []*rollout{ro("a", obj("ConfigMap", "x", "1", false)), ro("b", obj("ConfigMap", "x", "1", false)), ro("c", obj("ConfigMap", "x", "2", false))}, []string{"a", "b", "c"}},
		{"declared differently, one adopts", []*rollout{ro("a", obj("ConfigMap", "x", "1", false)), ro("b", obj("ConfigMap", "x", "2", true))}, []string{"a"}},
		{"declared differently, both adopt", []*rollout{ro("a", obj("ConfigMap", "x", "1", true)), ro("b", obj("ConfigMap", "x", "2", true))}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for name := range checkDuplicates(tc.ros) {
				got = append(got, name)
			}
			sort.Strings(got)
			if diff := cmp.Diff(got, tc.want); diff != "" {
				t.Errorf("failing addons (-got +want):\n%s", diff)
			}
		})
	}
}

func TestMadeByChannels(t *testing.T) {
	t.Parallel()
	sel := map[string]string{"k8s-addon": "a.addons.k8s.io"}
	obj := func(labels map[string]string, managers ...string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetLabels(labels)
		var entries []metav1.ManagedFieldsEntry
		for _, m := range managers {
			entries = append(entries, metav1.ManagedFieldsEntry{Manager: m, Operation: metav1.ManagedFieldsOperationUpdate})
		}
		u.SetManagedFields(entries)
		return u
	}
	for _, tc := range []struct {
		name string
		obj  *unstructured.Unstructured
		want bool
	}{
		{"a user's", obj(nil, "kubectl-create"), false},
		{"Helm's", obj(map[string]string{managedByLabel: "Helm"}, "helm"), false},
		{"another selector value", obj(map[string]string{"k8s-addon": "b.addons.k8s.io"}, "kubectl-client-side-apply"), false},
		{"no managers, no labels", obj(nil), false},
		{"the addon's selector (an older channels)", obj(map[string]string{"k8s-addon": "a.addons.k8s.io"}, "kubectl-client-side-apply"), true},
		{"applied by channels", obj(nil, FieldManager), true},
		{"applied by kOps's channels", obj(nil, "kops"), true},
		{"kOps's addon label", obj(map[string]string{kopsAddonLabel: "x.addons.k8s.io"}, "kubectl-create"), true},
		{"managed by kOps", obj(map[string]string{managedByLabel: "kops"}, "kubectl-create"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := madeByChannels(tc.obj, sel); got != tc.want {
				t.Errorf("madeByChannels = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestProtection(t *testing.T) {
	t.Parallel()
	obj := func(kind string, annotations map[string]string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("v1")
		u.SetKind(kind)
		u.SetAnnotations(annotations)
		return u
	}
	for _, tc := range []struct {
		name  string
		obj   *unstructured.Unstructured
		named bool
		kept  bool
	}{
		{"a ConfigMap", obj("ConfigMap", nil), false, false},
		{"a kept ConfigMap", obj("ConfigMap", map[string]string{KeepAnnotation: "true"}), false, true},
		{"a claim", obj("PersistentVolumeClaim", nil), false, true},
		{"a deletable claim", obj("PersistentVolumeClaim", map[string]string{DeletableAnnotation: "true"}), false, false},
		{"a claim the prune spec names", obj("PersistentVolumeClaim", nil), true, false},
		{"a deletable claim kept", obj("PersistentVolumeClaim", map[string]string{DeletableAnnotation: "true", KeepAnnotation: "true"}), true, true},
		{"keep not true", obj("ConfigMap", map[string]string{KeepAnnotation: "false"}), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := protection(tc.obj, tc.named) != ""; got != tc.kept {
				t.Errorf("kept = %v, want %v (%q)", got, tc.kept, protection(tc.obj, tc.named))
			}
		})
	}
}

func TestMayHold(t *testing.T) {
	t.Parallel()
	d := &declarations{installedRead: true, installed: []Installed{
		{Namespace: "kube-system", Name: "ours", Record: &Record{Inventory: &install.Inventory{Kinds: []string{"ConfigMap"}, Namespaces: []string{"app"}, Identity: IdentityLabel + "=ours"}}},
		{Namespace: "kube-system", Name: "kops", Record: &Record{Channel: "s3://state/addons/bootstrap-channel.yaml"}},
	}}
	obj := func(declaredBy string, managers ...string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		if declaredBy != "" {
			u.SetAnnotations(map[string]string{DeclaredByAnnotation: declaredBy})
		}
		for _, m := range managers {
			u.SetManagedFields(append(u.GetManagedFields(), metav1.ManagedFieldsEntry{Manager: m}))
		}
		return u
	}
	for _, tc := range []struct {
		name  string
		addon string
		live  *unstructured.Unstructured
		want  bool
	}{
		{"an object it shares", "ours", obj("other,ours", FieldManager), true},
		{"an object others share", "ours", obj("a,b", FieldManager), false},
		{"an object nobody shares", "ours", obj("", FieldManager), false},
		{"a kOps record, an object kOps applied", "kops", obj("", "kops"), true},
		{"a kOps record, an object kOps never applied", "kops", obj("", FieldManager), false},
		{"our record, an object kOps applied", "ours", obj("", "kops"), false},
		{"the object unknown", "ours", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := d.mayHold(context.Background(), tc.addon, tc.live)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("mayHold = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestDeclaredByValues(t *testing.T) {
	t.Parallel()
	key := ObjectKey{GroupKind: schema.GroupKind{Kind: "ConfigMap"}, Namespace: "ns", Name: "x"}
	other := ObjectKey{GroupKind: schema.GroupKind{Kind: "ConfigMap"}, Namespace: "ns", Name: "y"}
	got := declaredByValues("b", map[ObjectKey]map[string]bool{key: {"c": true, "a": true}, other: {}})
	if diff := cmp.Diff(got, map[ObjectKey]string{key: "a,b,c"}); diff != "" {
		t.Errorf("declaredByValues (-got +want):\n%s", diff)
	}
}

func TestDefinitionUsers(t *testing.T) {
	t.Parallel()
	widget := schema.GroupKind{Group: "example.com", Kind: "Widget"}
	installed := []Installed{
		{Namespace: "kube-system", Name: "self", Record: &Record{Inventory: &install.Inventory{Kinds: []string{"Widget.example.com"}, Namespaces: []string{"app"}}}},
		{Namespace: "kube-system", Name: "user", Record: &Record{Inventory: &install.Inventory{Kinds: []string{"ConfigMap", "Widget.example.com"}, Namespaces: []string{"app"}}}},
		{Namespace: "records", Name: "elsewhere", Record: &Record{}},
		{Namespace: "kube-system", Name: "half", Pending: &install.Pending{Inventory: install.Inventory{Kinds: []string{"Gadget.example.com"}, Namespaces: []string{"half-ns"}}}},
	}
	for _, tc := range []struct {
		name string
		key  ObjectKey
		kind schema.GroupKind
		want []string
	}{
		{"a namespace another addon's objects are in", ObjectKey{GroupKind: schema.GroupKind{Kind: "Namespace"}, Name: "app"}, schema.GroupKind{}, []string{"user"}},
		{"a namespace holding another addon's record", ObjectKey{GroupKind: schema.GroupKind{Kind: "Namespace"}, Name: "records"}, schema.GroupKind{}, []string{"elsewhere"}},
		{"a namespace of a pending release", ObjectKey{GroupKind: schema.GroupKind{Kind: "Namespace"}, Name: "half-ns"}, schema.GroupKind{}, []string{"half"}},
		{"a namespace nobody else uses", ObjectKey{GroupKind: schema.GroupKind{Kind: "Namespace"}, Name: "lonely"}, schema.GroupKind{}, nil},
		{"a CRD whose kind another addon uses", ObjectKey{GroupKind: crdKind, Name: "widgets.example.com"}, widget, []string{"user"}},
		{"a CRD of a pending release's kind", ObjectKey{GroupKind: crdKind, Name: "gadgets.example.com"}, schema.GroupKind{Group: "example.com", Kind: "Gadget"}, []string{"half"}},
		{"a CRD nobody else uses", ObjectKey{GroupKind: crdKind, Name: "things.example.com"}, schema.GroupKind{Group: "example.com", Kind: "Thing"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := definitionUsers(installed, "self", tc.key, tc.kind)
			if diff := cmp.Diff(got, tc.want); diff != "" {
				t.Errorf("definitionUsers (-got +want):\n%s", diff)
			}
		})
	}
}

func TestMetadataObject(t *testing.T) {
	t.Parallel()
	deleted := metav1.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	m := &metav1.PartialObjectMetadata{
		TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadata"},
		ObjectMeta: metav1.ObjectMeta{
			Name: "c", Namespace: "ns", UID: "u1",
			Labels:            map[string]string{IdentityLabel: "a"},
			Annotations:       map[string]string{DeclaredByAnnotation: "a,b"},
			DeletionTimestamp: &deleted,
			ManagedFields:     []metav1.ManagedFieldsEntry{{Manager: "kubectl-client-side-apply", Operation: metav1.ManagedFieldsOperationUpdate}},
		},
	}
	u, err := metadataObject(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, m)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]any{
		"kind": u.GroupVersionKind().String(), "key": keyOf(u).String(), "uid": string(u.GetUID()),
		"labels": u.GetLabels(), "declaredBy": declaredBy(u), "deleted": u.GetDeletionTimestamp() != nil,
		"managers": foreignManagers(u), "kops": kopsMade(u),
	}
	want := map[string]any{
		"kind": "/v1, Kind=ConfigMap", "key": "ConfigMap ns/c", "uid": "u1",
		"labels": map[string]string{IdentityLabel: "a"}, "declaredBy": []string{"a", "b"}, "deleted": true,
		"managers": "kubectl-client-side-apply", "kops": false,
	}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("the object as ownership and prune read it (-got +want):\n%s", diff)
	}
}
