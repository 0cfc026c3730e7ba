package channels

import (
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestCheckDuplicates(t *testing.T) {
	obj := func(kind, name string, adopt bool) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
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
		r := &rollout{item: PlanItem{Addon: &Addon{Name: name}}, objs: objs, adopt: map[objectKey]bool{}}
		for _, u := range objs {
			if adopts(u) {
				r.adopt[keyOf(u)] = true
			}
		}
		return r
	}
	for _, tc := range []struct {
		name string
		ros  []*rollout
		want []string // the addons that fail
	}{
		{"distinct objects", []*rollout{ro("a", obj("ConfigMap", "x", false)), ro("b", obj("ConfigMap", "y", false))}, nil},
		{"a shared namespace", []*rollout{ro("a", obj("Namespace", "ns", false)), ro("b", obj("Namespace", "ns", false))}, nil},
		{"neither adopts", []*rollout{ro("a", obj("ConfigMap", "x", false)), ro("b", obj("ConfigMap", "x", false))}, []string{"a", "b"}},
		{"one adopts", []*rollout{ro("a", obj("ConfigMap", "x", false)), ro("b", obj("ConfigMap", "x", true))}, []string{"a"}},
		{"both adopt", []*rollout{ro("a", obj("ConfigMap", "x", true)), ro("b", obj("ConfigMap", "x", true))}, nil},
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

func TestDefinitionUsers(t *testing.T) {
	widget := schema.GroupKind{Group: "example.com", Kind: "Widget"}
	installed := []Installed{
		{Namespace: "kube-system", Name: "self", Record: &Record{Inventory: &Inventory{Kinds: []string{"Widget.example.com"}, Namespaces: []string{"app"}}}},
		{Namespace: "kube-system", Name: "user", Record: &Record{Inventory: &Inventory{Kinds: []string{"ConfigMap", "Widget.example.com"}, Namespaces: []string{"app"}}}},
		{Namespace: "records", Name: "elsewhere", Record: &Record{}},
		{Namespace: "kube-system", Name: "half", Pending: &Pending{Inventory: Inventory{Kinds: []string{"Gadget.example.com"}, Namespaces: []string{"half-ns"}}}},
	}
	for _, tc := range []struct {
		name string
		key  objectKey
		kind schema.GroupKind
		want []string
	}{
		{"a namespace another addon's objects are in", objectKey{GroupKind: schema.GroupKind{Kind: "Namespace"}, Name: "app"}, schema.GroupKind{}, []string{"user"}},
		{"a namespace holding another addon's record", objectKey{GroupKind: schema.GroupKind{Kind: "Namespace"}, Name: "records"}, schema.GroupKind{}, []string{"elsewhere"}},
		{"a namespace of a pending release", objectKey{GroupKind: schema.GroupKind{Kind: "Namespace"}, Name: "half-ns"}, schema.GroupKind{}, []string{"half"}},
		{"a namespace nobody else uses", objectKey{GroupKind: schema.GroupKind{Kind: "Namespace"}, Name: "lonely"}, schema.GroupKind{}, nil},
		{"a CRD whose kind another addon uses", objectKey{GroupKind: crdKind, Name: "widgets.example.com"}, widget, []string{"user"}},
		{"a CRD of a pending release's kind", objectKey{GroupKind: crdKind, Name: "gadgets.example.com"}, schema.GroupKind{Group: "example.com", Kind: "Gadget"}, []string{"half"}},
		{"a CRD nobody else uses", objectKey{GroupKind: crdKind, Name: "things.example.com"}, schema.GroupKind{Group: "example.com", Kind: "Thing"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := definitionUsers(installed, "self", tc.key, tc.kind)
			if diff := cmp.Diff(got, tc.want); diff != "" {
				t.Errorf("definitionUsers (-got +want):\n%s", diff)
			}
		})
	}
}
