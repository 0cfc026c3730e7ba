// Package dryrun works out, without changing anything, what applying the
// pending addons of a plan would do to each of their objects, as the rows
// of a preview (preview.Addon): it dry-runs each object with server-side
// apply (dryRun=All, with the apply code's field manager and force) and
// compares the answer with the live object; notes the objects that cannot
// be dry-run before the run makes their kind or namespace; lists what
// pruning would delete, keep or hand over; and the PKI objects needsPKI
// makes.
//
// A preview must do what Apply does (the same mapping, placement,
// ownership checks and prune lists), so the apply code prepares each
// release and hands it over as a Plan of Releases, with the few rules it
// owns as Options; channels.Client.Preview does both. This package imports
// nothing of channels but preview; tools/verify.sh keeps it so.
package dryrun

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/kos-sdn/kos/channels/preview"
)

// Key names an object on the cluster, as channels.ObjectKey does.
type Key struct {
	GroupKind schema.GroupKind
	Namespace string
	Name      string
}

// Target is an object ready to apply: where it goes, and the object as
// the apply code sends it (stamped and placed).
type Target struct {
	Key      Key
	Resource schema.GroupVersionResource
	Object   *unstructured.Unstructured
}

// Object is one object of a release, in manifest order.
type Object struct {
	Key Key
	// Target is nil for an object whose kind the server does not serve
	// yet (a CRD of the run defines it): it cannot be dry-run.
	Target *Target
}

// Prunable is an object pruning a release found: pruning deletes it,
// unless Keep says why not or HandOver is set.
type Prunable struct {
	Key      Key
	Resource schema.GroupVersionResource
	// Keep says why pruning leaves the object in place; empty when not.
	Keep string
	// HandOver is the object as addon HandOverTo declares it, applied
	// instead of deleting it; nil when there is none.
	HandOver   *Target
	HandOverTo string
}

// PKI is what needsPKI makes for an addon: a Secret holding its CA and an
// Issuer, both in Namespace.
type PKI struct {
	Namespace, Secret, Issuer string
	// IssuerKind is cert-manager's Issuer kind.
	IssuerKind schema.GroupKind
	// IssuerResource maps IssuerKind, or says why it cannot: cert-manager
	// is not installed.
	IssuerResource func(context.Context) (schema.GroupVersionResource, error)
}

// Release is one pending addon's release, read, decoded and prepared by
// the apply code.
type Release struct {
	Addon   string
	Objects []Object
	// Defines holds, as keys, the kinds the release's own CRDs define.
	Defines map[schema.GroupKind]bool
	// PKI is set for an addon that needs PKI.
	PKI *PKI
	// Ownership runs Apply's ownership checks of the release: the objects
	// it adopts, each with whom from, and the objects it refuses, each an
	// error. An error stops the addon's preview.
	Ownership func(context.Context) (adopted map[Key]string, refused []error, err error)
	// Prune lists what pruning the release would find, in the order
	// Apply's lists find them (an object may be found twice); nil when
	// the addon prunes nothing (it has no selector).
	Prune func(context.Context) ([]Prunable, error)
}

// Failure is an addon whose preview failed, and why.
type Failure struct {
	Addon string
	Err   error
}

// Plan is what the apply code prepared of a plan's pending addons.
type Plan struct {
	// Releases are the prepared releases, in plan order.
	Releases []Release
	// Failed are the addons that failed before their release was
	// prepared, in the order Apply meets them.
	Failed []Failure
	// Creates names the namespaces the pending addons create, and Defines
	// the kinds their CRDs define, each by the first addon that does
	// (Apply applies every pending addon before it waits for any).
	Creates map[string]string
	Defines map[schema.GroupKind]string
}

// Options are the clients a dry-run uses and the rules of the apply code
// it follows.
type Options struct {
	Dynamic dynamic.Interface
	// Kube reads Namespaces.
	Kube kubernetes.Interface
	// FieldManager is the apply code's field manager.
	FieldManager string
	// Each calls fn for 0..n-1, some at once, and returns every error,
	// joined: the apply code's parallelism.
	Each func(ctx context.Context, n int, fn func(context.Context, int) error) error
	// Phase is the apply phase of a kind: rows are in the order Apply
	// goes, phase by phase, then pruning.
	Phase func(schema.GroupKind) int
	// Settle works out, from the live object (nil when none) and the
	// dry-run's answer, which fields change manager, and removes from
	// merged the fields applying removes: the dry-run cannot take fields
	// over first, as applying does, so they are still in its answer.
	Settle func(live, merged *unstructured.Unstructured) ([]preview.Takeover, error)
}

// Run previews the releases of a plan. It returns one preview.Addon per
// release, in plan order, but for those whose ownership check or dry-run
// failed, and the addons that failed, after plan.Failed: an addon whose
// release refuses objects has its rows and fails too, as Apply would
// refuse it.
func Run(ctx context.Context, plan Plan, opts Options) ([]preview.Addon, []Failure) {
	failed := append([]Failure(nil), plan.Failed...)
	var out []preview.Addon
	for _, rel := range plan.Releases {
		adopted, refused, err := rel.Ownership(ctx)
		if err != nil {
			failed = append(failed, Failure{Addon: rel.Addon, Err: err})
			continue
		}
		changes, err := addon(ctx, plan, rel, adopted, opts)
		if err != nil {
			failed = append(failed, Failure{Addon: rel.Addon, Err: err})
			continue
		}
		out = append(out, preview.Addon{Addon: rel.Addon, Objects: changes})
		// As Apply would refuse it; its rows still show what it meant
		// to do.
		if len(refused) > 0 {
			sort.Slice(refused, func(i, j int) bool { return refused[i].Error() < refused[j].Error() })
			failed = append(failed, Failure{Addon: rel.Addon, Err: errors.Join(refused...)})
		}
	}
	return out, failed
}

// addon previews the objects of a release; adopted holds the objects it
// takes over, each with whom from.
func addon(ctx context.Context, plan Plan, rel Release, adopted map[Key]string, opts Options) ([]preview.ObjectChange, error) {
	var err error
	var pki []preview.ObjectChange
	if rel.PKI != nil {
		if pki, err = previewPKI(ctx, rel.PKI, plan.Defines[rel.PKI.IssuerKind], opts); err != nil {
			return nil, err
		}
	}
	missing := &namespaceCache{kube: opts.Kube, exists: map[string]bool{}}

	changes := make([]preview.ObjectChange, len(rel.Objects))
	err = opts.Each(ctx, len(rel.Objects), func(ctx context.Context, i int) error {
		o := rel.Objects[i]
		key := o.Key
		ch := preview.ObjectChange{Kind: key.GroupKind, Namespace: key.Namespace, Name: key.Name}
		switch {
		case o.Target == nil:
			ch.Action, ch.Note = preview.ActionCreate, "its kind is defined by this release"
			if _, ok := rel.Defines[key.GroupKind]; !ok && plan.Defines[key.GroupKind] != "" {
				ch.Note = "its kind is defined by addon " + plan.Defines[key.GroupKind]
			}
		case key.Namespace != "" && plan.Creates[key.Namespace] != "":
			exists, err := missing.has(ctx, key.Namespace)
			if err != nil {
				return err
			}
			if !exists {
				ch.Action, ch.Note = preview.ActionCreate, "its namespace is created by this release"
				if by := plan.Creates[key.Namespace]; by != rel.Addon {
					ch.Note = "its namespace is created by addon " + by
				}
				break
			}
			fallthrough
		default:
			if err := dryRun(ctx, o.Target, &ch, opts); err != nil {
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

	if rel.Prune != nil {
		pruned, err := prune(ctx, rel, opts)
		if err != nil {
			return nil, err
		}
		changes = append(changes, pruned...)
	}
	changes = append(pki, changes...)
	// In the order Apply goes: phase by phase, then pruning.
	order := func(ch preview.ObjectChange) int {
		switch ch.Action {
		case preview.ActionPrune, preview.ActionKeep, preview.ActionHandOver:
			return math.MaxInt
		}
		return opts.Phase(ch.Kind)
	}
	sort.SliceStable(changes, func(i, j int) bool { return order(changes[i]) < order(changes[j]) })
	return changes, nil
}

// prune previews what pruning the release finds: each object once, kept,
// handed over (as the receiver will have it: --diff shows the change of
// label and of anything it declares differently) or deleted.
func prune(ctx context.Context, rel Release, opts Options) ([]preview.ObjectChange, error) {
	found, err := rel.Prune(ctx)
	if err != nil {
		return nil, err
	}
	var changes []preview.ObjectChange
	seen := map[Key]bool{}
	for _, p := range found {
		if seen[p.Key] {
			continue
		}
		seen[p.Key] = true
		ch := preview.ObjectChange{Action: preview.ActionPrune, Kind: p.Key.GroupKind, Namespace: p.Key.Namespace, Name: p.Key.Name}
		switch {
		case p.Keep != "":
			ch.Action, ch.Note = preview.ActionKeep, p.Keep
			changes = append(changes, ch)
			continue
		case p.HandOver != nil:
			if err := dryRun(ctx, p.HandOver, &ch, opts); err != nil {
				return nil, err
			}
			ch.Action, ch.Note = preview.ActionHandOver, "to addon "+p.HandOverTo
			changes = append(changes, ch)
			continue
		}
		live, err := resourceFor(opts.Dynamic, p.Resource, p.Key.Namespace).Get(ctx, p.Key.Name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("reading %s: %w", ch, err)
		}
		if err == nil {
			ch.Live = preview.Comparable(live)
		}
		changes = append(changes, ch)
	}
	return changes, nil
}

// dryRun reads the live object and dry-runs the apply of t, and sets the
// change's action from the difference.
func dryRun(ctx context.Context, t *Target, ch *preview.ObjectChange, opts Options) error {
	key := preview.ObjectChange{Kind: t.Key.GroupKind, Namespace: t.Key.Namespace, Name: t.Key.Name}
	ri := resourceFor(opts.Dynamic, t.Resource, t.Key.Namespace)
	live, err := ri.Get(ctx, t.Key.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		live = nil
	case err != nil:
		return fmt.Errorf("reading %s: %w", key, err)
	}
	merged, err := ri.Apply(ctx, t.Key.Name, t.Object, metav1.ApplyOptions{FieldManager: opts.FieldManager, Force: true, DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		return fmt.Errorf("applying %s (dry run): %w", key, err)
	}
	if ch.Takeovers, err = opts.Settle(live, merged); err != nil {
		return err
	}
	ch.Merged = preview.Comparable(merged)
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
	kube   kubernetes.Interface
	mu     sync.Mutex
	exists map[string]bool
}

func (nc *namespaceCache) has(ctx context.Context, name string) (bool, error) {
	nc.mu.Lock()
	defer nc.mu.Unlock()
	if e, ok := nc.exists[name]; ok {
		return e, nil
	}
	_, err := nc.kube.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
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

// previewPKI lists the PKI objects needsPKI would create for an addon, and
// fails as Apply would when cert-manager's Issuer is not served and no
// addon of the plan (definer) defines it.
func previewPKI(ctx context.Context, p *PKI, definer string, opts Options) ([]preview.ObjectChange, error) {
	changes := []preview.ObjectChange{
		{Kind: schema.GroupKind{Kind: "Secret"}, Namespace: p.Namespace, Name: p.Secret},
		{Kind: p.IssuerKind, Namespace: p.Namespace, Name: p.Issuer},
	}
	issuer, err := p.IssuerResource(ctx)
	if err != nil && definer != "" {
		for i := range changes {
			changes[i].Action, changes[i].Note = preview.ActionCreate, "needsPKI; addon "+definer+" defines the Issuer kind"
		}
		return changes, nil
	}
	if err != nil {
		return nil, err
	}
	resources := []schema.GroupVersionResource{corev1.SchemeGroupVersion.WithResource("secrets"), issuer}
	for i := range changes {
		_, err := resourceFor(opts.Dynamic, resources[i], p.Namespace).Get(ctx, changes[i].Name, metav1.GetOptions{})
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
