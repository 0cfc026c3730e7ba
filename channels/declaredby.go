package channels

import (
	"context"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// DeclaredByAnnotation lists, comma-separated and sorted, every addon that
// declared an object when it was last applied, when more than one did (two
// addons declaring it alike, or one adopting it from another, see
// AdoptAnnotation). The object's IdentityLabel names the one that applied
// it; the others keep it from being pruned or deleted with the first
// (it is handed over to them instead), even when they are not in the run.
// channels sets it, as DeclaredByFieldManager; it is not meant to be
// written in manifests.
const DeclaredByAnnotation = "channels.kos.example.com/declared-by"

// declaredBy reads an object's DeclaredByAnnotation.
func declaredBy(u *unstructured.Unstructured) []string {
	v := u.GetAnnotations()[DeclaredByAnnotation]
	if v == "" {
		return nil
	}
	return strings.Split(v, ",")
}

// declaredByValues returns the DeclaredByAnnotation of each object of a
// release that other addons declare too (others, by key).
func declaredByValues(self string, others map[ObjectKey]map[string]bool) map[ObjectKey]string {
	out := map[ObjectKey]string{}
	for key, by := range others {
		if len(by) == 0 {
			continue
		}
		names := map[string]bool{self: true}
		for n := range by {
			names[n] = true
		}
		out[key] = strings.Join(sortedStrings(names), ",")
	}
	return out
}

// DeclaredByFieldManager is the field manager that writes
// DeclaredByAnnotation, apart from the applier (FieldManager): an apply of
// a manifest, which never holds the annotation, leaves it alone, and drift
// checks do not see it as a change.
const DeclaredByFieldManager = "channels-declared-by"

// syncDeclaredBy sets an applied object's DeclaredByAnnotation to want, or
// removes it when want is empty, when it differs from out (the object as
// applied).
func (w *addonWriter) syncDeclaredBy(ctx context.Context, t *target, out *unstructured.Unstructured, want string) error {
	if out == nil || out.GetAnnotations()[DeclaredByAnnotation] == want {
		return nil
	}
	obj := &unstructured.Unstructured{}
	obj.SetAPIVersion(t.obj.GetAPIVersion())
	obj.SetKind(t.obj.GetKind())
	obj.SetName(t.key.Name)
	obj.SetNamespace(t.key.Namespace)
	if want != "" {
		obj.SetAnnotations(map[string]string{DeclaredByAnnotation: want})
	}
	_, err := resourceFor(w.client.Dynamic, t.mapping.Resource, t.key.Namespace).Apply(ctx, t.key.Name, obj, metav1.ApplyOptions{FieldManager: DeclaredByFieldManager, Force: true})
	if err != nil {
		return fmt.Errorf("recording who declares %s: %w", t.key, err)
	}
	return nil
}

// coDeclarers returns, for each addon of a run, the objects other addons
// of the run declare too (Namespaces left out), with their names.
func coDeclarers(ros []*rollout) map[*rollout]map[ObjectKey]map[string]bool {
	claims := map[ObjectKey][]*rollout{}
	for _, ro := range ros {
		for _, u := range ro.objs {
			if key := keyOf(u); !key.IsNamespace() {
				claims[key] = append(claims[key], ro)
			}
		}
	}
	out := map[*rollout]map[ObjectKey]map[string]bool{}
	for key, by := range claims {
		for _, ro := range by {
			for _, o := range by {
				if o == ro {
					continue
				}
				if out[ro] == nil {
					out[ro] = map[ObjectKey]map[string]bool{}
				}
				if out[ro][key] == nil {
					out[ro][key] = map[string]bool{}
				}
				out[ro][key][o.item.Addon.Name] = true
			}
		}
	}
	return out
}
