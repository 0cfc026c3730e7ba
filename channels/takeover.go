package channels

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/util/csaupgrade"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	"sigs.k8s.io/structured-merge-diff/v6/value"

	"github.com/kos-sdn/kos/channels/install"
	"github.com/kos-sdn/kos/channels/preview"
)

// takenOver are the field managers whose fields applying takes over: kOps's
// channels applies (and, before server-side apply, updated) as "kops", and
// `kubectl apply` without --server-side updates as
// "kubectl-client-side-apply". Their fields would otherwise stay on an
// object after a release drops them, because this tool applies as
// FieldManager and only ever removes fields that manager owns.
var takenOver = sets.New("kops", "kubectl-client-side-apply")

// takeOverPatch returns the JSON patch that moves the fields other managers
// (takenOver) own on obj into FieldManager's Apply entry, or nil when they
// own none. It uses client-go's csaupgrade, which migrates Update entries:
// kOps's own Apply entries are handed to it as Update entries, the same
// fields under the same manager. The patch replaces managedFields and
// carries obj's resourceVersion, so it fails with a conflict if obj changed
// since it was read.
//
// Install records and pending inventories are never taken over: their paths
// are left out of the migrated entries, so they end up owned by no manager
// (or by the record writer alone) and no apply can remove them.
func takeOverPatch(obj *unstructured.Unstructured) ([]byte, error) {
	entries := obj.GetManagedFields()
	found := false
	for _, e := range entries {
		if takenOver.Has(e.Manager) && e.Subresource == "" {
			found = true
			break
		}
	}
	if !found {
		return nil, nil
	}
	// csaupgrade folds one Update entry per manager and API version into
	// the applier's: merge each taken-over manager's entries (kOps leaves
	// an Update entry of its record writes next to its Apply entry) first,
	// leaving the record paths out.
	records, keys := recordPaths(obj)
	kept := fieldpath.NewSet()
	type entryKey struct{ manager, apiVersion string }
	merged := map[entryKey]int{}
	var sets []*fieldpath.Set
	var prepared []metav1.ManagedFieldsEntry
	for _, e := range entries {
		if !takenOver.Has(e.Manager) || e.Subresource != "" {
			prepared = append(prepared, *e.DeepCopy())
			continue
		}
		set := &fieldpath.Set{}
		if e.FieldsV1 != nil {
			if err := set.FromJSON(bytes.NewReader(e.FieldsV1.Raw)); err != nil {
				return nil, fmt.Errorf("reading fields of manager %s: %w", e.Manager, err)
			}
		}
		kept = kept.Union(set.Intersection(keys))
		set = set.Difference(records)
		k := entryKey{e.Manager, e.APIVersion}
		if i, ok := merged[k]; ok {
			sets[i] = sets[i].Union(set)
			continue
		}
		merged[k] = len(sets)
		sets = append(sets, set)
		c := *e.DeepCopy()
		c.Operation = metav1.ManagedFieldsOperationUpdate
		prepared = append(prepared, c)
	}
	for i := range prepared {
		e := &prepared[i]
		j, ok := merged[entryKey{e.Manager, e.APIVersion}]
		if !ok || !takenOver.Has(e.Manager) || e.Subresource != "" {
			continue
		}
		raw, err := sets[j].ToJSON()
		if err != nil {
			return nil, fmt.Errorf("writing fields of manager %s: %w", e.Manager, err)
		}
		e.FieldsType = "FieldsV1"
		e.FieldsV1 = &metav1.FieldsV1{Raw: raw}
	}
	if !kept.Empty() {
		// The records these managers wrote stay owned, by the record
		// writer: a field no manager owns may be dropped by the server.
		if err := ownRecords(&prepared, kept, obj.GetAPIVersion()); err != nil {
			return nil, err
		}
	}
	// csaupgrade compares against the object's entries to tell whether
	// anything changed: give it the prepared ones.
	tmp := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{}}}
	tmp.SetResourceVersion(obj.GetResourceVersion())
	tmp.SetManagedFields(prepared)
	return csaupgrade.UpgradeManagedFieldsPatch(tmp, takenOver, FieldManager)
}

// recordPaths returns the paths of the install records and pending
// inventories among obj's annotations (keys), and those together with the
// annotations map itself (all): a manager that owns the map and stops
// sending it removes it whole, records included.
func recordPaths(obj *unstructured.Unstructured) (all, keys *fieldpath.Set) {
	keys = fieldpath.NewSet()
	for k := range obj.GetAnnotations() {
		if strings.HasPrefix(k, AnnotationPrefix) || strings.HasPrefix(k, install.InventoryAnnotationPrefix) {
			keys.Insert(fieldpath.MakePathOrDie("metadata", "annotations", k))
		}
	}
	all = keys.Union(fieldpath.NewSet())
	if !keys.Empty() {
		all.Insert(fieldpath.MakePathOrDie("metadata", "annotations"))
		all.Insert(fieldpath.MakePathOrDie("metadata"))
	}
	return all, keys
}

// ownRecords gives the record paths to install.RecordFieldManager's Update entry,
// adding one when there is none.
func ownRecords(entries *[]metav1.ManagedFieldsEntry, paths *fieldpath.Set, apiVersion string) error {
	for i := range *entries {
		e := &(*entries)[i]
		if e.Manager != install.RecordFieldManager || e.Operation != metav1.ManagedFieldsOperationUpdate || e.Subresource != "" || e.APIVersion != apiVersion {
			continue
		}
		set := &fieldpath.Set{}
		if e.FieldsV1 != nil {
			if err := set.FromJSON(bytes.NewReader(e.FieldsV1.Raw)); err != nil {
				return fmt.Errorf("reading fields of manager %s: %w", e.Manager, err)
			}
		}
		paths = paths.Union(set)
		raw, err := paths.ToJSON()
		if err != nil {
			return fmt.Errorf("writing fields of manager %s: %w", e.Manager, err)
		}
		e.FieldsType, e.FieldsV1 = "FieldsV1", &metav1.FieldsV1{Raw: raw}
		return nil
	}
	raw, err := paths.ToJSON()
	if err != nil {
		return fmt.Errorf("writing fields of manager %s: %w", install.RecordFieldManager, err)
	}
	now := metav1.Now()
	*entries = append(*entries, metav1.ManagedFieldsEntry{
		Manager:    install.RecordFieldManager,
		Operation:  metav1.ManagedFieldsOperationUpdate,
		APIVersion: apiVersion,
		Time:       &now,
		FieldsType: "FieldsV1",
		FieldsV1:   &metav1.FieldsV1{Raw: raw},
	})
	return nil
}

// takeovers works out, from the managed fields of live (nil when the object
// does not exist) and of merged (the server-side dry-run of the apply,
// forced, as FieldManager), which fields change manager, by manager in name
// order. A field another manager owns and the release sets to the same
// value stays shared, and is no takeover; a field whose value the release
// changes is taken from its manager by the forced apply. The managers of
// takenOver lose every field: takeOverPatch moves them to FieldManager
// before the apply, which then removes those the release does not set and
// no third manager owns (install records and pending inventories excepted,
// as takeOverPatch leaves them out).
func takeovers(live, merged *unstructured.Unstructured) ([]preview.Takeover, error) {
	out, _, err := takeoverFields(live, merged)
	return out, err
}

// takeoverFields is takeovers, returning also every field applying
// removes.
func takeoverFields(live, merged *unstructured.Unstructured) ([]preview.Takeover, *fieldpath.Set, error) {
	all := fieldpath.NewSet()
	if live == nil {
		return nil, all, nil
	}
	before, err := fieldsByManager(live)
	if err != nil {
		return nil, nil, err
	}
	after, err := fieldsByManager(merged)
	if err != nil {
		return nil, nil, err
	}
	ours := after[FieldManager]
	if ours == nil {
		ours = fieldpath.NewSet()
	}
	records, _ := recordPaths(live)
	var out []preview.Takeover
	for _, m := range slices.Sorted(maps.Keys(before)) {
		if m == FieldManager || m == install.RecordFieldManager {
			continue
		}
		had := before[m]
		var taken, removed *fieldpath.Set
		if takenOver.Has(m) {
			had = had.Difference(records)
			taken = had.Intersection(ours)
			others := fieldpath.NewSet()
			for n, s := range after {
				if n != m && n != FieldManager {
					others = others.Union(s)
				}
			}
			removed = had.Difference(ours).Difference(others)
		} else {
			taken = had.Intersection(ours)
			if kept := after[m]; kept != nil {
				taken = taken.Difference(kept)
			}
			removed = fieldpath.NewSet()
		}
		t := preview.Takeover{Manager: m, TakenOver: leafPaths(taken), Removed: leafPaths(removed)}
		if len(t.TakenOver)+len(t.Removed) > 0 {
			out = append(out, t)
		}
		all = all.Union(removed)
	}
	return out, all, nil
}

// removeFields deletes the fields of set from obj, as applying removes
// them: a field named in a map, an item of an associative list by its
// keys or its value, an item of an atomic list by its index; parents
// first, so that a removed list item takes its fields with it.
func removeFields(obj map[string]any, set *fieldpath.Set) {
	var paths []fieldpath.Path
	set.Iterate(func(p fieldpath.Path) { paths = append(paths, p.Copy()) })
	sort.SliceStable(paths, func(i, j int) bool { return len(paths[i]) < len(paths[j]) })
	for _, p := range paths {
		removePath(obj, p)
	}
}

// removePath removes one path from node, returning node as changed (a list
// that loses an item is a new slice); a path not found changes nothing.
func removePath(node any, p fieldpath.Path) any {
	if len(p) == 0 {
		return node
	}
	pe, rest := p[0], p[1:]
	switch n := node.(type) {
	case map[string]any:
		if pe.FieldName == nil {
			return node
		}
		child, ok := n[*pe.FieldName]
		switch {
		case !ok:
		case len(rest) == 0:
			delete(n, *pe.FieldName)
		default:
			n[*pe.FieldName] = removePath(child, rest)
		}
		return n
	case []any:
		for i, item := range n {
			if !matches(pe, i, item) {
				continue
			}
			if len(rest) == 0 {
				return append(n[:i:i], n[i+1:]...)
			}
			n[i] = removePath(item, rest)
			return n
		}
	}
	return node
}

// matches reports whether the item at index i of a list is the one pe
// selects.
func matches(pe fieldpath.PathElement, i int, item any) bool {
	switch {
	case pe.Index != nil:
		return *pe.Index == i
	case pe.Value != nil:
		return value.Equals(*pe.Value, value.NewValueInterface(item))
	case pe.Key != nil:
		m, ok := item.(map[string]any)
		if !ok {
			return false
		}
		for _, f := range *pe.Key {
			v, ok := m[f.Name]
			if !ok || !value.Equals(f.Value, value.NewValueInterface(v)) {
				return false
			}
		}
		return true
	}
	return false
}

// fieldsByManager returns the fields each manager owns on obj, outside
// subresources (applying never touches those), over all its entries.
func fieldsByManager(obj *unstructured.Unstructured) (map[string]*fieldpath.Set, error) {
	out := map[string]*fieldpath.Set{}
	for _, e := range obj.GetManagedFields() {
		if e.Subresource != "" || e.FieldsV1 == nil {
			continue
		}
		set := &fieldpath.Set{}
		if err := set.FromJSON(bytes.NewReader(e.FieldsV1.Raw)); err != nil {
			return nil, fmt.Errorf("reading fields of manager %s on %s: %w", e.Manager, keyOf(obj), err)
		}
		if cur, ok := out[e.Manager]; ok {
			set = cur.Union(set)
		}
		out[e.Manager] = set
	}
	return out, nil
}

// leafPaths returns the paths of set's fields as strings, sorted, leaving
// out a path whose fields below are listed too (a list item's own entry).
func leafPaths(set *fieldpath.Set) []string {
	var out []string
	set.Leaves().Iterate(func(p fieldpath.Path) {
		out = append(out, p.String())
	})
	sort.Strings(out)
	return out
}

// WithoutFieldsOf returns a copy of obj, a release's object, without the
// fields that managers own on live: applied with force, it reverts every
// other change and leaves theirs as they are (the fields they own are no
// longer this tool's, so leaving them out deletes nothing). Only leaf
// fields are left out, never a list item or a map as a whole.
func WithoutFieldsOf(obj, live *unstructured.Unstructured, managers sets.Set[string]) (*unstructured.Unstructured, error) {
	owned := &fieldpath.Set{}
	for _, e := range live.GetManagedFields() {
		if !managers.Has(e.Manager) || e.FieldsV1 == nil {
			continue
		}
		set := &fieldpath.Set{}
		if err := set.FromJSON(bytes.NewReader(e.FieldsV1.Raw)); err != nil {
			return nil, fmt.Errorf("reading the fields of manager %s: %w", e.Manager, err)
		}
		owned = owned.Union(set)
	}
	out := obj.DeepCopy()
	owned.Leaves().Iterate(func(p fieldpath.Path) {
		// The top is a map, changed in place.
		removePath(out.Object, p)
	})
	return out, nil
}
