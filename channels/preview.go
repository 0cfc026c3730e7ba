package channels

import (
	"context"
	"maps"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kos-sdn/kos/channels/dryrun"
	"github.com/kos-sdn/kos/channels/preview"
)

// Previews are package preview's: what a preview shows, and the diff of
// each object. Preview fills them in with package dryrun, on releases the
// apply code prepares.
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
	w := &addonWriter{client: c, parallelism: opts.Parallelism}
	out, failures := dryrun.Run(ctx, c.rehearse(ctx, plan, opts), dryrun.Options{
		Dynamic:      c.Dynamic,
		Kube:         c.Kube,
		FieldManager: FieldManager,
		Each:         w.each,
		Phase:        func(gk schema.GroupKind) int { return int(PhaseOf(gk)) },
		Settle:       settle,
	})
	if len(failures) == 0 {
		return out, nil
	}
	failed := make([]AddonError, len(failures))
	for i, f := range failures {
		failed[i] = AddonError{Addon: f.Addon, Err: f.Err}
	}
	return out, &ApplyError{Failed: failed}
}

// rehearse prepares the releases of the plan's pending addons as Apply
// does, for a dry-run: fetched, verified and decoded; mapped and placed
// with the kinds every release's CRDs define; with the ownership checks,
// the duplicate check of the run and the prune lists Apply makes.
func (c *Client) rehearse(ctx context.Context, plan *Plan, opts PreviewOptions) dryrun.Plan {
	out := dryrun.Plan{Creates: map[string]string{}, Defines: map[schema.GroupKind]string{}}
	pending := plan.Pending()
	objs := make([][]*unstructured.Unstructured, len(pending))
	scopes := map[schema.GroupKind]bool{}
	unread := map[*Addon]error{}
	for i, it := range pending {
		var err error
		if objs[i], err = releaseObjects(ctx, opts.Fetcher, it.Addon); err != nil {
			unread[it.Addon] = err
			out.Failed = append(out.Failed, dryrun.Failure{Addon: it.Addon.Name, Err: err})
			continue
		}
		for _, u := range objs[i] {
			if _, ok := out.Creates[u.GetName()]; !ok && u.GroupVersionKind().GroupKind() == (schema.GroupKind{Kind: "Namespace"}) {
				out.Creates[u.GetName()] = it.Addon.Name
			}
			if gk := definedKindOf(u); !gk.Empty() && out.Defines[gk] == "" {
				out.Defines[gk] = it.Addon.Name
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
			out.Failed = append(out.Failed, dryrun.Failure{Addon: it.Addon.Name, Err: err})
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
		out.Releases = append(out.Releases, c.rehearsed(ro, dups[ro.item.Addon.Name]))
	}
	return out
}

// rehearsed is a prepared rollout as a dry-run reads it; dup is the
// duplicate check's refusal of the addon, if any.
func (c *Client) rehearsed(ro *rollout, dup error) dryrun.Release {
	a, w := ro.item.Addon, ro.writer
	rel := dryrun.Release{Addon: a.Name, Defines: definedKinds(ro.objs)}
	for _, u := range ro.objs {
		o := dryrun.Object{Key: dryrun.Key(keyOf(u))}
		if t := ro.rel.ready[u]; t != nil {
			o.Target = dryrunTarget(t)
		}
		rel.Objects = append(rel.Objects, o)
	}
	if a.NeedsPKI {
		rel.PKI = &dryrun.PKI{
			Namespace: PKINamespace, Secret: PKISecretName(a.Name), Issuer: a.Name,
			IssuerKind: issuerKind.GroupKind(),
			IssuerResource: func(ctx context.Context) (schema.GroupVersionResource, error) {
				m, err := c.issuerMapping(ctx, a.Name, false)
				if err != nil {
					return schema.GroupVersionResource{}, err
				}
				return m.Resource, nil
			},
		}
	}
	rel.Ownership = func(ctx context.Context) (map[dryrun.Key]string, []error, error) {
		adopted, _, refused, err := w.ownership(ctx, ro, nil)
		if err != nil {
			return nil, nil, err
		}
		if dup != nil {
			refused = append(refused, dup)
		}
		out := make(map[dryrun.Key]string, len(adopted))
		for k, from := range adopted {
			out[dryrun.Key(k)] = from
		}
		return out, refused, nil
	}
	if len(a.Selector) > 0 {
		rel.Prune = func(ctx context.Context) ([]dryrun.Prunable, error) {
			return w.prunable(ctx, ro.item, ro.rel.done)
		}
	}
	return rel
}

// prunable lists, for a dry-run, what prune would find of the addon of it,
// whose release applies in: the same lists, each object as it would be
// kept, handed over or deleted.
func (w *addonWriter) prunable(ctx context.Context, it PlanItem, in *applied) ([]dryrun.Prunable, error) {
	legacy := it.Current != nil && (it.Current.Inventory == nil || it.Current.Inventory.Identity == "")
	queries, err := w.pruneQueries(ctx, it, legacy, in, nil)
	if err != nil {
		return nil, err
	}
	found := make([][]candidate, len(queries))
	err = w.each(ctx, len(queries), func(ctx context.Context, i int) error {
		var err error
		found[i], err = w.list(ctx, queries[i], in, it.Addon.Name, w.shared)
		return err
	})
	if err != nil {
		return nil, err
	}
	var out []dryrun.Prunable
	for _, cs := range found {
		for _, cand := range cs {
			p := dryrun.Prunable{Key: dryrun.Key(cand.key), Keep: cand.skip, HandOverTo: cand.handoverTo}
			if cand.mapping != nil {
				p.Resource = cand.mapping.Resource
			}
			if cand.handover != nil {
				p.HandOver = dryrunTarget(cand.handover)
			}
			out = append(out, p)
		}
	}
	return out, nil
}

func dryrunTarget(t *target) *dryrun.Target {
	return &dryrun.Target{Key: dryrun.Key(t.key), Resource: t.mapping.Resource, Object: t.obj}
}

// settle is dryrun.Options.Settle: the takeovers of a dry-run's answer
// merged, from which it removes the fields applying removes.
func settle(live, merged *unstructured.Unstructured) ([]preview.Takeover, error) {
	takeovers, removed, err := takeoverFields(live, merged)
	if err != nil {
		return nil, err
	}
	removeFields(merged.Object, removed)
	return takeovers, nil
}
