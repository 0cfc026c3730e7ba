package preview

import (
	"reflect"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Masks that stand for a Secret's values in a diff: they tell whether a key
// is added, removed, changed or unchanged, and nothing about the value.
const (
	maskAdded     = "(sensitive: added)"
	maskRemoved   = "(sensitive: removed)"
	maskUnchanged = "(sensitive: unchanged)"
	maskBefore    = "(sensitive: changed, before)"
	maskAfter     = "(sensitive: changed, after)"
)

// lastApplied is the annotation kubectl apply keeps the applied object in,
// a Secret's data included.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// isSecret reports whether gk is the core Secret kind.
func isSecret(gk schema.GroupKind) bool {
	return gk.Group == "" && gk.Kind == "Secret"
}

// maskSecrets returns copies of a Secret as it is live and as it would be
// (either may be nil) with each value under data and stringData, and the
// last-applied-configuration annotation, replaced by a mask that says only
// whether it is added, removed, changed or unchanged, so that a diff of
// the two shows which keys change and never a value.
func maskSecrets(live, merged *unstructured.Unstructured) (*unstructured.Unstructured, *unstructured.Unstructured) {
	var before, after map[string]any
	if live != nil {
		live = live.DeepCopy()
		before = live.Object
	}
	if merged != nil {
		merged = merged.DeepCopy()
		after = merged.Object
	}
	for _, field := range []string{"data", "stringData"} {
		b, bok := before[field]
		a, aok := after[field]
		bm, bIsMap := b.(map[string]any)
		am, aIsMap := a.(map[string]any)
		if bok && !bIsMap || aok && !aIsMap {
			// Not a map, as a valid Secret's is: mask the field whole.
			bv, av := maskPair(b, a, bok, aok)
			if bok {
				before[field] = bv
			}
			if aok {
				after[field] = av
			}
			continue
		}
		for k, v := range bm {
			w, ok := am[k]
			bv, av := maskPair(v, w, true, ok)
			bm[k] = bv
			if ok {
				am[k] = av
			}
		}
		for k := range am {
			if _, ok := bm[k]; !ok {
				am[k] = maskAdded
			}
		}
	}
	ba, bok := annotation(live)
	aa, aok := annotation(merged)
	if bok || aok {
		bm, am := maskPair(ba, aa, bok, aok)
		if bok {
			live.SetAnnotations(withAnnotation(live.GetAnnotations(), bm))
		}
		if aok {
			merged.SetAnnotations(withAnnotation(merged.GetAnnotations(), am))
		}
	}
	return live, merged
}

// maskPair returns the masks for a value before and after, each present or
// not; the mask of an absent value is "".
func maskPair(before, after any, bok, aok bool) (string, string) {
	switch {
	case bok && !aok:
		return maskRemoved, ""
	case !bok && aok:
		return "", maskAdded
	case reflect.DeepEqual(before, after):
		return maskUnchanged, maskUnchanged
	default:
		return maskBefore, maskAfter
	}
}

func annotation(u *unstructured.Unstructured) (string, bool) {
	if u == nil {
		return "", false
	}
	v, ok := u.GetAnnotations()[lastApplied]
	return v, ok
}

func withAnnotation(a map[string]string, v string) map[string]string {
	a[lastApplied] = v
	return a
}
