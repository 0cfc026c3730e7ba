package channels

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"k8s.io/klog/v2"

	"github.com/kos-sdn/kos/channels/install"
)

// defaultParallelism bounds the requests in flight while applying one wave
// of an addon or pruning it. A cold install of 200 objects is bound by the
// kube-apiserver's CPU (about 2 ms a write, 5 ms a Service, which also
// writes its IPAddress), not by round trips: 16 in flight keep a two-core
// control plane busy, and 32 or 64 were no faster (docs/benchmarks.md).
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
func (in *applied) record(name string) *install.Inventory {
	kinds := map[string]bool{}
	for gk := range in.kinds {
		kinds[gk.String()] = true
	}
	return &install.Inventory{
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
// returns every error, joined in the order of i whichever call ends first:
// the callers' order (phase, then manifest order), so that a failed phase
// names its failing objects the same way on every run. It does not stop at
// the first error: a phase reports all its failing objects.
func (w *addonWriter) each(ctx context.Context, n int, fn func(context.Context, int) error) error {
	parallelism := w.parallelism
	if parallelism <= 0 {
		parallelism = defaultParallelism
	}
	var (
		wg   sync.WaitGroup
		errs = make([]error, n)
		sem  = make(chan struct{}, parallelism)
	)
	for i := 0; i < n; i++ {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			errs[i] = fn(ctx, i)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
