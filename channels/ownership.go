package channels

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"

	"github.com/kos-sdn/kos/channels/install"
)

// AdoptAnnotation, set to "true" on an object of a manifest, lets the addon
// apply that object although another addon declares it differently: the
// object becomes the adopting addon's (its IdentityLabel says so), and the
// other addon may declare it too. Without it, an addon that declares an
// object another addon of the run declares differently, or that carries
// the IdentityLabel of an addon that still declares it differently (or
// whose declarations cannot be read), fails with both names and applies
// nothing; addons that declare an object alike share it (see
// sameDeclaration). An object another addon stopped declaring moves
// without it. Set on an object on the cluster (kubectl annotate), it lets
// an addon take over that object although neither channels nor kOps's
// channels made it (see madeByChannels).
const AdoptAnnotation = "channels.kos.example.com/adopt"

// adopts reports whether the manifest's object may be taken from another
// addon.
func adopts(u *unstructured.Unstructured) bool {
	return u.GetAnnotations()[AdoptAnnotation] == "true"
}

// kopsMade reports whether kOps's channels applied an object: it carries
// the labels kOps stamps on its addons' objects, or fields of its field
// manager.
func kopsMade(u *unstructured.Unstructured) bool {
	l := u.GetLabels()
	if _, ok := l[kopsAddonLabel]; ok || l[managedByLabel] == "kops" {
		return true
	}
	for _, e := range u.GetManagedFields() {
		if e.Manager == kopsFieldManager {
			return true
		}
	}
	return false
}

// The labels kOps gives its addons' objects, and the field manager its
// channels applies with.
const (
	kopsAddonLabel   = "addon.kops.k8s.io/name"
	managedByLabel   = "app.kubernetes.io/managed-by"
	kopsFieldManager = "kops"
)

// sameDeclaration reports whether two addons declare an object alike: equal
// but for the labels that name the addon (IdentityLabel, kOps's
// addon.kops.k8s.io/name, and the keys of either addon's selector, given as
// ignore) and AdoptAnnotation. kOps ships such objects in two addons (its
// scaleway-secret); they are one object with two declarers.
func sameDeclaration(a, b *unstructured.Unstructured, ignore map[string]bool) bool {
	return reflect.DeepEqual(declaredContent(a, ignore), declaredContent(b, ignore))
}

func declaredContent(u *unstructured.Unstructured, ignore map[string]bool) map[string]any {
	c := u.DeepCopy()
	l := c.GetLabels()
	for k := range l {
		if k == IdentityLabel || k == kopsAddonLabel || ignore[k] {
			delete(l, k)
		}
	}
	c.SetLabels(l)
	an := c.GetAnnotations()
	delete(an, AdoptAnnotation)
	c.SetAnnotations(an)
	return c.Object
}

// checkDuplicates refuses, for the addons of a run, every object two of
// them declare differently, unless an addon declares it with
// AdoptAnnotation: the error of each such addon names the others. An
// object they all declare alike (see sameDeclaration) is one object with
// several declarers, and needs no annotation. Namespaces are left out:
// every addon declares the namespaces it uses, as kOps's channels applies
// them.
func checkDuplicates(ros []*rollout) map[string]error {
	claims := map[ObjectKey][]*rollout{}
	objs := map[*rollout]map[ObjectKey]*unstructured.Unstructured{}
	for _, ro := range ros {
		objs[ro] = map[ObjectKey]*unstructured.Unstructured{}
		for _, u := range ro.objs {
			if key := keyOf(u); !key.IsNamespace() {
				claims[key] = append(claims[key], ro)
				objs[ro][key] = u
			}
		}
	}
	errs := map[string][]error{}
	for key, by := range claims {
		if len(by) < 2 {
			continue
		}
		ignore := map[string]bool{}
		for _, ro := range by {
			for k := range ro.item.Addon.Selector {
				ignore[k] = true
			}
		}
		alike := true
		for _, ro := range by[1:] {
			alike = alike && sameDeclaration(objs[by[0]][key], objs[ro][key], ignore)
		}
		if alike {
			continue
		}
		for _, ro := range by {
			if ro.adopt[key] {
				continue
			}
			var others []string
			for _, o := range by {
				if o != ro {
					others = append(others, fmt.Sprintf("%q", o.item.Addon.Name))
				}
			}
			errs[ro.item.Addon.Name] = append(errs[ro.item.Addon.Name], fmt.Errorf("%s is declared differently by addon %q and by addon %s: declare it alike in each, set annotation %s: \"true\" on it in the manifest of each addon that is to take it over, or drop it from all but one",
				key, ro.item.Addon.Name, strings.Join(others, ", "), AdoptAnnotation))
		}
	}
	out := map[string]error{}
	for name, es := range errs {
		sort.Slice(es, func(i, j int) bool { return es[i].Error() < es[j].Error() })
		out[name] = errors.Join(es...)
	}
	return out
}

// checkOwnership refuses the objects of a release that exist and are not
// free to take:
//
//   - an object carrying the IdentityLabel of another addon that still
//     declares it differently (an addon declaring it alike shares it), or
//     whose declarations cannot be read while it is installed, unless the
//     manifest adopts it (AdoptAnnotation). An owner's declarations are
//     those of the run or, for an addon outside it, those of the releases
//     its install record and pending release name (see declarations); an
//     object of an addon that has neither is a leftover, free to take;
//   - a foreign object, which neither channels nor kOps's channels made
//     (see madeByChannels), unless the manifest or the object itself
//     carries AdoptAnnotation or the run adopts foreign objects
//     (ApplyOptions.Adopt).
//
// It lists the metadata of the objects of every kind and namespace the
// release applies to, once each and all at once, by a selector that leaves
// out the objects labelled as this addon's; Namespaces, which every addon
// declares, are left out, and so are the
// kinds the run's CRDs define (none of their objects can be found before
// those apply) and objects to create only (an existing one is left as it
// is).
func (w *addonWriter) checkOwnership(ctx context.Context, ro *rollout, r *reporter) error {
	_, shared, errs, err := w.ownership(ctx, ro, r)
	if err != nil {
		return err
	}
	if ro.shared == nil {
		ro.shared = map[ObjectKey]map[string]bool{}
	}
	for key, by := range shared {
		for name := range by {
			if ro.shared[key] == nil {
				ro.shared[key] = map[string]bool{}
			}
			ro.shared[key][name] = true
		}
	}
	sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
	return errors.Join(errs...)
}

// ownership does checkOwnership's work, returning also the objects the
// release adopts, each with whom from (refused or not), the addons outside
// the run that declare an object too (alike, or adopted from them), and
// each refusal.
func (w *addonWriter) ownership(ctx context.Context, ro *rollout, r *reporter) (adopted map[ObjectKey]string, shared map[ObjectKey]map[string]bool, refused []error, err error) {
	a := ro.item.Addon
	type where struct {
		mapping   *meta.RESTMapping
		namespace string
	}
	seen := map[string]bool{}
	var lists []where
	for _, t := range ro.rel.ready {
		if t.key.IsNamespace() {
			continue
		}
		id := t.mapping.Resource.String() + "/" + t.key.Namespace
		if !seen[id] {
			seen[id] = true
			lists = append(lists, where{mapping: t.mapping, namespace: t.key.Namespace})
		}
	}
	sort.Slice(lists, func(i, j int) bool {
		if gi, gj := lists[i].mapping.Resource.String(), lists[j].mapping.Resource.String(); gi != gj {
			return gi < gj
		}
		return lists[i].namespace < lists[j].namespace
	})
	// One list per kind and namespace, of metadata alone, run at once:
	// every object that does not carry this addon's IdentityLabel (a
	// selector key!=value also selects the objects without the key).
	found := make([][]*unstructured.Unstructured, len(lists))
	err = w.each(ctx, len(lists), func(ctx context.Context, i int) error {
		wh := lists[i]
		opts := metav1.ListOptions{LabelSelector: IdentityLabel + "!=" + a.Name}
		err := w.client.listMetadata(ctx, wh.mapping, wh.namespace, opts, func(u *unstructured.Unstructured) {
			found[i] = append(found[i], u)
		})
		if err != nil && !meta.IsNoMatchError(err) {
			return fmt.Errorf("listing %s to check who owns it: %w", wh.mapping.GroupVersionKind.GroupKind(), err)
		}
		return nil
	})
	if err != nil {
		return nil, nil, nil, err
	}
	once := map[ObjectKey]bool{}
	for _, u := range ro.objs {
		if CreateOnly(u) {
			once[keyOf(u)] = true
		}
	}
	adopted = map[ObjectKey]string{}
	shared = map[ObjectKey]map[string]bool{}
	share := func(key ObjectKey, owner string) {
		if w.decl.fromRun(owner) {
			return // the run's own sharing is coDeclarers'
		}
		if shared[key] == nil {
			shared[key] = map[string]bool{}
		}
		shared[key][owner] = true
	}
	for i, wh := range lists {
		gk := wh.mapping.GroupVersionKind.GroupKind()
		for _, u := range found[i] {
			key := ObjectKey{GroupKind: gk, Namespace: u.GetNamespace(), Name: u.GetName()}
			if _, ok := ro.rel.done.keep[key]; !ok || u.GetDeletionTimestamp() != nil || once[key] {
				continue
			}
			owner, labeled := u.GetLabels()[IdentityLabel]
			if !labeled {
				if madeByChannels(u, a.Selector) {
					continue
				}
				adopted[key] = "neither channels nor kOps made it"
				switch {
				case ro.adopt[key], adopts(u):
					r.report(EventNote, a.Name, "Adopting %s, which neither channels nor kOps made: it is annotated %s", key, AdoptAnnotation)
				case w.adoptForeign:
					r.report(EventNote, a.Name, "Adopting %s, which neither channels nor kOps made (adopt asked)", key)
				default:
					refused = append(refused, fmt.Errorf("%s exists and neither channels nor kOps's channels made it (fields of %s): annotate it %s=true (kubectl annotate), or adopt with --adopt, to let addon %q take it over",
						key, foreignManagers(u), AdoptAnnotation, a.Name))
				}
				continue
			}
			why, declares, err := w.owns(ctx, owner, key, ro)
			if err != nil {
				return nil, nil, nil, err
			}
			if declares {
				share(key, owner)
			}
			if ro.adopt[key] {
				adopted[key] = fmt.Sprintf("from addon %s", owner)
				r.report(EventNote, a.Name, "Adopting %s from addon %q", key, owner)
				continue
			}
			if why != "" {
				refused = append(refused, fmt.Errorf("%s belongs to addon %q, which %s; addon %q declares it too: set annotation %s: \"true\" on it in this addon's manifest to take it over",
					key, owner, why, a.Name, AdoptAnnotation))
			}
		}
	}
	return adopted, shared, refused, nil
}

// madeByChannels reports whether an object without IdentityLabel was made
// by channels (an older release of this tool, which stamped the addon's
// selector alone, or one that applied it as FieldManager) or by kOps's
// channels (see kopsMade).
func madeByChannels(u *unstructured.Unstructured, selector map[string]string) bool {
	if kopsMade(u) {
		return true
	}
	for _, e := range u.GetManagedFields() {
		if e.Manager == FieldManager {
			return true
		}
	}
	if len(selector) == 0 {
		return false
	}
	l := u.GetLabels()
	for k, v := range selector {
		if got, ok := l[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// foreignManagers names the field managers of an object, for the message
// that refuses to adopt it.
func foreignManagers(u *unstructured.Unstructured) string {
	set := map[string]bool{}
	for _, e := range u.GetManagedFields() {
		set[e.Manager] = true
	}
	if len(set) == 0 {
		return "no manager"
	}
	return strings.Join(sortedStrings(set), ", ")
}

// owns says why owner still owns key ("declares it differently", "may
// still declare it (...)"), or "" when it has let go of it or declares it
// alike (the object then has both as declarers), and whether owner
// declares it.
func (w *addonWriter) owns(ctx context.Context, owner string, key ObjectKey, ro *rollout) (string, bool, error) {
	dc := w.decl.of(ctx, owner)
	if dc.err == nil {
		theirs, ok := dc.objs[key]
		if !ok {
			return "", false, nil
		}
		ignore := maps.Clone(dc.selector)
		for k := range ro.item.Addon.Selector {
			ignore[k] = true
		}
		for _, u := range ro.objs {
			if keyOf(u) == key && sameDeclaration(u, theirs, ignore) {
				return "", true, nil
			}
		}
		return "declares it differently", true, nil
	}
	recorded, err := w.decl.recorded(ctx, owner)
	if err != nil {
		return "", false, err
	}
	if recorded || w.decl.fromRun(owner) {
		return "may still declare it (what it declares is unknown: " + dc.err.Error() + ")", true, nil
	}
	return "", false, nil
}

// definitionUsers names the addons other than self whose install records
// or pending releases use a Namespace (they hold objects or install
// records in it) or a CRD (they hold objects of the kind it defines, kind):
// those are never deleted, by prune or by delete.
func definitionUsers(installed []Installed, self string, key ObjectKey, kind schema.GroupKind) []string {
	var out []string
	for _, in := range installed {
		if in.Name == self {
			continue
		}
		var invs []*install.Inventory
		if in.Record != nil && in.Record.Inventory != nil {
			invs = append(invs, in.Record.Inventory)
		}
		if in.Pending != nil {
			invs = append(invs, &in.Pending.Inventory)
		}
		uses := false
		switch {
		case key.IsNamespace():
			uses = in.Namespace == key.Name
			for _, inv := range invs {
				for _, ns := range inv.Namespaces {
					uses = uses || ns == key.Name
				}
			}
		case key.GroupKind == crdKind && !kind.Empty():
			for _, inv := range invs {
				for _, k := range inv.Kinds {
					uses = uses || schema.ParseGroupKind(k) == kind
				}
			}
		}
		if uses {
			out = append(out, in.Name)
		}
	}
	sort.Strings(out)
	return out
}

// definedKindOf returns the kind a CRD defines; empty for other objects.
func definedKindOf(u *unstructured.Unstructured) schema.GroupKind {
	if u.GroupVersionKind().GroupKind() != crdKind {
		return schema.GroupKind{}
	}
	group, _, _ := unstructured.NestedString(u.Object, "spec", "group")
	kind, _, _ := unstructured.NestedString(u.Object, "spec", "names", "kind")
	return schema.GroupKind{Group: group, Kind: kind}
}

// listMetadata lists the metadata of the objects of a mapping's kind in a
// namespace ("" for a cluster-scoped kind, or every namespace) that opts
// select, page by page, and calls fn for each, as an Unstructured holding
// its kind and metadata alone.
func (c *Client) listMetadata(ctx context.Context, mapping *meta.RESTMapping, namespace string, opts metav1.ListOptions, fn func(*unstructured.Unstructured)) error {
	var ri metadata.ResourceInterface = c.Metadata.Resource(mapping.Resource)
	if namespace != "" {
		ri = c.Metadata.Resource(mapping.Resource).Namespace(namespace)
	}
	opts.Limit = listLimit
	for {
		list, err := ri.List(ctx, opts)
		if err != nil {
			return err
		}
		for i := range list.Items {
			u, err := metadataObject(mapping.GroupVersionKind, &list.Items[i])
			if err != nil {
				return err
			}
			fn(u)
		}
		if list.Continue == "" {
			return nil
		}
		opts.Continue = list.Continue
	}
}

// metadataObject returns an object's metadata as an Unstructured of its
// kind, for the code that reads labels, annotations and managed fields of
// listed objects.
func metadataObject(gvk schema.GroupVersionKind, m *metav1.PartialObjectMetadata) (*unstructured.Unstructured, error) {
	md, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&m.ObjectMeta)
	if err != nil {
		return nil, fmt.Errorf("reading the metadata of %s %s: %w", gvk.Kind, m.Name, err)
	}
	u := &unstructured.Unstructured{Object: map[string]any{"metadata": md}}
	u.SetGroupVersionKind(gvk)
	return u, nil
}
