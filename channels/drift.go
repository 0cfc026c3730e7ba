package channels

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sort"
	"strconv"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// DriftResult is what one drift check did.
type DriftResult struct {
	// Full is set when every object was re-applied, not only the ones
	// whose metadata changed.
	Full bool
	// Checked counts the objects checked.
	Checked int
	// Changed and Deleted count the objects found changed or deleted by
	// someone else, and re-applied.
	Changed, Deleted int
}

// driftState remembers, per installed addon, the objects its release
// applies and how each looked after the last apply: enough to find, with
// one metadata list per kind and namespace, the objects someone changed or
// deleted. It is only used from the daemon's goroutine.
type driftState struct {
	addons map[string]*addonDrift
}

// addonDrift is what the drift check knows of one addon.
type addonDrift struct {
	// release identifies the release the state is of.
	release string
	// targets are the release's objects, ready to apply again.
	targets []*target
	// seen holds each object's fingerprint after the last apply.
	seen map[objectKey]string
}

func newDriftState() *driftState { return &driftState{addons: map[string]*addonDrift{}} }

// forget drops what is known of an addon, so that the next check re-applies
// all its objects.
func (s *driftState) forget(addon string) { delete(s.addons, addon) }

// releaseOf identifies a release for the drift state.
func releaseOf(a *Addon) string {
	return a.Name + "\x00" + a.VersionString() + "\x00" + a.ID + "\x00" + a.ManifestHash + "\x00" + a.Manifest
}

// fingerprint is what of an object's metadata changes when someone edits
// it: its generation, labels and annotations when it has a generation (so
// that status updates do not count), else its resourceVersion; and its UID,
// which changes when it is deleted and made again.
func fingerprint(m metav1.Object) string {
	if m.GetGeneration() == 0 {
		return string(m.GetUID()) + "/rv" + m.GetResourceVersion()
	}
	h := fnv.New64a()
	for _, set := range []map[string]string{m.GetLabels(), m.GetAnnotations()} {
		keys := make([]string, 0, len(set))
		for k := range set {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			h.Write([]byte(k + "=" + set[k] + "\x00"))
		}
		h.Write([]byte{1})
	}
	return string(m.GetUID()) + "/g" + strconv.FormatInt(m.GetGeneration(), 10) + "/" + strconv.FormatUint(h.Sum64(), 16)
}

// checkDrift checks the objects of every addon the plan finds up to date,
// and re-applies those someone changed or deleted. An addon checked for the
// first time (or again after an apply), and every addon when full is set,
// has all its objects re-applied: server-side apply leaves an unchanged
// object untouched, and its answer gives the fingerprints to compare next
// time. Otherwise the check lists the addon's objects' metadata, one list
// per kind and namespace, by its IdentityLabel, and re-applies only the
// objects whose fingerprint changed or that are gone. Re-applies hold the
// channels Lease, and skip addons another run updated meanwhile.
func (d *Daemon) checkDrift(ctx context.Context, plan *Plan, full bool) (DriftResult, error) {
	res := DriftResult{Full: full}
	var current []PlanItem
	for _, it := range plan.Items {
		if !it.Decision.Apply && it.Decision.Reason == ReasonUpToDate {
			current = append(current, it)
		}
	}
	// Work out, without the lease, what to re-apply.
	type repair struct {
		item    PlanItem
		state   *addonDrift
		targets []*target
		// listed holds what the lists found; nil when every object is
		// re-applied.
		listed map[objectKey]listedObject
	}
	var repairs []repair
	var errs []error
	for _, it := range current {
		a := it.Addon
		st := d.drift.addons[a.Name]
		if full || st == nil || st.release != releaseOf(a) {
			targets, err := d.targetsOf(ctx, it)
			if err != nil {
				errs = append(errs, fmt.Errorf("addon %q: %w", a.Name, err))
				continue
			}
			st = &addonDrift{release: releaseOf(a), targets: targets, seen: map[objectKey]string{}}
			d.drift.addons[a.Name] = st
			res.Checked += len(targets)
			repairs = append(repairs, repair{item: it, state: st, targets: targets})
			continue
		}
		listed, err := d.listFingerprints(ctx, a.Name, st)
		if err != nil {
			errs = append(errs, fmt.Errorf("addon %q: %w", a.Name, err))
			continue
		}
		res.Checked += len(st.targets)
		var changed []*target
		for _, t := range st.targets {
			got, ok := listed[t.key]
			switch {
			case isNamespace(t.key):
				// Several addons may declare one Namespace, so it carries
				// the labels of whichever applied it last: only its
				// deletion is drift, or the addons would take it from
				// each other on every pass.
				if !ok {
					changed = append(changed, t)
				}
			case got.fingerprint != st.seen[t.key]:
				changed = append(changed, t)
			}
		}
		if len(changed) > 0 {
			repairs = append(repairs, repair{item: it, state: st, targets: changed, listed: listed})
		}
	}
	if len(repairs) == 0 {
		return res, errors.Join(errs...)
	}

	r := newReporter(d.opts.Apply.OnEvent)
	var mu sync.Mutex
	err := d.client.withLease(ctx, d.opts.Apply.Identity, r, func(ctx context.Context) error {
		items := make([]PlanItem, len(repairs))
		for i := range repairs {
			items[i] = repairs[i].item
		}
		// Another run may have updated an addon since the plan was made.
		if err := d.client.decide(ctx, items, DecideOptions{}); err != nil {
			return err
		}
		w := &addonWriter{client: d.client, parallelism: d.opts.Apply.Parallelism}
		if w.parallelism <= 0 {
			w.parallelism = defaultParallelism
		}
		for i, rp := range repairs {
			name := rp.item.Addon.Name
			if items[i].Decision.Apply || items[i].Decision.Reason != ReasonUpToDate {
				d.drift.forget(name)
				continue
			}
			err := w.each(ctx, len(rp.targets), func(ctx context.Context, j int) error {
				t := rp.targets[j]
				out, err := w.applyOne(ctx, t)
				if err != nil {
					return err
				}
				fp := fingerprint(out)
				mu.Lock()
				defer mu.Unlock()
				before, listed := rp.listed[t.key]
				switch {
				case rp.listed == nil:
				case !listed:
					res.Deleted++
					r.report(EventNote, name, "Repaired %s: it was deleted", t.key)
				case out.GetResourceVersion() != before.resourceVersion:
					// The apply changed it back. (A change the apply
					// leaves alone, such as a controller's annotation, is
					// no drift.)
					res.Changed++
					r.report(EventNote, name, "Repaired %s: it was changed", t.key)
				}
				rp.state.seen[t.key] = fp
				return nil
			})
			if err != nil {
				// Check it all again next time.
				d.drift.forget(name)
				errs = append(errs, fmt.Errorf("addon %q: repairing drift: %w", name, err))
			}
		}
		return nil
	})
	if err != nil {
		errs = append(errs, err)
	}
	return res, errors.Join(errs...)
}

// targetsOf reads, decodes, stamps and maps the objects of an installed
// release, as applyAddon does.
func (d *Daemon) targetsOf(ctx context.Context, it PlanItem) ([]*target, error) {
	a := it.Addon
	objs, err := releaseObjects(ctx, d.opts.Apply.Fetcher, a)
	if err != nil {
		return nil, err
	}
	w := &addonWriter{client: d.client, parallelism: defaultParallelism}
	rel, err := w.prepare(ctx, objs)
	if err != nil {
		return nil, err
	}
	targets := make([]*target, 0, len(objs))
	for _, u := range objs {
		t := rel.ready[u]
		if t == nil {
			return nil, fmt.Errorf("%s: the server does not serve its kind", keyOf(u))
		}
		targets = append(targets, t)
	}
	return targets, nil
}

// listedObject is what a metadata list found of an object.
type listedObject struct {
	fingerprint     string
	resourceVersion string
}

// listFingerprints lists the metadata of an addon's objects, one list per
// resource and namespace its objects are in.
func (d *Daemon) listFingerprints(ctx context.Context, addon string, st *addonDrift) (map[objectKey]listedObject, error) {
	type where struct {
		gvr       schema.GroupVersionResource
		gk        schema.GroupKind
		namespace string
	}
	set := map[where]bool{}
	out := map[objectKey]listedObject{}
	for _, t := range st.targets {
		if isNamespace(t.key) {
			// Found by name: another addon's apply may have taken it.
			m, err := d.meta.Resource(t.mapping.Resource).Get(ctx, t.key.Name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
			case err != nil:
				return nil, fmt.Errorf("reading %s to check for drift: %w", t.key, err)
			case m.DeletionTimestamp == nil:
				out[t.key] = listedObject{fingerprint: fingerprint(m), resourceVersion: m.ResourceVersion}
			}
			continue
		}
		set[where{gvr: t.mapping.Resource, gk: t.key.GroupKind, namespace: t.key.Namespace}] = true
	}
	selector := labels.SelectorFromSet(labels.Set{IdentityLabel: addon}).String()
	for wh := range set {
		opts := metav1.ListOptions{LabelSelector: selector, Limit: listLimit}
		for {
			var list *metav1.PartialObjectMetadataList
			var err error
			if wh.namespace == "" {
				list, err = d.meta.Resource(wh.gvr).List(ctx, opts)
			} else {
				list, err = d.meta.Resource(wh.gvr).Namespace(wh.namespace).List(ctx, opts)
			}
			if err != nil {
				return nil, fmt.Errorf("listing %s to check for drift: %w", wh.gk, err)
			}
			for i := range list.Items {
				m := &list.Items[i]
				if m.DeletionTimestamp != nil {
					continue
				}
				out[objectKey{GroupKind: wh.gk, Namespace: m.Namespace, Name: m.Name}] = listedObject{fingerprint: fingerprint(m), resourceVersion: m.ResourceVersion}
			}
			if list.Continue == "" {
				break
			}
			opts.Continue = list.Continue
		}
	}
	return out, nil
}

// isNamespace tells whether key names a Namespace, which several addons may
// declare (kOps's channels applies a channel's addons in no fixed order, so
// each addon declares the namespaces it uses).
func isNamespace(key objectKey) bool {
	return key.GroupKind == schema.GroupKind{Kind: "Namespace"}
}
