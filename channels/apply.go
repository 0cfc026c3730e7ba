package channels

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"k8s.io/klog/v2"

	"github.com/kos-sdn/kos/channels/lease"
)

// defaultParallelism bounds the requests in flight while applying one phase
// of an addon or pruning it.
const defaultParallelism = 16

// How long apply waits for a CustomResourceDefinition to be Established, and
// then for discovery to serve its kind.
const (
	crdTimeout       = time.Minute
	discoveryTimeout = 30 * time.Second
	pollInterval     = 200 * time.Millisecond
)

// DefaultObjectNamespace is where a namespaced object that names no namespace
// is applied, as kubectl would with a default context.
const DefaultObjectNamespace = "default"

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// DefaultTimeout is how long an addon's objects may take to become ready
// when ApplyOptions.Wait is set and Timeout is not.
const DefaultTimeout = 5 * time.Minute

// ApplyOptions tune Apply. The zero value is ready to use.
type ApplyOptions struct {
	// Fetcher reads manifests; nil means NewFetcher().
	Fetcher *Fetcher
	// OnEvent, when set, is called for every step, one call at a time.
	OnEvent func(Event)
	// Identity names this run as the holder of the lease; empty means
	// lease.NewIdentity().
	Identity string
	// Parallelism bounds the requests in flight within one phase; 0 means 16.
	Parallelism int
	// Wait makes each addon wait, after applying and before pruning and
	// recording, until its objects are ready as kstatus computes it
	// (workloads rolled out, Jobs complete) and its APIServices are
	// Available. An addon that is not ready within Timeout fails and keeps
	// its old record.
	Wait bool
	// Timeout bounds the wait of each addon; 0 means DefaultTimeout.
	Timeout time.Duration
	// Adopt lets addons take over the objects of their manifests that
	// exist and that neither channels nor kOps's channels made (a user's,
	// Helm's); without it such an object fails its addon unless it, or
	// its manifest, carries AdoptAnnotation.
	Adopt bool
}

func (o ApplyOptions) timeout() time.Duration {
	if o.Timeout > 0 {
		return o.Timeout
	}
	return DefaultTimeout
}

// ApplyError lists the addons a run failed to apply. The others were applied.
type ApplyError struct {
	Failed []AddonError
}

// AddonError is why one addon failed.
type AddonError struct {
	// Addon names the addon.
	Addon string
	// Err says what failed: the objects the server refused, a manifest
	// that did not verify, a prune or record write that failed.
	Err error
}

// Error names every failed addon and why, on one line.
func (e *ApplyError) Error() string {
	parts := make([]string, len(e.Failed))
	for i, f := range e.Failed {
		parts[i] = fmt.Sprintf("addon %q: %v", f.Addon, strings.ReplaceAll(f.Err.Error(), "\n", "; "))
	}
	noun := "addon"
	if len(e.Failed) > 1 {
		noun = "addons"
	}
	return fmt.Sprintf("%d %s failed: %s", len(e.Failed), noun, strings.Join(parts, "; "))
}

// Unwrap returns the errors of the failed addons.
func (e *ApplyError) Unwrap() []error {
	errs := make([]error, len(e.Failed))
	for i, f := range e.Failed {
		errs[i] = f.Err
	}
	return errs
}

// Apply applies the pending items of a plan, in order, while holding the
// channels Lease; it makes no request when nothing is pending. Once it holds
// the lease it reads the install records again and skips addons another run
// applied meanwhile.
//
// For each addon it fetches and verifies the manifest, stamps its selector
// and IdentityLabel on every object, refuses objects another addon owns
// (see AdoptAnnotation), writes the pending inventory (the kinds and
// namespaces it is about to apply) unless the record already covers them,
// and applies its objects with server-side apply in phases (see Phase),
// taking over fields kOps or kubectl's client-side apply own; each wave of
// phases is applied for every addon before the next, so that the Namespaces and CRDs
// of all come first (see applyRun). Once every addon is applied it waits,
// for all of them at once, until their objects are ready (when opts.Wait is
// set); then, addon by addon, it prunes what the release no longer has
// (keeping what any addon of the channels declares), marks nodes for a
// rolling update when the release asks, and writes the install record. An
// addon that fails anywhere keeps its old record, and nothing of it is
// pruned; the other addons go on. The returned error is an *ApplyError when
// addons failed.
func (c *Client) Apply(ctx context.Context, plan *Plan, opts ApplyOptions) error {
	pending := plan.Pending()
	if len(pending) == 0 {
		return nil
	}
	if opts.Fetcher == nil {
		opts.Fetcher = NewFetcher()
	}
	if opts.Identity == "" {
		opts.Identity = lease.NewIdentity()
	}
	if opts.Parallelism <= 0 {
		opts.Parallelism = defaultParallelism
	}
	r := newReporter(opts.OnEvent)
	return c.withLease(ctx, opts.Identity, r, func(ctx context.Context) error {
		items := append([]PlanItem(nil), pending...)
		if err := c.decide(ctx, items, plan.options); err != nil {
			return err
		}
		for i := range items {
			items[i].shared = plan.sharingSelector(items[i].Addon)
		}
		// Every addon is applied before any is waited for: the addons of a
		// channel often need each other to become ready (an agent needs
		// the API server of another addon, which needs the etcd of a
		// third), whatever order they are listed in.
		var failed []AddonError
		fail := func(addon string, err error) {
			r.report(EventFailed, addon, "Failed: %v", err)
			failed = append(failed, AddonError{Addon: addon, Err: err})
		}
		rollouts := c.applyRun(ctx, plan, items, opts, r, fail)
		if opts.Wait {
			waitErrs := make([]error, len(rollouts))
			var wg sync.WaitGroup
			for i, ro := range rollouts {
				wg.Go(func() {
					waitErrs[i] = ro.writer.waitReady(ctx, ro.item.Addon.Name, ro.objects, opts.timeout(), r)
				})
			}
			wg.Wait()
			ready := rollouts[:0]
			for i, ro := range rollouts {
				if waitErrs[i] != nil {
					fail(ro.item.Addon.Name, waitErrs[i])
					continue
				}
				ready = append(ready, ro)
			}
			rollouts = ready
		}
		for _, ro := range rollouts {
			if err := c.finishAddon(ctx, ro, r); err != nil {
				fail(ro.item.Addon.Name, err)
			}
		}
		if len(failed) > 0 {
			return &ApplyError{Failed: failed}
		}
		return nil
	})
}

// releaseObjects fetches and verifies the manifest of a release, decodes it
// and stamps the addon's selector and IdentityLabel on every object: the
// objects exactly as apply, the plan's dry-run and drift repair send them.
func releaseObjects(ctx context.Context, f *Fetcher, a *Addon) ([]*unstructured.Unstructured, error) {
	if errs := validation.IsValidLabelValue(a.Name); len(errs) > 0 {
		return nil, fmt.Errorf("the addon's name cannot be the value of label %s (%s): give it a shorter name", IdentityLabel, strings.Join(errs, "; "))
	}
	if len(a.Selector) == 0 && a.Prune != nil {
		return nil, errors.New("refusing to prune with an empty selector: give the addon a selector")
	}
	data, err := f.FetchManifest(ctx, a)
	if err != nil {
		return nil, err
	}
	objs, err := DecodeObjects(data)
	if err != nil {
		return nil, fmt.Errorf("decoding manifest %s: %w", a.Manifest, err)
	}
	StampLabels(objs, a.Selector)
	StampLabels(objs, map[string]string{IdentityLabel: a.Name})
	return objs, nil
}

// rollout is an addon whose release is applied, on its way to being
// recorded.
type rollout struct {
	item   PlanItem
	writer *addonWriter
	// objs are the release's objects, rel them mapped and placed, and
	// adopt the keys of those the manifest adopts (AdoptAnnotation).
	objs  []*unstructured.Unstructured
	rel   *release
	adopt map[ObjectKey]bool
	// shared names, by object, the other addons that declare it too: of
	// the run, and outside it (found by the ownership check).
	shared map[ObjectKey]map[string]bool
	// done is what the release applied, and inv its inventory to record.
	done *applied
	inv  *Inventory
	// pending is the pending release on the cluster while it is applied.
	pending *Pending
	// objects are the applied objects as the server returned them, for the
	// readiness gate.
	objects []*unstructured.Unstructured
}

// applyRun applies the releases of the items to apply as one run, and
// returns those it applied; fail is called for each addon that fails, which
// the run then leaves. It goes:
//
//   - fetch, verify, decode and stamp every release;
//   - map and place every object, the kinds any release's CRDs define
//     included (an addon may need another's CRD);
//   - settle ownership: an object two addons of the run declare, or that
//     carries the IdentityLabel of another addon that still declares it,
//     fails the addon unless its manifest adopts it (AdoptAnnotation);
//   - write each addon's pending release;
//   - apply the Namespaces and CRDs of every addon, and wait until the CRDs
//     are Established, before any other object of the run;
//   - give the addons that need PKI their CA and Issuer (cert-manager's
//     Issuer CRD may be one the run just applied);
//   - apply the other waves of phases (see Phase), each for every addon
//     before the next: webhooks and APIServices of all addons come last, so
//     that no addon's objects pass through another's webhook before its
//     server runs.
func (c *Client) applyRun(ctx context.Context, plan *Plan, items []PlanItem, opts ApplyOptions, r *reporter, fail func(string, error)) []*rollout {
	logger := klog.FromContext(ctx)
	var ros []*rollout
	// unread holds the releases whose manifests did not load: what they
	// declare is unknown, so no addon of the run prunes what they may.
	unread := map[*Addon]error{}
	for _, it := range items {
		if !it.Decision.Apply {
			r.report(EventNote, it.Addon.Name, "Skipped: another run applied it meanwhile (%s)", it.Decision.Reason)
			continue
		}
		objs, err := releaseObjects(ctx, opts.Fetcher, it.Addon)
		if err != nil {
			unread[it.Addon] = err
			fail(it.Addon.Name, err)
			continue
		}
		adopt := map[ObjectKey]bool{}
		ros = append(ros, &rollout{item: it, objs: objs, adopt: adopt})
	}
	defined := map[schema.GroupKind]bool{}
	for _, ro := range ros {
		maps.Copy(defined, definedKinds(ro.objs))
	}
	decl := newDeclarations(c, opts.Fetcher, plan, defined)
	for a, err := range unread {
		decl.set(a, nil, nil, err)
	}
	// keep drops the addons that failed.
	keep := func(ros []*rollout, step func(*rollout) error) []*rollout {
		out := ros[:0]
		for _, ro := range ros {
			if err := step(ro); err != nil {
				fail(ro.item.Addon.Name, err)
				continue
			}
			out = append(out, ro)
		}
		return out
	}
	ros = keep(ros, func(ro *rollout) error {
		ro.writer = &addonWriter{client: c, parallelism: opts.Parallelism, shared: ro.item.shared, defined: defined, decl: decl, adoptForeign: opts.Adopt, metadataResults: !opts.Wait}
		rel, err := ro.writer.prepare(ctx, ro.objs)
		decl.set(ro.item.Addon, rel, ro.objs, err)
		if err != nil {
			return err
		}
		ro.rel, ro.done = rel, rel.done
		for _, u := range ro.objs {
			if adopts(u) {
				ro.adopt[keyOf(u)] = true
			}
		}
		return nil
	})
	dups := checkDuplicates(ros)
	co := coDeclarers(ros)
	ros = keep(ros, func(ro *rollout) error {
		if err := dups[ro.item.Addon.Name]; err != nil {
			return err
		}
		ro.shared = co[ro]
		if ro.shared == nil {
			ro.shared = map[ObjectKey]map[string]bool{}
		}
		if err := ro.writer.checkOwnership(ctx, ro, r); err != nil {
			return err
		}
		// Each object records who else declares it, so that prune and
		// delete keep it for them in runs without them.
		ro.writer.declaredBy = declaredByValues(ro.item.Addon.Name, ro.shared)
		return nil
	})
	// A pending release that became ready since its run's wait ended is
	// completed as it is: its objects are neither applied again (which
	// would undo what made them ready, such as a replica count scaled by
	// hand) nor waited for; it is pruned and recorded.
	completing := func(ro *rollout) bool { return ro.item.Decision.completes() }
	ros = keep(ros, func(ro *rollout) error {
		it, a := ro.item, ro.item.Addon
		if completing(ro) {
			ro.inv = ro.done.record(a.Name)
			return nil
		}
		logger.V(2).Info("Applying addon", "addon", a.Name, "objects", len(ro.objs), "reason", it.Decision.Reason)
		// As kubectl's ApplySet does, record which release is being
		// applied and where its objects will be before creating any,
		// unless an earlier pending annotation of this very release
		// already says so: a run that dies while applying, or whose
		// objects never become ready, leaves the next run every kind and
		// namespace to prune and a reason to apply (Decide), even when it
		// re-applies the recorded release.
		ro.inv = ro.done.record(a.Name)
		known := it.Pending.inventory()
		if it.Current != nil && it.Current.Inventory != nil && it.Current.Inventory.Identity != "" {
			known = it.Current.Inventory.union(known)
		}
		ro.pending = it.Pending
		if !it.Pending.is(a) || !known.covers(ro.inv) {
			ro.pending = newPending(a, ro.inv.union(known))
			return c.writePending(ctx, a.Namespace, a.Name, ro.pending)
		}
		return nil
	})
	applyWave := func(wv wave) {
		ros = keep(ros, func(ro *rollout) error {
			if completing(ro) {
				return nil
			}
			out, err := ro.writer.applyWave(ctx, ro.rel, wv)
			ro.objects = append(ro.objects, out...)
			return err
		})
	}
	applyWave(applyWaves[0])
	ros = keep(ros, func(ro *rollout) error {
		if !ro.item.Addon.NeedsPKI || completing(ro) {
			return nil
		}
		return c.installPKI(ctx, ro.item.Addon, defined[issuerKind.GroupKind()])
	})
	for _, wv := range applyWaves[1:] {
		applyWave(wv)
	}
	if opts.Wait {
		// Every object is applied: say so before waiting, so that a
		// release whose wait ends before it is ready, and that becomes
		// ready later, is completed by the next run rather than rolled
		// back (see Client.weigh).
		ros = keep(ros, func(ro *rollout) error {
			if completing(ro) || ro.pending.Applied {
				return nil
			}
			applied := *ro.pending
			applied.Applied, applied.Ready = true, false
			return c.writePending(ctx, ro.item.Addon.Namespace, ro.item.Addon.Name, &applied)
		})
	}
	return ros
}

// finishAddon prunes what the release no longer has, marks nodes for a
// rolling update when the release asks, and writes the install record.
func (c *Client) finishAddon(ctx context.Context, ro *rollout, r *reporter) error {
	it, a := ro.item, ro.item.Addon
	kept, err := ro.writer.prune(ctx, it, ro.done, r)
	if err != nil {
		return err
	}
	if it.Current != nil && a.NeedsRollingUpdate != "" {
		if err := c.markNodes(ctx, a.NeedsRollingUpdate); err != nil {
			return err
		}
	}
	rec := NewRecord(a)
	// What prune kept still carries the addon's label: the record lists
	// where it is, so that the next update looks at it again.
	rec.Inventory = ro.inv.union(kept)
	if err := c.WriteRecord(ctx, a.Namespace, a.Name, rec); err != nil {
		return err
	}
	release := describeRelease(a.VersionString(), a.ID)
	var unfinished string
	if it.Pending.namesRelease() && !it.Pending.is(a) {
		unfinished = " (" + it.Pending.release() + " " + ReasonUnfinished + ")"
	}
	switch {
	case it.Decision.completes():
		r.report(EventApplied, a.Name, "Completed %s (ready since its run's wait ended)", release)
	case it.Current == nil:
		r.report(EventApplied, a.Name, "Installed %s%s", release, unfinished)
	case it.Decision.rollsBack() && NewRecord(a).same(it.Current):
		r.report(EventApplied, a.Name, "Rolled back to %s%s", release, unfinished)
	case unfinished != "" && NewRecord(a).same(it.Current):
		r.report(EventApplied, a.Name, "Restored %s%s", release, unfinished)
	default:
		r.report(EventApplied, a.Name, "Updated %s -> %s%s", describeRelease(it.Current.Version, it.Current.ID), release, unfinished)
	}
	return nil
}

// addonWriter applies and prunes the objects of one addon.
type addonWriter struct {
	client      *Client
	parallelism int
	// shared names the other addons of the channels with the same selector.
	shared []string
	// defined holds the kinds the CRDs of every release of the run define,
	// which prepare places by the CRD's scope; nil means the release's own.
	defined map[schema.GroupKind]bool
	// decl knows what the addons of the run declare, for prune's keep-set
	// and for ownership; nil outside a run (preview, drift, delete).
	decl *declarations
	// adoptForeign lets the addon take over objects neither channels nor
	// kOps's channels made (ApplyOptions.Adopt).
	adoptForeign bool
	// metadataResults makes apply return the metadata of the objects it
	// applies rather than the whole objects: set in a run that does not
	// wait for them, which reads nothing else of them.
	metadataResults bool
	// declaredBy holds, in a run, the DeclaredByAnnotation each object of
	// the release is to carry (none when absent); nil outside a run, which
	// leaves the annotation as it is.
	declaredBy map[ObjectKey]string
}

// applied is what a release applies: the objects to keep when pruning, and
// the inventory to record.
type applied struct {
	keep       map[ObjectKey]bool
	kinds      map[schema.GroupKind]bool
	namespaces map[string]bool
}

// record is the inventory of the release, with the identity its objects
// carry.
func (in *applied) record(name string) *Inventory {
	kinds := map[string]bool{}
	for gk := range in.kinds {
		kinds[gk.String()] = true
	}
	return &Inventory{
		Kinds:      sortedStrings(kinds),
		Namespaces: sortedStrings(in.namespaces),
		Identity:   IdentityLabel + "=" + name,
	}
}

// target is an object ready to apply: its manifest and where it goes.
type target struct {
	obj     *unstructured.Unstructured
	key     ObjectKey
	mapping *meta.RESTMapping
}

// release is a manifest's objects, mapped and placed: what apply will do.
type release struct {
	byPhase [phaseCount][]*unstructured.Unstructured
	// ready holds the objects mapped up front; objects of kinds the
	// manifest's own CRDs define are mapped once those are Established.
	ready map[*unstructured.Unstructured]*target
	done  *applied
}

// prepare maps every object whose kind the server serves, defaults or clears
// namespaces by scope (for kinds the manifest's CRDs define, by the CRD's
// scope), and claims each object's key, reporting every problem before
// anything is applied.
func (w *addonWriter) prepare(ctx context.Context, objs []*unstructured.Unstructured) (*release, error) {
	defined := definedKinds(objs)
	for gk, namespaced := range w.defined {
		if _, ok := defined[gk]; !ok {
			defined[gk] = namespaced
		}
	}
	rel := &release{
		ready: map[*unstructured.Unstructured]*target{},
		done:  &applied{keep: map[ObjectKey]bool{}, kinds: map[schema.GroupKind]bool{}, namespaces: map[string]bool{}},
	}
	var errs []error
	for _, u := range objs {
		gk := u.GroupVersionKind().GroupKind()
		p := PhaseOf(gk)
		rel.byPhase[p] = append(rel.byPhase[p], u)
		if namespaced, ok := defined[gk]; ok {
			place(u, namespaced)
			if err := rel.done.claim(u); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		mapping, err := w.client.mapping(ctx, u.GroupVersionKind(), false)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", keyOf(u), err))
			continue
		}
		place(u, mapping.Scope.Name() == meta.RESTScopeNameNamespace)
		if err := rel.done.claim(u); err != nil {
			errs = append(errs, err)
			continue
		}
		rel.ready[u] = &target{obj: u, key: keyOf(u), mapping: mapping}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return rel, nil
}

// place defaults the namespace of a namespaced object and clears that of a
// cluster-scoped one.
func place(u *unstructured.Unstructured, namespaced bool) {
	switch {
	case !namespaced:
		u.SetNamespace("")
	case u.GetNamespace() == "":
		u.SetNamespace(DefaultObjectNamespace)
	}
}

// claim adds an object to the release, refusing one given twice.
func (in *applied) claim(u *unstructured.Unstructured) error {
	key := keyOf(u)
	if in.keep[key] {
		return fmt.Errorf("%s appears twice in the manifest", key)
	}
	in.keep[key] = true
	in.kinds[key.GroupKind] = true
	if key.Namespace != "" {
		in.namespaces[key.Namespace] = true
	}
	return nil
}

// apply applies a prepared release wave by wave and returns the objects
// as the server answered.
func (w *addonWriter) apply(ctx context.Context, rel *release) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for _, wv := range applyWaves {
		got, err := w.applyWave(ctx, rel, wv)
		if err != nil {
			return nil, err
		}
		out = append(out, got...)
	}
	return out, nil
}

// applyWave applies the objects of one wave of a prepared release, in
// phase order, and returns them as the server answered; after the wave of
// PhaseDefinitions it waits until the CRDs are Established. An object that
// asks to be created only (CreateOnlyAnnotation) and exists is left as it
// is.
func (w *addonWriter) applyWave(ctx context.Context, rel *release, wv wave) ([]*unstructured.Unstructured, error) {
	var targets []*target
	var errs []error
	for p := wv.first; p <= wv.last; p++ {
		for _, u := range rel.byPhase[p] {
			t := rel.ready[u]
			if t == nil {
				mapping, err := w.client.mapping(ctx, u.GroupVersionKind(), true)
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", keyOf(u), err))
					continue
				}
				t = &target{obj: u, key: keyOf(u), mapping: mapping}
			}
			targets = append(targets, t)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	results := make([]*unstructured.Unstructured, len(targets))
	err := w.each(ctx, len(targets), func(ctx context.Context, i int) error {
		var res *unstructured.Unstructured
		var err error
		if CreateOnly(targets[i].obj) {
			res, err = w.createOnce(ctx, targets[i])
		} else {
			res, err = w.applyOne(ctx, targets[i])
		}
		results[i] = res
		if err == nil && w.declaredBy != nil && !targets[i].key.IsNamespace() {
			err = w.syncDeclaredBy(ctx, targets[i], res, w.declaredBy[targets[i].key])
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if wv.first == PhaseDefinitions {
		if err := w.waitEstablished(ctx, targets, results); err != nil {
			return nil, err
		}
	}
	return results, nil
}

// createOnce applies an object that is to be created only: it is applied
// when it does not exist, and left as it is (and returned as it is) when it
// does.
func (w *addonWriter) createOnce(ctx context.Context, t *target) (*unstructured.Unstructured, error) {
	live, err := resourceFor(w.client.Dynamic, t.mapping.Resource, t.key.Namespace).Get(ctx, t.key.Name, metav1.GetOptions{})
	switch {
	case err == nil:
		klog.FromContext(ctx).V(3).Info("Left create-only object as it is", "object", t.key.String())
		return live, nil
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("reading %s: %w", t.key, err)
	}
	return w.applyOne(ctx, t)
}

// mapping finds the resource of a kind. A kind not found makes the mapper
// read discovery again: once, or, when wait is set, until it shows up or
// discoveryTimeout passes.
func (c *Client) mapping(ctx context.Context, gvk schema.GroupVersionKind, await bool) (*meta.RESTMapping, error) {
	m, err := c.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err == nil || !meta.IsNoMatchError(err) {
		return m, err
	}
	if !await {
		c.Mapper.Reset()
		return c.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	var last error
	pollErr := wait.PollUntilContextTimeout(ctx, pollInterval, discoveryTimeout, true, func(context.Context) (bool, error) {
		c.Mapper.Reset()
		m, last = c.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if meta.IsNoMatchError(last) {
			return false, nil
		}
		return true, last
	})
	if pollErr != nil && last == nil {
		last = pollErr
	}
	return m, last
}

// applyOne server-side applies one object, taking ownership of every field
// the manifest sets. When other managers (kOps's channels, kubectl's
// client-side apply) own fields of the object, their fields become this
// tool's and the object is applied again, so that what the manifest no
// longer sets is removed.
func (w *addonWriter) applyOne(ctx context.Context, t *target) (*unstructured.Unstructured, error) {
	var ri dynamic.ResourceInterface = w.client.Dynamic.Resource(t.mapping.Resource)
	if t.key.Namespace != "" {
		ri = w.client.Dynamic.Resource(t.mapping.Resource).Namespace(t.key.Namespace)
	}
	opts := metav1.ApplyOptions{FieldManager: FieldManager, Force: true}
	out, err := w.serverApply(ctx, ri, t, opts)
	if err != nil {
		return nil, fmt.Errorf("applying %s: %w", t.key, err)
	}
	for attempt := 0; ; attempt++ {
		patch, err := takeOverPatch(out)
		if err != nil {
			return nil, fmt.Errorf("taking over the fields of %s: %w", t.key, err)
		}
		if patch == nil {
			break
		}
		_, err = ri.Patch(ctx, t.key.Name, types.JSONPatchType, patch, metav1.PatchOptions{})
		if apierrors.IsConflict(err) && attempt < 3 {
			// Changed since it was applied: read it again and retry.
			if out, err = ri.Get(ctx, t.key.Name, metav1.GetOptions{}); err != nil {
				return nil, fmt.Errorf("reading %s: %w", t.key, err)
			}
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("taking over the fields of %s: %w", t.key, err)
		}
		if out, err = w.serverApply(ctx, ri, t, opts); err != nil {
			return nil, fmt.Errorf("applying %s: %w", t.key, err)
		}
		klog.FromContext(ctx).V(2).Info("Took over fields of other managers", "object", t.key.String())
		break
	}
	klog.FromContext(ctx).V(3).Info("Applied object", "object", t.key.String())
	return out, nil
}

// serverApply server-side applies one object and returns it as the server
// answered: whole, or, when the writer reads only metadata of what it
// applies (metadataResults), its metadata alone, which the server encodes
// and the client decodes as protobuf. A CRD is always returned whole, for
// waitEstablished.
func (w *addonWriter) serverApply(ctx context.Context, ri dynamic.ResourceInterface, t *target, opts metav1.ApplyOptions) (*unstructured.Unstructured, error) {
	if !w.metadataResults || t.key.GroupKind == crdKind {
		return ri.Apply(ctx, t.key.Name, t.obj, opts)
	}
	data, err := t.obj.MarshalJSON()
	if err != nil {
		return nil, err
	}
	var mi metadata.ResourceInterface = w.client.Metadata.Resource(t.mapping.Resource)
	if t.key.Namespace != "" {
		mi = w.client.Metadata.Resource(t.mapping.Resource).Namespace(t.key.Namespace)
	}
	m, err := mi.Patch(ctx, t.key.Name, types.ApplyPatchType, data, opts.ToPatchOptions())
	if err != nil {
		return nil, err
	}
	return metadataObject(t.mapping.GroupVersionKind, m)
}

// waitEstablished waits until every CRD among the applied targets is
// Established, then makes the mapper read discovery again so the kinds they
// define can be mapped.
func (w *addonWriter) waitEstablished(ctx context.Context, targets []*target, results []*unstructured.Unstructured) error {
	sawCRD := false
	for i, t := range targets {
		if t.key.GroupKind != crdKind {
			continue
		}
		sawCRD = true
		obj := results[i]
		err := wait.PollUntilContextTimeout(ctx, pollInterval, crdTimeout, true, func(ctx context.Context) (bool, error) {
			if obj == nil {
				var err error
				if obj, err = w.client.Dynamic.Resource(crdResource).Get(ctx, t.key.Name, metav1.GetOptions{}); err != nil {
					return false, err
				}
			}
			established, err := crdEstablished(obj)
			obj = nil
			return established, err
		})
		if err != nil {
			return fmt.Errorf("waiting for %s to be established: %w", t.key, err)
		}
	}
	if sawCRD {
		w.client.Mapper.Reset()
	}
	return nil
}

// crdEstablished reads a CRD's conditions: true once Established, an error
// when its names were refused.
func crdEstablished(obj *unstructured.Unstructured) (bool, error) {
	conditions, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	established := false
	for _, c := range conditions {
		cond, ok := c.(map[string]any)
		if !ok {
			continue
		}
		switch cond["type"] {
		case "Established":
			established = cond["status"] == "True"
		case "NamesAccepted":
			if cond["status"] == "False" {
				return false, fmt.Errorf("names not accepted: %v", cond["message"])
			}
		}
	}
	return established, nil
}

// definedKinds returns the kinds the manifest's CRDs define, each with
// whether it is namespaced.
func definedKinds(objs []*unstructured.Unstructured) map[schema.GroupKind]bool {
	out := map[schema.GroupKind]bool{}
	for _, u := range objs {
		if u.GroupVersionKind().GroupKind() != crdKind {
			continue
		}
		group, _, _ := unstructured.NestedString(u.Object, "spec", "group")
		kind, _, _ := unstructured.NestedString(u.Object, "spec", "names", "kind")
		scope, _, _ := unstructured.NestedString(u.Object, "spec", "scope")
		if kind != "" {
			out[schema.GroupKind{Group: group, Kind: kind}] = scope != "Cluster"
		}
	}
	return out
}

// each calls fn for 0..n-1 with at most w.parallelism calls at once, and
// returns every error, joined. It does not stop at the first: a phase
// reports all its failing objects.
func (w *addonWriter) each(ctx context.Context, n int, fn func(context.Context, int) error) error {
	parallelism := w.parallelism
	if parallelism <= 0 {
		parallelism = defaultParallelism
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		sem  = make(chan struct{}, parallelism)
	)
	for i := 0; i < n; i++ {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := fn(ctx, i); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
