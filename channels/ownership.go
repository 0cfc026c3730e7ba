package channels

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// AdoptAnnotation, set to "true" on an object of a manifest, lets the addon
// apply that object although another addon declares it: the object becomes
// the adopting addon's (its IdentityLabel says so), and the other addon may
// declare it too. Without it, an addon that declares an object another
// addon of the run declares, or one that carries the IdentityLabel of an
// addon that still declares it (or that is installed and not in the
// channels, so that what it declares is unknown), fails with both names and
// applies nothing. An object another addon stopped declaring moves without
// it.
const AdoptAnnotation = "channels.kos.example.com/adopt"

// adopts reports whether the manifest's object may be taken from another
// addon.
func adopts(u *unstructured.Unstructured) bool {
	return u.GetAnnotations()[AdoptAnnotation] == "true"
}

// declarations knows, for one run, which objects the addons of its plan
// declare: the addons being applied from their prepared releases, the
// up-to-date ones by reading their manifests when first asked. The union
// is what prune keeps, and what settles who may apply an object.
type declarations struct {
	client  *Client
	fetcher *Fetcher
	items   map[string]PlanItem
	// defined holds the kinds the CRDs of the run's releases define.
	defined map[schema.GroupKind]bool

	// mu guards everything below; lookups may run from prune's workers.
	mu      sync.Mutex
	byAddon map[string]*declared
	// installed holds every install record and pending release, read once
	// when first needed.
	installed     []Installed
	installedRead bool
	installedErr  error
}

// declared is what one addon's release declares.
type declared struct {
	// keys maps every object to its target; the target is nil for objects
	// of kinds the run's CRDs define (not mapped before those exist).
	keys  map[objectKey]*target
	adopt map[objectKey]bool
	// err says why the declarations are unknown; keys is then nil.
	err error
}

func newDeclarations(c *Client, f *Fetcher, plan *Plan, defined map[schema.GroupKind]bool) *declarations {
	d := &declarations{client: c, fetcher: f, items: map[string]PlanItem{}, defined: defined, byAddon: map[string]*declared{}}
	for _, it := range plan.Items {
		d.items[it.Addon.Name] = it
	}
	return d
}

// set records the release an addon of the run applies, or why it cannot.
func (d *declarations) set(addon string, rel *release, objs []*unstructured.Unstructured, err error) {
	dc := &declared{err: err}
	if err == nil {
		dc.keys = make(map[objectKey]*target, len(objs))
		dc.adopt = map[objectKey]bool{}
		for _, u := range objs {
			key := keyOf(u)
			dc.keys[key] = rel.ready[u]
			if adopts(u) {
				dc.adopt[key] = true
			}
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.byAddon[addon] = dc
}

// of returns what an addon of the plan declares. An addon of the plan that
// is up to date, or to apply and not set by the run (a preview), has its
// manifest read the first time; the declarations of any other addon (not in
// the channels, or whose installed release is not the one the channels
// offer) are unknown.
func (d *declarations) of(ctx context.Context, addon string) *declared {
	d.mu.Lock()
	defer d.mu.Unlock()
	if dc, ok := d.byAddon[addon]; ok {
		return dc
	}
	dc := &declared{}
	it, ok := d.items[addon]
	switch {
	case !ok:
		dc.err = errors.New("it is not in the channels")
	case !it.Decision.Apply && it.Decision.Reason != ReasonUpToDate:
		dc.err = fmt.Errorf("its installed release is not the one the channels offer (%s)", it.Decision.Reason)
	default:
		objs, err := releaseObjects(ctx, d.fetcher, it.Addon)
		var rel *release
		if err == nil {
			w := &addonWriter{client: d.client, parallelism: defaultParallelism, defined: d.defined}
			rel, err = w.prepare(ctx, objs)
		}
		if err != nil {
			dc.err = fmt.Errorf("reading its manifest: %w", err)
			break
		}
		dc.keys = make(map[objectKey]*target, len(objs))
		dc.adopt = map[objectKey]bool{}
		for _, u := range objs {
			dc.keys[keyOf(u)] = rel.ready[u]
			if adopts(u) {
				dc.adopt[keyOf(u)] = true
			}
		}
	}
	d.byAddon[addon] = dc
	return dc
}

// others returns the addons of the plan other than self that declare key,
// each with its target (nil when not mapped), and the up-to-date addons
// whose manifests could not be read, each with why.
func (d *declarations) others(ctx context.Context, key objectKey, self string) (by map[string]*target, unknown []string) {
	names := make([]string, 0, len(d.items))
	for name := range d.items {
		if name != self {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	by = map[string]*target{}
	for _, name := range names {
		it := d.items[name]
		if !it.Decision.Apply && it.Decision.Reason != ReasonUpToDate {
			// Refused (a downgrade, a newer tool's record): what it
			// declares is not known, and its objects carry its label.
			continue
		}
		dc := d.of(ctx, name)
		switch {
		case dc.err != nil && it.Decision.Apply:
			// Failed before its release was read: its objects carry its
			// label.
			continue
		case dc.err != nil:
			unknown = append(unknown, fmt.Sprintf("%s (%v)", name, dc.err))
			continue
		}
		if t, ok := dc.keys[key]; ok {
			by[name] = t
		}
	}
	return by, unknown
}

// readInstalled returns every install record and pending release on the
// cluster, read once per run.
func (d *declarations) readInstalled(ctx context.Context) ([]Installed, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.installedRead {
		d.installed, d.installedErr = d.client.Installed(ctx)
		d.installedRead = true
	}
	return d.installed, d.installedErr
}

// recorded reports whether an addon has an install record or a pending
// release on the cluster.
func (d *declarations) recorded(ctx context.Context, addon string) (bool, error) {
	installed, err := d.readInstalled(ctx)
	if err != nil {
		return false, err
	}
	for _, in := range installed {
		if in.Name == addon {
			return true, nil
		}
	}
	return false, nil
}

// checkDuplicates refuses, for the addons of a run, every object two of
// them declare that an addon declares without AdoptAnnotation: the error
// of each such addon names the other. Namespaces are left out: every addon
// declares the namespaces it uses, as kOps's channels applies them.
func checkDuplicates(ros []*rollout) map[string]error {
	claims := map[objectKey][]*rollout{}
	for _, ro := range ros {
		for _, u := range ro.objs {
			if key := keyOf(u); !isNamespace(key) {
				claims[key] = append(claims[key], ro)
			}
		}
	}
	errs := map[string][]error{}
	for key, by := range claims {
		if len(by) < 2 {
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
			errs[ro.item.Addon.Name] = append(errs[ro.item.Addon.Name], fmt.Errorf("%s is declared by addon %q and by addon %s: set annotation %s: \"true\" on it in the manifest of each addon that is to share it, or drop it from all but one",
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

// checkOwnership refuses the objects of a release that exist carrying the
// IdentityLabel of another addon that still declares them, unless the
// manifest adopts them (AdoptAnnotation). An owner's declarations are those
// of the run (decl); an owner outside the channels is taken to declare its
// objects while it has an install record or a pending release, and an
// object of an addon that has neither is a leftover, free to take. It lists
// the objects of every kind and namespace the release applies to with one
// list each, selecting objects labelled as another addon's; Namespaces,
// which every addon declares, are left out, and so are the kinds the run's
// CRDs define (none of their objects can be found before those apply).
func (w *addonWriter) checkOwnership(ctx context.Context, ro *rollout, r *reporter) error {
	a := ro.item.Addon
	type where struct {
		gvr       schema.GroupVersionResource
		gk        schema.GroupKind
		namespace string
	}
	lists := map[where]bool{}
	for _, t := range ro.rel.ready {
		if !isNamespace(t.key) {
			lists[where{gvr: t.mapping.Resource, gk: t.key.GroupKind, namespace: t.key.Namespace}] = true
		}
	}
	selector := IdentityLabel + "," + IdentityLabel + "!=" + a.Name
	var errs []error
	for wh := range lists {
		opts := metav1.ListOptions{LabelSelector: selector, Limit: listLimit}
		for {
			list, err := resourceFor(w.client.Dynamic, wh.gvr, wh.namespace).List(ctx, opts)
			if err != nil {
				if meta.IsNoMatchError(err) {
					break
				}
				return fmt.Errorf("listing %s to check who owns it: %w", wh.gk, err)
			}
			for i := range list.Items {
				u := &list.Items[i]
				key := objectKey{GroupKind: wh.gk, Namespace: u.GetNamespace(), Name: u.GetName()}
				if _, ok := ro.rel.done.keep[key]; !ok || u.GetDeletionTimestamp() != nil {
					continue
				}
				owner := u.GetLabels()[IdentityLabel]
				if ro.adopt[key] {
					r.report(EventNote, a.Name, "Adopting %s from addon %q", key, owner)
					continue
				}
				why, err := w.owns(ctx, owner, key)
				if err != nil {
					return err
				}
				if why != "" {
					errs = append(errs, fmt.Errorf("%s belongs to addon %q, which %s; addon %q declares it too: set annotation %s: \"true\" on it in this addon's manifest to take it over",
						key, owner, why, a.Name, AdoptAnnotation))
				}
			}
			if list.GetContinue() == "" {
				break
			}
			opts.Continue = list.GetContinue()
		}
	}
	sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
	return errors.Join(errs...)
}

// owns says why owner still owns key ("declares it", "is installed and not
// in the channels", ...), or "" when it has let go of it.
func (w *addonWriter) owns(ctx context.Context, owner string, key objectKey) (string, error) {
	dc := w.decl.of(ctx, owner)
	if dc.err == nil {
		if _, ok := dc.keys[key]; ok {
			return "declares it", nil
		}
		return "", nil
	}
	recorded, err := w.decl.recorded(ctx, owner)
	if err != nil {
		return "", err
	}
	if recorded {
		return "is installed and may still declare it: " + dc.err.Error(), nil
	}
	return "", nil
}

// definitionUsers names the addons other than self whose install records
// or pending releases use a Namespace (they hold objects or install
// records in it) or a CRD (they hold objects of the kind it defines, kind):
// those are never deleted, by prune or by delete.
func definitionUsers(installed []Installed, self string, key objectKey, kind schema.GroupKind) []string {
	var out []string
	for _, in := range installed {
		if in.Name == self {
			continue
		}
		var invs []*Inventory
		if in.Record != nil && in.Record.Inventory != nil {
			invs = append(invs, in.Record.Inventory)
		}
		if in.Pending != nil {
			invs = append(invs, &in.Pending.Inventory)
		}
		uses := false
		switch {
		case isNamespace(key):
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
