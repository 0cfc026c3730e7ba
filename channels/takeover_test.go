package channels

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/kos-sdn/kos/channels/preview"
)

func TestTakeovers(t *testing.T) {
	t.Parallel()
	entry := func(manager string, op metav1.ManagedFieldsOperationType, fields string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Operation: op, APIVersion: "v1", FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(fields)}}
	}
	object := func(entries ...metav1.ManagedFieldsEntry) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "x", "namespace": "ns"}}}
		u.SetManagedFields(entries)
		return u
	}
	const apply, update = metav1.ManagedFieldsOperationApply, metav1.ManagedFieldsOperationUpdate
	tests := []struct {
		name         string
		live, merged *unstructured.Unstructured
		want         []preview.Takeover
	}{{
		name:   "created",
		merged: object(entry(FieldManager, apply, `{"f:data":{"f:a":{}}}`)),
	}, {
		name:   "an edit reverted: the editor loses the field",
		live:   object(entry(FieldManager, apply, `{"f:data":{"f:a":{}}}`), entry("kubectl-edit", update, `{"f:data":{"f:b":{}}}`)),
		merged: object(entry(FieldManager, apply, `{"f:data":{"f:a":{},"f:b":{}}}`)),
		want:   []preview.Takeover{{Manager: "kubectl-edit", TakenOver: []string{".data.b"}}},
	}, {
		name:   "the same value: shared, no takeover",
		live:   object(entry(FieldManager, apply, `{"f:data":{"f:a":{}}}`), entry("kubectl-edit", update, `{"f:data":{"f:b":{}}}`)),
		merged: object(entry(FieldManager, apply, `{"f:data":{"f:a":{},"f:b":{}}}`), entry("kubectl-edit", update, `{"f:data":{"f:b":{}}}`)),
	}, {
		name:   "a field the release does not set stays its manager's",
		live:   object(entry(FieldManager, apply, `{"f:data":{"f:a":{}}}`), entry("hpa", update, `{"f:data":{"f:c":{}}}`)),
		merged: object(entry(FieldManager, apply, `{"f:data":{"f:a":{}}}`), entry("hpa", update, `{"f:data":{"f:c":{}}}`)),
	}, {
		name: "kOps's fields: all taken over, the ones not set removed, the ones another manager owns kept",
		live: object(
			entry("kops", apply, `{"f:data":{"f:a":{},"f:old":{},"f:shared":{}},"f:metadata":{"f:annotations":{"f:addons.k8s.io/x":{}}}}`),
			entry("other", update, `{"f:data":{"f:shared":{}}}`),
		),
		merged: object(
			entry("kops", apply, `{"f:data":{"f:a":{},"f:old":{},"f:shared":{}},"f:metadata":{"f:annotations":{"f:addons.k8s.io/x":{}}}}`),
			entry("other", update, `{"f:data":{"f:shared":{}}}`),
			entry(FieldManager, apply, `{"f:data":{"f:a":{}}}`),
		),
		want: []preview.Takeover{{Manager: "kops", TakenOver: []string{".data.a"}, Removed: []string{".data.old"}}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.live != nil {
				// Record paths are found by the annotations' keys.
				tt.live.SetAnnotations(map[string]string{AnnotationPrefix + "x": "{}"})
			}
			got, err := takeovers(tt.live, tt.merged)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(got, tt.want); diff != "" {
				t.Errorf("takeovers (-got +want):\n%s", diff)
			}
		})
	}
}

func TestRemoveFields(t *testing.T) {
	t.Parallel()
	obj := func() map[string]any {
		return map[string]any{
			"data": map[string]any{"kept": "1", "old": "gone"},
			"spec": map[string]any{
				"containers": []any{
					map[string]any{"name": "a", "image": "x", "args": []any{"-v"}},
					map[string]any{"name": "b", "image": "y"},
				},
				"finalizers": []any{"one", "two"},
			},
		}
	}
	for _, tc := range []struct {
		name   string
		fields string
		want   func(map[string]any)
	}{
		{"a field of a map", `{"f:data":{"f:old":{}}}`, func(o map[string]any) {
			delete(o["data"].(map[string]any), "old")
		}},
		{"a field of a keyed item", `{"f:spec":{"f:containers":{"k:{\"name\":\"a\"}":{"f:args":{}}}}}`, func(o map[string]any) {
			delete(o["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any), "args")
		}},
		{"a keyed item with its fields", `{"f:spec":{"f:containers":{"k:{\"name\":\"b\"}":{".":{},"f:name":{},"f:image":{}}}}}`, func(o map[string]any) {
			spec := o["spec"].(map[string]any)
			spec["containers"] = spec["containers"].([]any)[:1]
		}},
		{"an item of a set", `{"f:spec":{"f:finalizers":{"v:\"one\"":{}}}}`, func(o map[string]any) {
			o["spec"].(map[string]any)["finalizers"] = []any{"two"}
		}},
		{"a field not there", `{"f:status":{"f:phase":{}}}`, func(map[string]any) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set := &fieldpath.Set{}
			if err := set.FromJSON(strings.NewReader(tc.fields)); err != nil {
				t.Fatal(err)
			}
			got, want := obj(), obj()
			removeFields(got, set)
			tc.want(want)
			if diff := cmp.Diff(got, want); diff != "" {
				t.Errorf("after removing (-got +want):\n%s", diff)
			}
		})
	}
}

func TestWithoutFieldsOf(t *testing.T) {
	t.Parallel()
	release := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": "app", "labels": map[string]any{"a": "1"}},
		"spec": map[string]any{
			"replicas": int64(2),
			"template": map[string]any{"spec": map[string]any{"containers": []any{
				map[string]any{"name": "c", "image": "pause", "args": []any{"x"}},
				map[string]any{"name": "d", "image": "pause"},
			}}},
		},
	}}
	live := release.DeepCopy()
	live.SetManagedFields([]metav1.ManagedFieldsEntry{
		{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "scale",
			FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{"f:replicas":{}}}`)}},
		{Manager: "injector", Operation: metav1.ManagedFieldsOperationUpdate,
			FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{"f:template":{"f:spec":{"f:containers":{"k:{\"name\":\"d\"}":{".":{},"f:image":{}}}}}}}`)}},
		{Manager: "kubectl-edit", Operation: metav1.ManagedFieldsOperationUpdate,
			FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:labels":{"f:a":{}}}}`)}},
	})
	got, err := WithoutFieldsOf(release, live, sets.New("kube-controller-manager", "injector"))
	if err != nil {
		t.Fatal(err)
	}
	want := release.DeepCopy()
	unstructured.RemoveNestedField(want.Object, "spec", "replicas")
	containers, _, _ := unstructured.NestedSlice(want.Object, "spec", "template", "spec", "containers")
	delete(containers[1].(map[string]any), "image")
	if err := unstructured.SetNestedSlice(want.Object, containers, "spec", "template", "spec", "containers"); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(got.Object, want.Object); diff != "" {
		t.Errorf("WithoutFieldsOf (-got +want):\n%s", diff)
	}
	if _, ok, _ := unstructured.NestedInt64(release.Object, "spec", "replicas"); !ok {
		t.Error("WithoutFieldsOf changed the release's object")
	}
}
