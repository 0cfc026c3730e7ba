package channels

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2"

	"github.com/kos-sdn/kos/channels/channel"
	"github.com/kos-sdn/kos/channels/install"
	"github.com/kos-sdn/kos/channels/lease"
)

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

	// releases are the releases Apply began to read before it held the
	// lease; nil reads each when needed.
	releases *prefetched
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
	pre := c.prefetch(ctx, pending, opts.Fetcher)
	defer pre.wait()
	return c.withLease(ctx, opts.Identity, r, func(ctx context.Context) error {
		items := append([]PlanItem(nil), pending...)
		if err := c.decide(ctx, items, plan.Options); err != nil {
			return err
		}
		opts.releases = pre
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

// prefetched is what a run reads before it holds the lease, while it
// takes it: the releases of the items to apply, fetched, verified, decoded
// and stamped, and discovery. None of it depends on what another run does
// to the cluster (a manifest is the one the plan's channel names, and its
// hash, when the channel gives one, pins it), so reading it early changes
// nothing but when: a cold run's lease, record and discovery round-trips no
// longer come one after the other. An addon that the records read under the
// lease skip is read for nothing.
type prefetched struct {
	wg       sync.WaitGroup
	releases map[*Addon]*fetchedRelease
}

// fetchedRelease is one release as releaseObjects returned it; done is
// closed once it has.
type fetchedRelease struct {
	done chan struct{}
	objs []*unstructured.Unstructured
	err  error
}

// prefetch starts reading the releases of items, and discovery, in
// goroutines that end once each read has; wait waits for the releases'.
// The discovery read is not waited for: it takes no context, and a run
// cancelled while it waits for the lease must not wait on a server that
// does not answer; it ends when the server answers or the request fails.
func (c *Client) prefetch(ctx context.Context, items []PlanItem, f *Fetcher) *prefetched {
	p := &prefetched{releases: map[*Addon]*fetchedRelease{}}
	// A failed read is not an error here: the mapper reads discovery
	// again when the run first maps a kind.
	go func() { _, _ = c.Mapper.RESTMapping(schema.GroupKind{Kind: "Namespace"}, "v1") }()
	for _, it := range items {
		if _, ok := p.releases[it.Addon]; ok {
			continue
		}
		fr := &fetchedRelease{done: make(chan struct{})}
		p.releases[it.Addon] = fr
		p.wg.Go(func() {
			defer close(fr.done)
			fr.objs, fr.err = releaseObjects(ctx, f, it.Addon)
		})
	}
	return p
}

// objects returns the release of a, as prefetched when it was, else read
// now.
func (p *prefetched) objects(ctx context.Context, f *Fetcher, a *Addon) ([]*unstructured.Unstructured, error) {
	fr := p.lookup(a)
	if fr == nil {
		return releaseObjects(ctx, f, a)
	}
	select {
	case <-fr.done:
		return fr.objs, fr.err
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

func (p *prefetched) lookup(a *Addon) *fetchedRelease {
	if p == nil {
		return nil
	}
	return p.releases[a]
}

// wait waits until every release prefetch began to read is read.
func (p *prefetched) wait() { p.wg.Wait() }

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
	inv  *install.Inventory
	// pending is the pending release on the cluster while it is applied.
	pending *install.Pending
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
	ros, unread := c.readRollouts(ctx, items, opts, r, fail)
	defined := map[schema.GroupKind]bool{}
	for _, ro := range ros {
		maps.Copy(defined, definedKinds(ro.objs))
	}
	decl := newDeclarations(c, opts.Fetcher, plan, defined)
	for a, err := range unread {
		decl.set(a, nil, nil, err)
	}
	keep := func(ros []*rollout, step func(*rollout) error) []*rollout { return keepRollouts(ros, step, fail) }
	ros = keep(ros, func(ro *rollout) error { return c.prepareRollout(ctx, plan, ro, opts, defined, decl) })
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
	ros = keep(ros, func(ro *rollout) error { return c.writeRolloutPending(ctx, ro) })
	applyWave := func(wv wave) {
		ros = keep(ros, func(ro *rollout) error {
			if ro.completing() {
				return nil
			}
			out, err := ro.writer.applyWave(ctx, ro.rel, wv)
			ro.objects = append(ro.objects, out...)
			return err
		})
	}
	applyWave(applyWaves[0])
	ros = keep(ros, func(ro *rollout) error {
		if !ro.item.Addon.NeedsPKI || ro.completing() {
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
			if ro.completing() || ro.pending.Applied {
				return nil
			}
			applied := *ro.pending
			applied.Applied, applied.Ready = true, false
			return c.writePending(ctx, ro.item.Addon.Namespace, ro.item.Addon.Name, &applied)
		})
	}
	return ros
}

// readRollouts fetches, verifies, decodes and stamps the release of each
// item to apply. unread holds the releases whose manifests did not load:
// what they declare is unknown, so no addon of the run prunes what they
// may.
func (c *Client) readRollouts(ctx context.Context, items []PlanItem, opts ApplyOptions, r *reporter, fail func(string, error)) (ros []*rollout, unread map[*Addon]error) {
	unread = map[*Addon]error{}
	for _, it := range items {
		if !it.Decision.Apply {
			r.report(EventNote, it.Addon.Name, "Skipped: another run applied it meanwhile (%s)", it.Decision.Reason)
			continue
		}
		objs, err := opts.releases.objects(ctx, opts.Fetcher, it.Addon)
		if err != nil {
			unread[it.Addon] = err
			fail(it.Addon.Name, err)
			continue
		}
		adopt := map[ObjectKey]bool{}
		ros = append(ros, &rollout{item: it, objs: objs, adopt: adopt})
	}
	return ros, unread
}

// keepRollouts runs step on each rollout and returns those whose step
// succeeded; fail is called for the others, which the run leaves.
func keepRollouts(ros []*rollout, step func(*rollout) error, fail func(string, error)) []*rollout {
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

// prepareRollout maps and places the rollout's objects, with the kinds
// the run's CRDs define, tells decl what the release declares, and notes
// the objects its manifest adopts.
func (c *Client) prepareRollout(ctx context.Context, plan *Plan, ro *rollout, opts ApplyOptions, defined map[schema.GroupKind]bool, decl *declarations) error {
	ro.writer = &addonWriter{client: c, parallelism: opts.Parallelism, shared: plan.SharingSelector(ro.item.Addon), defined: defined, decl: decl, adoptForeign: opts.Adopt, metadataResults: !opts.Wait}
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
}

// completing reports whether the rollout completes a pending release
// that became ready since its run's wait ended: it is completed as it is,
// its objects neither applied again (which would undo what made them
// ready, such as a replica count scaled by hand) nor waited for; it is
// pruned and recorded.
func (ro *rollout) completing() bool { return ro.item.Decision.Completes() }

// writeRolloutPending sets the inventory the rollout records and, as
// kubectl's ApplySet does, writes which release is being applied and
// where its objects will be before creating any, unless an earlier
// pending annotation of this very release already says so: a run that
// dies while applying, or whose objects never become ready, leaves the
// next run every kind and namespace to prune and a reason to apply
// (Decide), even when it re-applies the recorded release.
func (c *Client) writeRolloutPending(ctx context.Context, ro *rollout) error {
	it, a := ro.item, ro.item.Addon
	ro.inv = ro.done.record(a.Name)
	if ro.completing() {
		return nil
	}
	klog.FromContext(ctx).V(2).Info("Applying addon", "addon", a.Name, "objects", len(ro.objs), "reason", it.Decision.Reason)
	known := it.Pending.Scope()
	if it.Current != nil && it.Current.Inventory != nil && it.Current.Inventory.Identity != "" {
		known = it.Current.Inventory.Union(known)
	}
	ro.pending = it.Pending
	if !it.Pending.Is(a) || !known.Covers(ro.inv) {
		ro.pending = install.NewPending(a, ro.inv.Union(known))
		return c.writePending(ctx, a.Namespace, a.Name, ro.pending)
	}
	return nil
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
	rec := install.NewRecord(a)
	// What prune kept still carries the addon's label: the record lists
	// where it is, so that the next update looks at it again.
	rec.Inventory = ro.inv.Union(kept)
	if err := c.WriteRecord(ctx, a.Namespace, a.Name, rec); err != nil {
		return err
	}
	release := channel.DescribeRelease(a.VersionString(), a.ID)
	var unfinished string
	if it.Pending.NamesRelease() && !it.Pending.Is(a) {
		unfinished = " (" + it.Pending.Release() + " " + install.ReasonUnfinished + ")"
	}
	switch {
	case it.Decision.Completes():
		r.report(EventApplied, a.Name, "Completed %s (ready since its run's wait ended)", release)
	case it.Current == nil:
		r.report(EventApplied, a.Name, "Installed %s%s", release, unfinished)
	case it.Decision.RollsBack() && install.NewRecord(a).Same(it.Current):
		r.report(EventApplied, a.Name, "Rolled back to %s%s", release, unfinished)
	case unfinished != "" && install.NewRecord(a).Same(it.Current):
		r.report(EventApplied, a.Name, "Restored %s%s", release, unfinished)
	default:
		r.report(EventApplied, a.Name, "Updated %s -> %s%s", channel.DescribeRelease(it.Current.Version, it.Current.ID), release, unfinished)
	}
	return nil
}
