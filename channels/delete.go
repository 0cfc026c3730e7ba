package channels

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/kos-sdn/kos/channels/channel"
	"github.com/kos-sdn/kos/channels/install"
	"github.com/kos-sdn/kos/channels/lease"
)

// DeleteOptions tune PlanUninstall and Uninstall. The zero value deletes
// what the addon's record and identity label find, leaving Namespaces and
// CRDs in place.
type DeleteOptions struct {
	// Selector is the addon's selector. It narrows the lists further, and is
	// required for a record written before identity labels existed (by kOps
	// or an older channels), whose objects may carry only the selector.
	Selector map[string]string
	// Namespaces deletes the addon's Namespaces too, with everything in
	// them. The record namespace, Kubernetes' own namespaces and a
	// Namespace that holds an object delete keeps (KeepAnnotation, or a
	// PersistentVolumeClaim), whoever made it, are never deleted.
	Namespaces bool
	// CRDs deletes the addon's CustomResourceDefinitions too, with every
	// custom resource of them; never a CRD of which a custom resource that
	// delete keeps (KeepAnnotation) exists.
	CRDs bool
	// OnEvent, when set, is called for every step, one call at a time.
	OnEvent func(Event)
	// Identity names this run as the holder of the lease; empty means
	// lease.NewIdentity().
	Identity string
	// Parallelism bounds the deletes in flight; 0 means 16.
	Parallelism int
	// Along names the other addons (of the same record namespace) deleted
	// in the same run: their records do not keep a Namespace or CRD from
	// being deleted, and their releases do not keep objects, since they go
	// too.
	Along []string
	// Fetcher reads the releases other addons' install records name, to
	// tell whether they declare an object; nil means NewFetcher().
	Fetcher *Fetcher
}

// Uninstall is what deleting one addon does: the objects to delete, in
// order, and the ones found but kept, each with why.
type Uninstall struct {
	// Namespace holds the addon's install record; Name is the addon.
	Namespace, Name string
	// Record is the install record.
	Record *Record
	// Delete lists the objects to delete, in the order they will be.
	Delete []UninstallObject
	// Keep lists objects found that will not be deleted.
	Keep []UninstallObject

	candidates []candidate
	// handovers are objects another addon declares: applied as that
	// addon's instead of deleted.
	handovers []candidate
}

// UninstallObject is one object an uninstall found.
type UninstallObject struct {
	// Kind is the object's group and kind.
	Kind schema.GroupKind
	// Namespace is empty for a cluster-scoped object.
	Namespace, Name string
	// Reason says why the object is kept; empty for one to delete.
	Reason string
}

// String names the object as the output shows it: "Deployment.apps ns/name".
func (o UninstallObject) String() string {
	return ObjectKey{GroupKind: o.Kind, Namespace: o.Namespace, Name: o.Name}.String()
}

// protectedNamespaces are never deleted by an uninstall.
var protectedNamespaces = map[string]bool{
	"default": true, "kube-system": true, "kube-public": true, "kube-node-lease": true,
}

// PlanUninstall works out what deleting an addon does, reading only: its
// record names the kinds and namespaces to list (with a pending inventory
// an interrupted run left), and the lists select the addon's IdentityLabel
// and, when given, its selector. As when pruning, objects a controller
// owns, objects of another addon and (unless asked) Namespaces and CRDs are
// kept; a Namespace or CRD is kept even when asked while another addon's
// install record or pending release uses it (holds objects or records in
// the Namespace, or objects of the CRD's kind), and while it holds an
// object delete keeps, of any addon or none (see keptIn, keptOf): its
// reason names them and says what to do.
func (c *Client) PlanUninstall(ctx context.Context, namespace, name string, opts DeleteOptions) (*Uninstall, error) {
	rs, err := install.ReadRecords(ctx, c.Kube, []string{namespace})
	if err != nil {
		return nil, err
	}
	rec, inv, set, err := uninstallScope(rs, namespace, name, opts)
	if err != nil {
		return nil, err
	}
	found, err := c.listUninstall(ctx, name, inv, set)
	if err != nil {
		return nil, err
	}
	u := &Uninstall{Namespace: namespace, Name: name, Record: rec}
	if err := c.decideUninstall(ctx, u, found, opts); err != nil {
		return nil, err
	}
	// Delete in the reverse of apply order, as pruning does.
	sort.SliceStable(u.candidates, func(i, j int) bool {
		a, b := u.candidates[i].key, u.candidates[j].key
		if pa, pb := PhaseOf(a.GroupKind), PhaseOf(b.GroupKind); pa != pb {
			return pa > pb
		}
		return a.String() < b.String()
	})
	for _, cand := range u.candidates {
		u.Delete = append(u.Delete, UninstallObject{Kind: cand.key.GroupKind, Namespace: cand.key.Namespace, Name: cand.key.Name})
	}
	sort.Slice(u.Keep, func(i, j int) bool { return u.Keep[i].String() < u.Keep[j].String() })
	return u, nil
}

// uninstallScope returns an addon's install record, the inventory to list
// (the record's with a pending inventory an interrupted run left) and the
// labels the lists select: its IdentityLabel and, when given, its
// selector.
func uninstallScope(rs install.Records, namespace, name string, opts DeleteOptions) (*Record, *install.Inventory, labels.Set, error) {
	if _, ok := rs[namespace][AnnotationPrefix+name]; !ok {
		return nil, nil, nil, fmt.Errorf("addon %q has no install record in namespace %s", name, namespace)
	}
	rec := rs.Record(namespace, name)
	if rec == nil {
		return nil, nil, nil, fmt.Errorf("the install record of addon %q in namespace %s does not parse", name, namespace)
	}
	inv := rec.Inventory
	if p := rs.Pending(namespace, name).Scope(); p != nil {
		if inv == nil {
			inv = p
		} else {
			inv = inv.Union(p)
		}
	}
	set := labels.Set{}
	for k, v := range opts.Selector {
		set[k] = v
	}
	switch {
	case rec.Inventory != nil && rec.Inventory.Identity != "":
		sel, err := labels.ConvertSelectorToLabelsMap(rec.Inventory.Identity)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("install record of addon %q: identity %q: %w", name, rec.Inventory.Identity, err)
		}
		for k, v := range sel {
			set[k] = v
		}
	case len(opts.Selector) == 0:
		return nil, nil, nil, fmt.Errorf("the install record of addon %q names no identity label (kOps or an older channels wrote it): give the addon's selector", name)
	}
	if inv == nil || len(inv.Kinds) == 0 {
		return nil, nil, nil, fmt.Errorf("the install record of addon %q lists no kinds (kOps writes none): delete its objects by label %s with kubectl, then the record annotation %s%s on namespace %s",
			name, labels.SelectorFromSet(set), AnnotationPrefix, name, namespace)
	}
	return rec, inv, set, nil
}

// listUninstall lists the objects of addon name that set selects, of the
// kinds and namespaces of inv, one query per kind and namespace.
func (c *Client) listUninstall(ctx context.Context, name string, inv *install.Inventory, set labels.Set) ([][]candidate, error) {
	w := &addonWriter{client: c, parallelism: defaultParallelism}
	var queries []pruneQuery
	for _, k := range inv.Kinds {
		gk := schema.ParseGroupKind(k)
		m, err := c.mapping(ctx, gk.WithVersion(""), false)
		if meta.IsNoMatchError(err) {
			continue // the server serves no such kind any more: nothing left of it
		}
		if err != nil {
			return nil, fmt.Errorf("finding kind %s: %w", gk, err)
		}
		if m.Scope.Name() != meta.RESTScopeNameNamespace {
			queries = append(queries, pruneQuery{mapping: m, labelSelector: labels.SelectorFromSet(set).String()})
			continue
		}
		for _, ns := range inv.Namespaces {
			queries = append(queries, pruneQuery{mapping: m, namespace: ns, labelSelector: labels.SelectorFromSet(set).String()})
		}
	}
	found := make([][]candidate, len(queries))
	err := w.each(ctx, len(queries), func(ctx context.Context, i int) error {
		var err error
		found[i], err = listOwned(ctx, c.Dynamic, queries[i], name)
		return err
	})
	if err != nil {
		return nil, err
	}
	return found, nil
}

// decideUninstall sorts what the lists found into the objects u deletes and
// those it keeps, with why: what other recorded addons declare is kept and
// handed over to them, and a Namespace or CRD another addon's record uses
// is never deleted.
func (c *Client) decideUninstall(ctx context.Context, u *Uninstall, found [][]candidate, opts DeleteOptions) error {
	namespace, name := u.Namespace, u.Name
	fetcher := opts.Fetcher
	if fetcher == nil {
		fetcher = NewFetcher()
	}
	decl := newDeclarations(c, fetcher, nil, nil)
	decl.ignore = map[string]bool{name: true}
	for _, a := range opts.Along {
		decl.ignore[a] = true
	}
	var installed []Installed
	if opts.Namespaces || opts.CRDs {
		var err error
		if installed, err = c.Installed(ctx); err != nil {
			return err
		}
		installed = slices.DeleteFunc(installed, func(in Installed) bool {
			return in.Namespace == namespace && slices.Contains(opts.Along, in.Name)
		})
	}
	seen := map[types.UID]bool{}
	for _, cs := range found {
		for _, cand := range cs {
			if seen[cand.uid] {
				continue
			}
			seen[cand.uid] = true
			if cand.skip == "" {
				cand.skip = keepReason(cand.key, namespace, opts)
			}
			if users := definitionUsers(installed, name, cand.key, cand.defines); cand.skip == "" && len(users) > 0 {
				cand.skip = "the install record of addon " + strings.Join(users, ", ") + " uses it"
			}
			if cand.skip == "" {
				held, err := c.holds(ctx, cand.key, cand.defines)
				if err != nil {
					return err
				}
				cand.skip = held
			}
			if cand.skip == "" && !cand.key.IsNamespace() && cand.key.GroupKind != crdKind {
				if err := keepDeclared(ctx, decl, &cand, name); err != nil {
					return err
				}
				if cand.handover != nil {
					u.handovers = append(u.handovers, cand)
					u.Keep = append(u.Keep, UninstallObject{Kind: cand.key.GroupKind, Namespace: cand.key.Namespace, Name: cand.key.Name, Reason: "addon " + cand.handoverTo + " declares it, and will own it"})
					continue
				}
			}
			o := UninstallObject{Kind: cand.key.GroupKind, Namespace: cand.key.Namespace, Name: cand.key.Name, Reason: cand.skip}
			if cand.skip != "" {
				u.Keep = append(u.Keep, o)
				continue
			}
			u.candidates = append(u.candidates, cand)
		}
	}
	return nil
}

// keepDeclared keeps a candidate another recorded addon declares (handed
// over to the first, by name, whose release maps it) or may declare (its
// release cannot be read), setting why.
func keepDeclared(ctx context.Context, decl *declarations, c *candidate, addon string) error {
	by, unknown, err := decl.others(ctx, c.key, addon, c.live)
	if err != nil {
		return err
	}
	names := slices.Sorted(maps.Keys(by))
	switch {
	case len(names) > 0 && by[names[0]] != nil:
		c.handover, c.handoverTo = by[names[0]], names[0]
	case len(names) > 0:
		c.skip = "addon " + strings.Join(names, ", ") + " declares it"
	case len(unknown) > 0:
		c.skip = "what addon " + strings.Join(unknown, ", ") + " declares is unknown"
	}
	return nil
}

// keepReason says why an object the lists found is kept, or "".
func keepReason(key ObjectKey, recordNamespace string, opts DeleteOptions) string {
	switch key.GroupKind {
	case schema.GroupKind{Kind: "Namespace"}:
		switch {
		case key.Name == recordNamespace:
			return "it holds the install records"
		case protectedNamespaces[key.Name]:
			return "a namespace of Kubernetes itself"
		case !opts.Namespaces:
			return "a Namespace: deleted only when asked"
		}
	case crdKind:
		if !opts.CRDs {
			return "a CustomResourceDefinition: deleted only when asked"
		}
	}
	return ""
}

// listOwned lists the objects of a query, marking the ones that are not the
// addon's to delete: those a controller owns, being deleted, or carrying
// another addon's identity.
func listOwned(ctx context.Context, dyn dynamic.Interface, q pruneQuery, addon string) ([]candidate, error) {
	var ri dynamic.ResourceInterface = dyn.Resource(q.mapping.Resource)
	if q.namespace != "" {
		ri = dyn.Resource(q.mapping.Resource).Namespace(q.namespace)
	}
	gk := q.mapping.GroupVersionKind.GroupKind()
	var out []candidate
	opts := metav1.ListOptions{LabelSelector: q.labelSelector, Limit: listLimit}
	for {
		list, err := ri.List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w", gk, err)
		}
		for i := range list.Items {
			obj := &list.Items[i]
			if obj.GetDeletionTimestamp() != nil {
				continue
			}
			c := candidate{key: ObjectKey{GroupKind: gk, Namespace: obj.GetNamespace(), Name: obj.GetName()}, uid: obj.GetUID(), mapping: q.mapping, defines: definedKindOf(obj), live: obj}
			switch id, ok := obj.GetLabels()[IdentityLabel]; {
			case ownedByController(obj):
				c.skip = "a controller owns it"
			case ok && id != addon:
				c.skip = fmt.Sprintf("it belongs to addon %q", id)
			default:
				c.skip = protection(obj, false)
			}
			out = append(out, c)
		}
		if list.GetContinue() == "" {
			return out, nil
		}
		opts.Continue = list.GetContinue()
	}
}

// Uninstall deletes what PlanUninstall found, while holding the channels
// Lease, and then removes the addon's install record (and pending
// inventory). Each object is deleted only if it is still the one listed
// (same UID), in the background (the garbage collector deletes its
// dependents). When a delete fails the record stays, so the addon still
// shows as installed and a second run retries.
func (c *Client) Uninstall(ctx context.Context, u *Uninstall, opts DeleteOptions) error {
	if opts.Identity == "" {
		opts.Identity = lease.NewIdentity()
	}
	if opts.Parallelism <= 0 {
		opts.Parallelism = defaultParallelism
	}
	r := newReporter(opts.OnEvent)
	return c.withLease(ctx, opts.Identity, r, func(ctx context.Context) error {
		w := &addonWriter{client: c, parallelism: opts.Parallelism}
		for _, h := range u.handovers {
			if _, err := w.applyOne(ctx, h.handover); err != nil {
				return fmt.Errorf("handing %s over to addon %q: %w", h.key, h.handoverTo, err)
			}
			r.report(EventNote, u.Name, "Not deleting %s: addon %s declares it, and now owns it", h.key, h.handoverTo)
		}
		// Phase by phase, in the order PlanUninstall sorted them.
		var errs []error
		for start := 0; start < len(u.candidates); {
			end := start
			p := PhaseOf(u.candidates[start].key.GroupKind)
			for end < len(u.candidates) && PhaseOf(u.candidates[end].key.GroupKind) == p {
				end++
			}
			batch := u.candidates[start:end]
			err := w.each(ctx, len(batch), func(ctx context.Context, i int) error {
				deleted, err := deleteObject(ctx, c.Dynamic, batch[i])
				if deleted {
					r.report(EventPruned, u.Name, "Deleted %s", batch[i].key)
				}
				return err
			})
			if err != nil {
				errs = append(errs, err)
				break
			}
			start = end
		}
		if len(errs) > 0 {
			return errors.Join(errs...)
		}
		if err := c.patchAnnotations(ctx, u.Namespace, map[string]*string{AnnotationPrefix + u.Name: nil, install.InventoryAnnotationPrefix + u.Name: nil}); err != nil {
			return fmt.Errorf("removing the install record of addon %q from namespace %s: %w", u.Name, u.Namespace, err)
		}
		r.report(EventApplied, u.Name, "Deleted the install record of %s", channel.DescribeRelease(u.Record.Version, u.Record.ID))
		return nil
	})
}

// deleteObject deletes one object, for prune and for delete, only if it is
// still the one listed (same UID), letting the garbage collector delete its
// dependents in the background. It reports whether this call deleted it.
func deleteObject(ctx context.Context, dyn dynamic.Interface, c candidate) (bool, error) {
	var ri dynamic.ResourceInterface = dyn.Resource(c.mapping.Resource)
	if c.key.Namespace != "" {
		ri = dyn.Resource(c.mapping.Resource).Namespace(c.key.Namespace)
	}
	uid := c.uid
	policy := metav1.DeletePropagationBackground
	err := ri.Delete(ctx, c.key.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}, PropagationPolicy: &policy})
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		// Gone already, or replaced by another object of the same name.
		return false, nil
	default:
		return false, fmt.Errorf("deleting %s: %w", c.key, err)
	}
}
