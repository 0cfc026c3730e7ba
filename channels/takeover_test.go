package channels

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestTakeovers(t *testing.T) {
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
		want         []Takeover
	}{{
		name:   "created",
		merged: object(entry(FieldManager, apply, `{"f:data":{"f:a":{}}}`)),
	}, {
		name:   "an edit reverted: the editor loses the field",
		live:   object(entry(FieldManager, apply, `{"f:data":{"f:a":{}}}`), entry("kubectl-edit", update, `{"f:data":{"f:b":{}}}`)),
		merged: object(entry(FieldManager, apply, `{"f:data":{"f:a":{},"f:b":{}}}`)),
		want:   []Takeover{{Manager: "kubectl-edit", TakenOver: []string{".data.b"}}},
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
		want: []Takeover{{Manager: "kops", TakenOver: []string{".data.a"}, Removed: []string{".data.old"}}},
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
