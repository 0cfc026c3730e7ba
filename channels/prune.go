package channels

import (
	"context"
	"fmt"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kos-sdn/kos/channels/api"
	"github.com/kos-sdn/kos/channels/install"
)

// listLimit is the page size of prune's lists.
const listLimit = 500

// pruneQuery is one list that looks for objects to prune.
type pruneQuery struct {
	mapping       *meta.RESTMapping
	namespace     string // "" lists cluster-scoped kinds, or all namespaces
	labelSelector string
	fieldSelector string
	// named is set for the kinds of the release's prune spec, which may
	// delete PersistentVolumeClaims.
	named bool
}

// candidate is an object pruning deletes, unless skip says why not.
type candidate struct {
	key     ObjectKey
	uid     types.UID
	mapping *meta.RESTMapping
	skip    string
	// handover is the object as another addon of the run declares it,
	// applied instead of deleting it so that it carries that addon's
	// IdentityLabel; nil when there is none to apply.
	handover   *target
	handoverTo string
	// defines is the kind a CRD defines; empty for other objects.
	defines schema.GroupKind
	// mine is set when the object carries the addon's IdentityLabel: kept,
	// it stays the addon's, and its kind and namespace stay in the
	// addon's inventory.
	mine bool
	// live is the object as listed, for delete's ownership checks; nil
	// when not kept.
	live *unstructured.Unstructured
}

// prune deletes the objects of an addon that its new release does not have.
// It lists, by the addon's IdentityLabel, every kind the addon had (the
// record's inventory, and the pending inventory of a run that did not
// finish) or has now, in the namespaces it used, and the kinds of its prune
// spec as the spec narrows them; Namespaces and CRDs only when the prune
// spec names them. Listing by the label alone, not the selector, finds
// what a release applied under a selector the new release changed. Objects
// a controller owns are left to their owner.
//
// Within a run (w.decl set), an object another addon declares (of the
// channels, or recorded on the cluster, see declarations) is kept, and
// applied as that addon's (handed over); one an addon may declare whose
// declarations are unknown (its manifest did not load) is kept; a
// Namespace or CRD that another addon's install record or pending release
// uses is kept too. PersistentVolumeClaims and objects annotated
// KeepAnnotation are always kept (see protection), and so are a Namespace
// that holds such an object and a CRD of which such a custom resource
// exists, of any addon or none (see Client.holds). It returns the kinds
// and namespaces of the objects it kept that still carry the addon's
// label, which its record must go on listing.
//
// A record written before identity labels existed (by an older release of
// this tool, or by kOps) means the addon's objects may lack the label: then
// the lists select by the selector alone, as they used to, and objects are
// pruned unless they carry another addon's identity, or carry none while
// another addon of the channels has the same selector (whose objects they
// may be).
//
// A first install (no install record, no pending release) lists nothing
// (pruneQueries): every run writes its pending release before it applies
// an object (writeRolloutPending), so no run of this tool applied what
// carries the addon's label and no record names; such an object (its
// record deleted by hand, or left by an uninstall that kept it) is not
// proven the addon's to delete.
func (w *addonWriter) prune(ctx context.Context, it PlanItem, in *applied, r *reporter) (*install.Inventory, error) {
	a, current := it.Addon, it.Current
	if len(a.Selector) == 0 {
		if a.Prune != nil {
			return nil, fmt.Errorf("refusing to prune addon %q: its selector is empty", a.Name)
		}
		if current != nil && current.Inventory != nil && len(current.Inventory.Kinds) > 0 {
			r.report(EventNote, a.Name, "Not pruning: the addon has no selector")
		}
		return nil, nil
	}
	legacy := current != nil && (current.Inventory == nil || current.Inventory.Identity == "")
	queries, err := w.pruneQueries(ctx, it, legacy, in, r)
	if err != nil {
		return nil, err
	}
	found := make([][]candidate, len(queries))
	err = w.each(ctx, len(queries), func(ctx context.Context, i int) error {
		var err error
		found[i], err = w.list(ctx, queries[i], in, a.Name, w.shared)
		return err
	})
	if err != nil {
		return nil, err
	}

	// Delete in the reverse of apply order: webhooks before the servers they
	// call, workloads before their config, namespaces last.
	var byPhase [phaseCount][]candidate
	var handovers []candidate
	seen := map[types.UID]bool{}
	kept := &applied{kinds: map[schema.GroupKind]bool{}, namespaces: map[string]bool{}}
	for _, cs := range found {
		for _, c := range cs {
			if seen[c.uid] {
				continue
			}
			seen[c.uid] = true
			if c.skip != "" {
				r.report(EventNote, a.Name, "Not pruning %s: %s", c.key, c.skip)
				if c.mine {
					kept.kinds[c.key.GroupKind] = true
					if c.key.Namespace != "" {
						kept.namespaces[c.key.Namespace] = true
					}
				}
				continue
			}
			if c.handover != nil {
				handovers = append(handovers, c)
				continue
			}
			p := PhaseOf(c.key.GroupKind)
			byPhase[p] = append(byPhase[p], c)
		}
	}
	for _, c := range handovers {
		if _, err := w.applyOne(ctx, c.handover); err != nil {
			return nil, fmt.Errorf("handing %s over: %w", c.key, err)
		}
		r.report(EventNote, a.Name, "Not pruning %s: addon %s declares it, and now owns it", c.key, c.handoverTo)
	}
	for p := phaseCount - 1; p >= 0; p-- {
		cs := byPhase[p]
		sort.Slice(cs, func(i, j int) bool { return cs[i].key.String() < cs[j].key.String() })
		err := w.each(ctx, len(cs), func(ctx context.Context, i int) error {
			deleted, err := deleteObject(ctx, w.client.Dynamic, cs[i])
			if deleted {
				r.report(EventPruned, a.Name, "Pruned %s", cs[i].key)
			}
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	return kept.record(a.Name), nil
}

// pruneQueries works out the lists prune makes.
func (w *addonWriter) pruneQueries(ctx context.Context, it PlanItem, legacy bool, in *applied, r *reporter) ([]pruneQuery, error) {
	a, current := it.Addon, it.Current
	if current == nil && it.Pending == nil {
		// A first install: nothing of the addon's is recorded to prune
		// (see prune). The plan's preview asks here too, so it agrees.
		return nil, nil
	}
	// Objects this tool applied carry the addon's IdentityLabel, whatever
	// selector their release had; those of a legacy record may carry the
	// selector alone.
	set := labels.Set{IdentityLabel: a.Name}
	if legacy {
		set = labels.Set{}
		for k, v := range a.Selector {
			set[k] = v
		}
	}
	selector := labels.SelectorFromSet(set).String()

	// The kinds the addon had or has, in the namespaces it had or has.
	kinds := map[schema.GroupKind]bool{}
	namespaces := map[string]bool{}
	for gk := range in.kinds {
		kinds[gk] = true
	}
	for ns := range in.namespaces {
		namespaces[ns] = true
	}
	var had *install.Inventory
	if current != nil {
		had = current.Inventory
	}
	for _, inv := range []*install.Inventory{had, it.Pending.Scope()} {
		if inv == nil {
			continue
		}
		for _, k := range inv.Kinds {
			kinds[schema.ParseGroupKind(k)] = true
		}
		for _, ns := range inv.Namespaces {
			namespaces[ns] = true
		}
	}
	var extra []api.PruneKindSpec
	if a.Prune != nil {
		extra = a.Prune.Kinds
	}
	named := map[schema.GroupKind]bool{}
	for _, k := range extra {
		named[schema.GroupKind{Group: k.Group, Kind: k.Kind}] = true
	}

	var queries []pruneQuery
	for _, gk := range sortedKinds(kinds) {
		// A kind the prune spec names is listed as the spec says, below.
		if named[gk] || neverPruned[gk] {
			continue
		}
		m, ok, err := w.pruneMapping(ctx, a, gk, r)
		if err != nil || !ok {
			if err != nil {
				return nil, err
			}
			continue
		}
		if m.Scope.Name() != meta.RESTScopeNameNamespace {
			queries = append(queries, pruneQuery{mapping: m, labelSelector: selector})
			continue
		}
		for _, ns := range sortedStrings(namespaces) {
			queries = append(queries, pruneQuery{mapping: m, namespace: ns, labelSelector: selector})
		}
	}
	for _, k := range extra {
		gk := schema.GroupKind{Group: k.Group, Kind: k.Kind}
		sel := selector
		if k.LabelSelector != "" {
			if _, err := labels.Parse(k.LabelSelector); err != nil {
				return nil, fmt.Errorf("prune kind %s: labelSelector: %w", gk, err)
			}
			sel += "," + k.LabelSelector
		}
		m, ok, err := w.pruneMapping(ctx, a, gk, r)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		q := pruneQuery{mapping: m, labelSelector: sel, fieldSelector: k.FieldSelector, named: true}
		if m.Scope.Name() != meta.RESTScopeNameNamespace || len(k.Namespaces) == 0 {
			queries = append(queries, q)
			continue
		}
		for _, ns := range k.Namespaces {
			q.namespace = ns
			queries = append(queries, q)
		}
	}
	return queries, nil
}

// pruneMapping maps a kind to prune. A kind the server does not serve (any
// more) has nothing to prune: it is skipped with a note.
func (w *addonWriter) pruneMapping(ctx context.Context, a *Addon, gk schema.GroupKind, r *reporter) (*meta.RESTMapping, bool, error) {
	m, err := w.client.mapping(ctx, gk.WithVersion(""), false)
	if meta.IsNoMatchError(err) {
		r.report(EventNote, a.Name, "Not pruning %s: the server does not serve this kind", gk)
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("finding kind %s to prune: %w", gk, err)
	}
	return m, true, nil
}

// list returns the objects a query finds that the addon did not just apply,
// from a list of their metadata (all prune reads, but for what a CRD
// defines, which it reads from the CRD). Those that carry another addon's
// identity are left out; those that carry none while other addons (shared)
// have the same selector are returned with the reason to keep them.
func (w *addonWriter) list(ctx context.Context, q pruneQuery, in *applied, addon string, shared []string) ([]candidate, error) {
	gk := q.mapping.GroupVersionKind.GroupKind()
	var listed []*unstructured.Unstructured
	opts := metav1.ListOptions{LabelSelector: q.labelSelector, FieldSelector: q.fieldSelector}
	err := w.client.listMetadata(ctx, q.mapping, q.namespace, opts, func(u *unstructured.Unstructured) {
		listed = append(listed, u)
	})
	if err != nil {
		where := ""
		if q.namespace != "" {
			where = " in namespace " + q.namespace
		}
		return nil, fmt.Errorf("listing %s%s to prune: %w", gk, where, err)
	}
	var out []candidate
	for _, u := range listed {
		key := ObjectKey{GroupKind: gk, Namespace: u.GetNamespace(), Name: u.GetName()}
		if in.keep[key] || u.GetDeletionTimestamp() != nil || ownedByController(u) {
			continue
		}
		c := candidate{key: key, uid: u.GetUID(), mapping: q.mapping}
		identity, labeled := u.GetLabels()[IdentityLabel]
		c.mine = labeled
		switch {
		case labeled && identity != addon:
			continue
		case !labeled && len(shared) > 0:
			c.skip = fmt.Sprintf("it carries no %s label and addon %s has the same selector; delete it by hand if it is this addon's", IdentityLabel, strings.Join(shared, ", "))
		}
		if gk == crdKind {
			crd, err := w.client.Dynamic.Resource(q.mapping.Resource).Get(ctx, key.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				continue // deleted since it was listed
			}
			if err != nil {
				return nil, fmt.Errorf("reading %s to prune: %w", key, err)
			}
			c.defines = definedKindOf(crd)
		}
		if c.skip == "" {
			c.skip = protection(u, q.named)
		}
		if c.skip == "" {
			// A Namespace or CRD takes what it holds with it.
			if c.skip, err = w.client.holds(ctx, key, c.defines); err != nil {
				return nil, err
			}
		}
		if c.skip == "" && w.decl != nil {
			if err := w.keepForOthers(ctx, &c, addon, u); err != nil {
				return nil, err
			}
		}
		out = append(out, c)
	}
	return out, nil
}

// ownedByController reports whether a controller owns the object: such
// objects (the ReplicaSets of a Deployment, say) copy labels from their
// owner, and deleting them would only make it create them again.
func ownedByController(u *unstructured.Unstructured) bool {
	for _, ref := range u.GetOwnerReferences() {
		if ref.Controller != nil && *ref.Controller {
			return true
		}
	}
	return false
}

func sortedKinds(set map[schema.GroupKind]bool) []schema.GroupKind {
	out := make([]schema.GroupKind, 0, len(set))
	for gk := range set {
		out = append(out, gk)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// keepForOthers sets why a candidate (live as listed) is kept when other
// addons need it: another addon declares it (see declarations.others), and
// it is handed over to the first that does, or an addon's install record or
// pending release uses it as a Namespace or a CRD. An addon whose
// declarations cannot be read keeps every candidate it may hold: what it
// declares is unknown.
func (w *addonWriter) keepForOthers(ctx context.Context, c *candidate, addon string, live *unstructured.Unstructured) error {
	by, unknown, err := w.decl.others(ctx, c.key, addon, live)
	if err != nil {
		return err
	}
	if len(by) > 0 {
		names := make([]string, 0, len(by))
		for name := range by {
			names = append(names, name)
		}
		sort.Strings(names)
		if t := by[names[0]]; t != nil && !c.key.IsNamespace() && c.key.GroupKind != crdKind {
			c.handover, c.handoverTo = t, names[0]
			return nil
		}
		c.skip = "addon " + strings.Join(names, ", ") + " declares it"
		return nil
	}
	if len(unknown) > 0 {
		c.skip = "what addon " + strings.Join(unknown, ", ") + " declares is unknown"
		return nil
	}
	if !c.key.IsNamespace() && c.key.GroupKind != crdKind {
		return nil
	}
	installed, err := w.decl.readInstalled(ctx)
	if err != nil {
		return err
	}
	if users := definitionUsers(installed, addon, c.key, c.defines); len(users) > 0 {
		c.skip = "the install record of addon " + strings.Join(users, ", ") + " uses it"
	}
	return nil
}
