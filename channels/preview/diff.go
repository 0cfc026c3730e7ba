package preview

import (
	"fmt"
	"reflect"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/kos-sdn/kos/channels/diff"
)

// Comparable returns a copy of obj without managed fields and the fields
// the server sets, as kubectl diff leaves them out.
func Comparable(obj *unstructured.Unstructured) *unstructured.Unstructured {
	out := obj.DeepCopy()
	for _, f := range []string{"managedFields", "resourceVersion", "uid", "generation", "creationTimestamp", "selfLink"} {
		unstructured.RemoveNestedField(out.Object, "metadata", f)
	}
	unstructured.RemoveNestedField(out.Object, "status")
	return out
}

// Equal reports whether two objects are the same, field by field; compare
// them in their Comparable forms.
func Equal(a, b *unstructured.Unstructured) bool {
	return reflect.DeepEqual(a.Object, b.Object)
}

// Differs reports whether two forms of an object differ beyond their
// managed fields, status and the metadata the server sets, as kubectl diff
// compares them: a live object and a dry-run apply's answer differ when
// applying would change the object.
func Differs(a, b *unstructured.Unstructured) bool {
	return !Equal(Comparable(a), Comparable(b))
}

// Diff returns the unified diff of the change, from the live object to the
// object as it would be, in YAML, with managed fields and server-set fields
// left out (as kubectl diff shows it); "" when nothing changes.
// A Secret's values are masked: each key of data and stringData shows
// only whether it is added, removed, changed or unchanged.
func (o ObjectChange) Diff() (string, error) {
	live, merged := o.Live, o.Merged
	if isSecret(o.Kind) {
		live, merged = maskSecrets(live, merged)
	}
	name := o.String()
	before, err := yamlLines(live, name)
	if err != nil {
		return "", err
	}
	after, err := yamlLines(merged, name)
	if err != nil {
		return "", err
	}
	return diff.Unified("live/"+name, "applied/"+name, before, after), nil
}

// yamlLines renders u, the object name names, as lines of YAML; none
// when u is nil.
func yamlLines(u *unstructured.Unstructured, name string) ([]string, error) {
	if u == nil {
		return nil, nil
	}
	data, err := yaml.Marshal(u.Object)
	if err != nil {
		return nil, fmt.Errorf("encoding %s: %w", name, err)
	}
	lines := strings.SplitAfter(string(data), "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines, nil
}
