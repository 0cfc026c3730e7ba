package channels

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sort"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/kos-sdn/kos/channels/preview"
)

// Previews are package preview's: what a preview shows, and the diff of
// each object. Preview fills them in with the apply code's dry-run.
type (
	// AddonPreview is what applying one addon's release would do
	// (preview.Addon).
	AddonPreview = preview.Addon
	// ObjectChange is what applying a release does to one object
	// (preview.ObjectChange).
	ObjectChange = preview.ObjectChange
)

// PreviewOptions tune Preview. The zero value is ready to use.
type PreviewOptions struct {
	// Fetcher reads manifests; nil means NewFetcher().
	Fetcher *Fetcher
	// Parallelism bounds the requests in flight; 0 means 16.
	Parallelism int
	// Adopt previews ApplyOptions.Adopt: objects neither channels nor
	// kOps made are adopted instead of refused.
	Adopt bool
}

// Preview works out, without changing anything, what Apply would do to the
// objects of the plan's pending addons: it fetches and verifies each
// manifest, decodes it, maps every kind (a kind the server does not serve
// and the manifest does not define is an error, as it is for Apply),
// dry-runs each object with server-side apply (dryRun=All, the same field
// manager and force), compares the answer with the live object, and lists
// what pruning would delete. Objects of kinds the release itself creates,
// or in namespaces that it or another pending addon of the plan creates
// (Apply applies every pending addon before it waits for any), cannot be
// dry-run before those exist; they show as created, with a note.
//
// It returns one AddonPreview per pending addon, in plan order. Addons that
// fail are reported together in an *ApplyError, with the errors Apply would
// meet first.
func (c *Client) Preview(ctx context.Context, plan *Plan, opts PreviewOptions) ([]AddonPreview, error) {
	if opts.Fetcher == nil {
		opts.Fetcher = NewFetcher()
	}
	if opts.Parallelism <= 0 {
		opts.Parallelism = defaultParallelism
	}
	var out []AddonPreview
	var failed []AddonError
	pending := plan.Pending()
	objs := make([][]*unstructured.Unstructured, len(pending))
	// The namespaces the pending addons create, and the kinds their CRDs
	// define, by the first addon that does.
	creates := map[string]string{}
	defines := map[schema.GroupKind]string{}
	scopes := map[schema.GroupKind]bool{}
	unread := map[*Addon]error{}
	for i, it := range pending {
		var err error
		if objs[i], err = releaseObjects(ctx, opts.Fetcher, it.Addon); err != nil {
			unread[it.Addon] = err
			failed = append(failed, AddonError{Addon: it.Addon.Name, Err: err})
			continue
		}
		for _, u := range objs[i] {
			if _, ok := creates[u.GetName()]; !ok && u.GroupVersionKind().GroupKind() == (schema.GroupKind{Kind: "Namespace"}) {
				creates[u.GetName()] = it.Addon.Name
			}
			if gk := definedKindOf(u); !gk.Empty() && defines[gk] == "" {
				defines[gk] = it.Addon.Name
			}
		}
		maps.Copy(scopes, definedKinds(objs[i]))
	}
	// Who owns what, and what prune keeps, as Apply works them out.
	decl := newDeclarations(c, opts.Fetcher, plan, scopes)
	for a, err := range unread {
		decl.set(a, nil, nil, err)
	}
	var ros []*rollout
	for i, it := range pending {
		if objs[i] == nil {
			continue
		}
		w := &addonWriter{client: c, parallelism: opts.Parallelism, shared: plan.SharingSelector(it.Addon), defined: scopes, decl: decl, adoptForeign: opts.Adopt}
		rel, err := w.prepare(ctx, objs[i])
		decl.set(it.Addon, rel, objs[i], err)
		if err != nil {
			failed = append(failed, AddonError{Addon: it.Addon.Name, Err: err})
			continue
		}
		ro := &rollout{item: it, writer: w, objs: objs[i], rel: rel, done: rel.done, adopt: map[ObjectKey]bool{}}
		for _, u := range ro.objs {
			if adopts(u) {
				ro.adopt[keyOf(u)] = true
			}
		}
		ros = append(ros, ro)
	}
	dups := checkDuplicates(ros)
	for _, ro := range ros {
		name := ro.item.Addon.Name
		adopted, _, refused, err := ro.writer.ownership(ctx, ro, nil)
		if err != nil {
			failed = append(failed, AddonError{Addon: name, Err: err})
			continue
		}
		if err := dups[name]; err != nil {
			refused = append(refused, err)
		}
		changes, err := c.previewAddon(ctx, ro, creates, defines, adopted, opts)
		if err != nil {
			failed = append(failed, AddonError{Addon: name, Err: err})
			continue
		}
		out = append(out, AddonPreview{Addon: name, Objects: changes})
		// As Apply would refuse it; its rows still show what it meant
		// to do.
		if len(refused) > 0 {
			sort.Slice(refused, func(i, j int) bool { return refused[i].Error() < refused[j].Error() })
			failed = append(failed, AddonError{Addon: name, Err: errors.Join(refused...)})
		}
	}
	if len(failed) > 0 {
		return out, &ApplyError{Failed: failed}
	}
	return out, nil
}

// previewAddon previews the objects of a pending addon's prepared release;
// creates names the namespaces the plan's pending addons create, and
// defines the kinds their CRDs define, by addon; adopted holds the
// objects it takes over, each with whom from.
func (c *Client) previewAddon(ctx context.Context, ro *rollout, creates map[string]string, defines map[schema.GroupKind]string, adopted map[ObjectKey]string, opts PreviewOptions) ([]ObjectChange, error) {
	it, a, w, rel, objs := ro.item, ro.item.Addon, ro.writer, ro.rel, ro.objs
	own := definedKinds(objs)
	var err error
	var pki []ObjectChange
	if a.NeedsPKI {
		if pki, err = c.previewPKI(ctx, a, defines[issuerKind.GroupKind()]); err != nil {
			return nil, err
		}
	}
	missing := &namespaceCache{client: c, exists: map[string]bool{}}

	changes := make([]ObjectChange, len(objs))
	err = w.each(ctx, len(objs), func(ctx context.Context, i int) error {
		u := objs[i]
		key := keyOf(u)
		ch := ObjectChange{Kind: key.GroupKind, Namespace: key.Namespace, Name: key.Name}
		t := rel.ready[u]
		switch {
		case t == nil:
			ch.Action, ch.Note = preview.ActionCreate, "its kind is defined by this release"
			if _, ok := own[key.GroupKind]; !ok && defines[key.GroupKind] != "" {
				ch.Note = "its kind is defined by addon " + defines[key.GroupKind]
			}
		case key.Namespace != "" && creates[key.Namespace] != "":
			exists, err := missing.has(ctx, key.Namespace)
			if err != nil {
				return err
			}
			if !exists {
				ch.Action, ch.Note = preview.ActionCreate, "its namespace is created by this release"
				if by := creates[key.Namespace]; by != a.Name {
					ch.Note = "its namespace is created by addon " + by
				}
				break
			}
			fallthrough
		default:
			if err := w.dryRun(ctx, t, &ch); err != nil {
				return err
			}
			if from := adopted[key]; from != "" && ch.Action != preview.ActionCreate {
				ch.Action, ch.Note = preview.ActionAdopt, from
			}
		}
		changes[i] = ch
		return nil
	})
	if err != nil {
		return nil, err
	}

	if len(a.Selector) > 0 {
		legacy := it.Current != nil && (it.Current.Inventory == nil || it.Current.Inventory.Identity == "")
		queries, err := w.pruneQueries(ctx, it, legacy, rel.done, nil)
		if err != nil {
			return nil, err
		}
		found := make([][]candidate, len(queries))
		err = w.each(ctx, len(queries), func(ctx context.Context, i int) error {
			var err error
			found[i], err = w.list(ctx, queries[i], rel.done, a.Name, w.shared)
			return err
		})
		if err != nil {
			return nil, err
		}
		seen := map[ObjectKey]bool{}
		for _, cs := range found {
			for _, cand := range cs {
				if seen[cand.key] {
					continue
				}
				seen[cand.key] = true
				ch := ObjectChange{Action: preview.ActionPrune, Kind: cand.key.GroupKind, Namespace: cand.key.Namespace, Name: cand.key.Name}
				switch {
				case cand.skip != "":
					ch.Action, ch.Note = preview.ActionKeep, cand.skip
					changes = append(changes, ch)
					continue
				case cand.handover != nil:
					// As the receiver will have it: --diff shows the
					// change of label and of anything it declares
					// differently.
					if err := w.dryRun(ctx, cand.handover, &ch); err != nil {
						return nil, err
					}
					ch.Action, ch.Note = preview.ActionHandOver, "to addon "+cand.handoverTo
					changes = append(changes, ch)
					continue
				}
				live, err := resourceFor(c.Dynamic, cand.mapping.Resource, cand.key.Namespace).Get(ctx, cand.key.Name, metav1.GetOptions{})
				if err != nil && !apierrors.IsNotFound(err) {
					return nil, fmt.Errorf("reading %s: %w", cand.key, err)
				}
				if err == nil {
					ch.Live = preview.Comparable(live)
				}
				changes = append(changes, ch)
			}
		}
	}
	changes = append(pki, changes...)
	// In the order Apply goes: phase by phase, then pruning.
	order := func(ch ObjectChange) int {
		switch ch.Action {
		case preview.ActionPrune, preview.ActionKeep, preview.ActionHandOver:
			return int(phaseCount)
		}
		return int(PhaseOf(ch.Kind))
	}
	sort.SliceStable(changes, func(i, j int) bool { return order(changes[i]) < order(changes[j]) })
	return changes, nil
}

// dryRun reads the live object and dry-runs the apply of t, and sets the
// change's action from the difference.
func (w *addonWriter) dryRun(ctx context.Context, t *target, ch *ObjectChange) error {
	ri := resourceFor(w.client.Dynamic, t.mapping.Resource, t.key.Namespace)
	live, err := ri.Get(ctx, t.key.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		live = nil
	case err != nil:
		return fmt.Errorf("reading %s: %w", t.key, err)
	}
	merged, err := ri.Apply(ctx, t.key.Name, t.obj, metav1.ApplyOptions{FieldManager: FieldManager, Force: true, DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		return fmt.Errorf("applying %s (dry run): %w", t.key, err)
	}
	var removed *fieldpath.Set
	if ch.Takeovers, removed, err = takeoverFields(live, merged); err != nil {
		return err
	}
	ch.Merged = preview.Comparable(merged)
	// The dry-run cannot take fields over first, as applying does: the
	// fields applying then removes are still in its answer.
	removeFields(ch.Merged.Object, removed)
	switch {
	case live == nil:
		ch.Action = preview.ActionCreate
	default:
		ch.Live = preview.Comparable(live)
		ch.Action = preview.ActionUpdate
		if preview.Equal(ch.Live, ch.Merged) {
			ch.Action = preview.ActionUnchanged
		}
	}
	return nil
}

// resourceFor is the dynamic client of a resource in a namespace ("" for
// cluster-scoped).
func resourceFor(dyn dynamic.Interface, gvr schema.GroupVersionResource, namespace string) dynamic.ResourceInterface {
	if namespace == "" {
		return dyn.Resource(gvr)
	}
	return dyn.Resource(gvr).Namespace(namespace)
}

// namespaceCache remembers which namespaces exist.
type namespaceCache struct {
	client *Client
	mu     sync.Mutex
	exists map[string]bool
}

func (nc *namespaceCache) has(ctx context.Context, name string) (bool, error) {
	nc.mu.Lock()
	defer nc.mu.Unlock()
	if e, ok := nc.exists[name]; ok {
		return e, nil
	}
	_, err := nc.client.Kube.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		nc.exists[name] = false
	case err != nil:
		return false, fmt.Errorf("reading namespace %s: %w", name, err)
	default:
		nc.exists[name] = true
	}
	return nc.exists[name], nil
}

// previewPKI lists the PKI objects installPKI would create for an addon, and
// fails as it would when cert-manager's Issuer is not served and no addon
// of the plan (definer) defines it.
func (c *Client) previewPKI(ctx context.Context, a *Addon, definer string) ([]ObjectChange, error) {
	changes := []ObjectChange{
		{Kind: schema.GroupKind{Kind: "Secret"}, Namespace: PKINamespace, Name: PKISecretName(a.Name)},
		{Kind: issuerKind.GroupKind(), Namespace: PKINamespace, Name: a.Name},
	}
	mapping, err := c.issuerMapping(ctx, a.Name, false)
	if err != nil && definer != "" {
		for i := range changes {
			changes[i].Action, changes[i].Note = preview.ActionCreate, "needsPKI; addon "+definer+" defines the Issuer kind"
		}
		return changes, nil
	}
	if err != nil {
		return nil, err
	}
	resources := []schema.GroupVersionResource{corev1.SchemeGroupVersion.WithResource("secrets"), mapping.Resource}
	for i := range changes {
		_, err := resourceFor(c.Dynamic, resources[i], PKINamespace).Get(ctx, changes[i].Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			changes[i].Action, changes[i].Note = preview.ActionCreate, "needsPKI"
		case err != nil:
			return nil, fmt.Errorf("reading %s: %w", changes[i], err)
		default:
			changes[i].Action = preview.ActionUnchanged
		}
	}
	return changes, nil
}
