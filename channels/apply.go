package channels

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/klog/v2"
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

// ApplyOptions tune Apply. The zero value is ready to use.
type ApplyOptions struct {
	// Fetcher reads manifests; nil means NewFetcher().
	Fetcher *Fetcher
	// OnEvent, when set, is called for every step, one call at a time.
	OnEvent func(Event)
	// Identity names this run as the holder of the lease; empty means
	// NewIdentity().
	Identity string
	// Parallelism bounds the requests in flight within one phase; 0 means 16.
	Parallelism int
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
// For each addon it fetches and verifies the manifest, applies its objects
// with server-side apply in phases (see Phase), prunes what the release no
// longer has, marks nodes for a rolling update when the release asks, and
// then writes the install record. An addon that fails anywhere keeps its old
// record, and nothing of it is pruned; the other addons go on. The returned
// error is an *ApplyError when addons failed.
func (c *Client) Apply(ctx context.Context, plan *Plan, opts ApplyOptions) error {
	pending := plan.Pending()
	if len(pending) == 0 {
		return nil
	}
	if opts.Fetcher == nil {
		opts.Fetcher = NewFetcher()
	}
	if opts.Identity == "" {
		opts.Identity = NewIdentity()
	}
	if opts.Parallelism <= 0 {
		opts.Parallelism = defaultParallelism
	}
	r := newReporter(opts.OnEvent)
	return c.withLease(ctx, opts.Identity, r, func(ctx context.Context) error {
		items := append([]PlanItem(nil), pending...)
		if err := c.decide(ctx, items); err != nil {
			return err
		}
		var failed []AddonError
		for _, it := range items {
			if !it.Decision.Apply {
				r.report(EventNote, it.Addon.Name, "Skipped: another run applied it meanwhile (%s)", it.Decision.Reason)
				continue
			}
			if err := c.applyAddon(ctx, it, opts, r); err != nil {
				r.report(EventFailed, it.Addon.Name, "Failed: %v", err)
				failed = append(failed, AddonError{Addon: it.Addon.Name, Err: err})
			}
		}
		if len(failed) > 0 {
			return &ApplyError{Failed: failed}
		}
		return nil
	})
}

// applyAddon applies, prunes and records one addon.
func (c *Client) applyAddon(ctx context.Context, it PlanItem, opts ApplyOptions, r *reporter) error {
	a := it.Addon
	logger := klog.FromContext(ctx).WithValues("addon", a.Name)
	data, err := opts.Fetcher.FetchManifest(ctx, a)
	if err != nil {
		return err
	}
	objs, err := DecodeObjects(data)
	if err != nil {
		return fmt.Errorf("decoding manifest %s: %w", a.Manifest, err)
	}
	if len(a.Selector) == 0 && a.Prune != nil {
		return errors.New("refusing to prune with an empty selector: give the addon a selector")
	}
	StampLabels(objs, a.Selector)
	logger.V(2).Info("Applying addon", "objects", len(objs), "reason", it.Decision.Reason)

	w := &addonWriter{client: c, parallelism: opts.Parallelism}
	inv, err := w.apply(ctx, objs)
	if err != nil {
		return err
	}
	if err := w.prune(ctx, a, it.Current, inv, r); err != nil {
		return err
	}
	if it.Current != nil && a.NeedsRollingUpdate != "" {
		if err := c.markNodes(ctx, a.NeedsRollingUpdate); err != nil {
			return err
		}
	}
	rec := NewRecord(a)
	rec.Inventory = inv.record()
	if err := c.WriteRecord(ctx, a.Namespace, a.Name, rec); err != nil {
		return err
	}
	release := describeRelease(a.VersionString(), a.ID)
	if it.Current == nil {
		r.report(EventApplied, a.Name, "Installed %s", release)
	} else {
		r.report(EventApplied, a.Name, "Updated %s -> %s", describeRelease(it.Current.Version, it.Current.ID), release)
	}
	return nil
}

// addonWriter applies and prunes the objects of one addon.
type addonWriter struct {
	client      *Client
	parallelism int
}

// applied is what apply wrote: the objects to keep when pruning, and the
// inventory to record.
type applied struct {
	keep       map[objectKey]bool
	kinds      map[schema.GroupKind]bool
	namespaces map[string]bool
}

func (in *applied) record() *Inventory {
	kinds := map[string]bool{}
	for gk := range in.kinds {
		kinds[gk.String()] = true
	}
	inv := &Inventory{Kinds: sortedStrings(kinds), Namespaces: sortedStrings(in.namespaces)}
	if len(inv.Kinds) == 0 && len(inv.Namespaces) == 0 {
		return nil
	}
	return inv
}

// target is an object ready to apply: its manifest and where it goes.
type target struct {
	obj     *unstructured.Unstructured
	key     objectKey
	mapping *meta.RESTMapping
}

// apply applies objs phase by phase and returns what it applied. Objects of
// kinds the manifest's own CRDs define are mapped once those are
// Established; every other object is mapped, and every mapping problem
// reported, before anything is applied.
func (w *addonWriter) apply(ctx context.Context, objs []*unstructured.Unstructured) (*applied, error) {
	defined := definedKinds(objs)
	var byPhase [phaseCount][]*unstructured.Unstructured
	for _, u := range objs {
		p := PhaseOf(u.GroupVersionKind().GroupKind())
		byPhase[p] = append(byPhase[p], u)
	}

	done := &applied{keep: map[objectKey]bool{}, kinds: map[schema.GroupKind]bool{}, namespaces: map[string]bool{}}
	ready := map[*unstructured.Unstructured]*target{}
	var errs []error
	for _, u := range objs {
		if defined[u.GroupVersionKind().GroupKind()] {
			continue
		}
		t, err := w.prepare(ctx, u, false, done)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		ready[u] = t
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}

	for p := Phase(0); p < phaseCount; p++ {
		var targets []*target
		for _, u := range byPhase[p] {
			t := ready[u]
			if t == nil {
				var err error
				if t, err = w.prepare(ctx, u, true, done); err != nil {
					errs = append(errs, err)
					continue
				}
			}
			targets = append(targets, t)
		}
		if len(errs) > 0 {
			return nil, errors.Join(errs...)
		}
		results := make([]*unstructured.Unstructured, len(targets))
		err := w.each(ctx, len(targets), func(ctx context.Context, i int) error {
			out, err := w.applyOne(ctx, targets[i])
			results[i] = out
			return err
		})
		if err != nil {
			return nil, err
		}
		if p == PhaseDefinitions {
			if err := w.waitEstablished(ctx, targets, results); err != nil {
				return nil, err
			}
		}
	}
	return done, nil
}

// prepare maps an object to its resource, defaults or clears its namespace
// by the resource's scope, and claims its key. When wait is set, a kind the
// server does not serve yet is looked up again until discovery serves it.
func (w *addonWriter) prepare(ctx context.Context, u *unstructured.Unstructured, wait bool, done *applied) (*target, error) {
	gvk := u.GroupVersionKind()
	mapping, err := w.client.mapping(ctx, gvk, wait)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", keyOf(u), err)
	}
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		if u.GetNamespace() == "" {
			u.SetNamespace(DefaultObjectNamespace)
		}
	} else {
		u.SetNamespace("")
	}
	key := keyOf(u)
	if done.keep[key] {
		return nil, fmt.Errorf("%s appears twice in the manifest", key)
	}
	done.keep[key] = true
	done.kinds[key.GroupKind] = true
	if key.Namespace != "" {
		done.namespaces[key.Namespace] = true
	}
	return &target{obj: u, key: key, mapping: mapping}, nil
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
// the manifest sets.
func (w *addonWriter) applyOne(ctx context.Context, t *target) (*unstructured.Unstructured, error) {
	var ri dynamic.ResourceInterface = w.client.Dynamic.Resource(t.mapping.Resource)
	if t.key.Namespace != "" {
		ri = w.client.Dynamic.Resource(t.mapping.Resource).Namespace(t.key.Namespace)
	}
	out, err := ri.Apply(ctx, t.key.Name, t.obj, metav1.ApplyOptions{FieldManager: FieldManager, Force: true})
	if err != nil {
		return nil, fmt.Errorf("applying %s: %w", t.key, err)
	}
	klog.FromContext(ctx).V(3).Info("Applied object", "object", t.key.String())
	return out, nil
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

// definedKinds returns the kinds the manifest's CRDs define.
func definedKinds(objs []*unstructured.Unstructured) map[schema.GroupKind]bool {
	out := map[schema.GroupKind]bool{}
	for _, u := range objs {
		if u.GroupVersionKind().GroupKind() != crdKind {
			continue
		}
		group, _, _ := unstructured.NestedString(u.Object, "spec", "group")
		kind, _, _ := unstructured.NestedString(u.Object, "spec", "names", "kind")
		if kind != "" {
			out[schema.GroupKind{Group: group, Kind: kind}] = true
		}
	}
	return out
}

// each calls fn for 0..n-1 with at most w.parallelism calls at once, and
// returns every error, joined. It does not stop at the first: a phase
// reports all its failing objects.
func (w *addonWriter) each(ctx context.Context, n int, fn func(context.Context, int) error) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		sem  = make(chan struct{}, w.parallelism)
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
