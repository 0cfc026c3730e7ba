package channels

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
)

// AdoptAnnotation, set to "true" on an object of a manifest, lets the addon
// apply that object although another addon declares it differently: the
// object becomes the adopting addon's (its IdentityLabel says so), and the
// other addon may declare it too. Without it, an addon that declares an
// object another addon of the run declares differently, or that carries
// the IdentityLabel of an addon that still declares it differently (or
// whose declarations cannot be read), fails with both names and applies
// nothing; addons that declare an object alike share it (see
// sameDeclaration). An object another addon stopped declaring moves
// without it. Set on an object on the cluster (kubectl annotate), it lets
// an addon take over that object although neither channels nor kOps's
// channels made it (see madeByChannels).
const AdoptAnnotation = "channels.kos.example.com/adopt"

// adopts reports whether the manifest's object may be taken from another
// addon.
func adopts(u *unstructured.Unstructured) bool {
	return u.GetAnnotations()[AdoptAnnotation] == "true"
}

// declarations knows which objects addons declare: for one run, the addons
// of its plan (those being applied from their prepared releases, the
// up-to-date ones by reading their manifests when first asked), and every
// other addon recorded on the cluster (not in the channels, or whose
// release the run refuses) by the releases its install record and pending
// release name. The union is what prune and delete keep, and what settles
// who may apply an object.
//
// Reading a recorded release costs a fetch of its channel and manifest, so
// it is read only for an object it may hold, as the object itself says (see
// mayHold): a run that prunes nothing shared reads nothing more. An addon
// whose declarations cannot be read (its manifest did not load in this run,
// its channel is gone) is taken to declare every object it may hold.
type declarations struct {
	client  *Client
	fetcher *Fetcher
	items   map[string]PlanItem
	// defined holds the kinds the CRDs of the run's releases define.
	defined map[schema.GroupKind]bool
	// ignore names addons whose declarations do not count: those an
	// uninstall deletes.
	ignore map[string]bool

	// mu guards everything below; lookups may run from prune's workers.
	mu      sync.Mutex
	byAddon map[string]*declared
	// installed holds every install record and pending release, read once
	// when first needed.
	installed     []Installed
	installedRead bool
	installedErr  error
	// channels holds the channels read for recorded releases, by location.
	channels map[string]loadedChannel
}

// loadedChannel is a channel read for a recorded release, or why not.
type loadedChannel struct {
	releases []*Addon
	err      error
}

// declared is what one addon's release declares.
type declared struct {
	// keys maps every object to its target; the target is nil for objects
	// of kinds the run's CRDs define (not mapped before those exist).
	keys  map[ObjectKey]*target
	adopt map[ObjectKey]bool
	// objs holds every object as the addon declares it, for telling
	// identical declarations from differing ones.
	objs map[ObjectKey]*unstructured.Unstructured
	// selector holds the keys of the addon's selector, which differ
	// between addons that declare one object identically.
	selector map[string]bool
	// err says why the declarations are unknown; keys is then nil.
	err error
}

func newDeclarations(c *Client, f *Fetcher, plan *Plan, defined map[schema.GroupKind]bool) *declarations {
	d := &declarations{client: c, fetcher: f, items: map[string]PlanItem{}, defined: defined, byAddon: map[string]*declared{}, channels: map[string]loadedChannel{}}
	if plan != nil {
		for _, it := range plan.Items {
			d.items[it.Addon.Name] = it
		}
	}
	return d
}

// newDeclared is what a release declares, from its objects and their targets.
func newDeclared(a *Addon, rel *release, objs []*unstructured.Unstructured) *declared {
	dc := &declared{
		keys:     make(map[ObjectKey]*target, len(objs)),
		adopt:    map[ObjectKey]bool{},
		objs:     make(map[ObjectKey]*unstructured.Unstructured, len(objs)),
		selector: map[string]bool{},
	}
	for k := range a.Selector {
		dc.selector[k] = true
	}
	for _, u := range objs {
		key := keyOf(u)
		if rel != nil {
			dc.keys[key] = rel.ready[u]
		} else {
			dc.keys[key] = nil
		}
		dc.objs[key] = u
		if adopts(u) {
			dc.adopt[key] = true
		}
	}
	return dc
}

// union merges the declarations of two releases of one addon (its record's
// and its pending release's); b's target wins.
func (dc *declared) union(b *declared) *declared {
	if dc == nil {
		return b
	}
	for k, t := range b.keys {
		dc.keys[k] = t
		dc.objs[k] = b.objs[k]
		dc.adopt[k] = dc.adopt[k] || b.adopt[k]
	}
	for k := range b.selector {
		dc.selector[k] = true
	}
	return dc
}

// set records the release an addon of the run applies, or why it cannot.
// A release whose manifest loaded but did not map (rel nil) still declares
// its objects, unmapped; one whose manifest did not load (objs nil)
// declares what is unknown.
func (d *declarations) set(a *Addon, rel *release, objs []*unstructured.Unstructured, err error) {
	dc := &declared{err: err}
	if err == nil || objs != nil {
		dc = newDeclared(a, rel, objs)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.byAddon[a.Name] = dc
}

// fromRun reports whether what an addon declares comes from the run: it is
// in the plan, and to be applied or up to date. Any other addon declares
// what its install record and pending release name.
func (d *declarations) fromRun(addon string) bool {
	it, ok := d.items[addon]
	return ok && (it.Decision.Apply || it.Decision.Reason == ReasonUpToDate)
}

// of returns what an addon declares. An addon of the plan that is up to
// date, or to apply and not set by the run (a preview), has its manifest
// read the first time; any other addon has the releases its install record
// and pending release name read (see recordedLocked).
func (d *declarations) of(ctx context.Context, addon string) *declared {
	d.mu.Lock()
	defer d.mu.Unlock()
	if dc, ok := d.byAddon[addon]; ok {
		return dc
	}
	var dc *declared
	if d.fromRun(addon) {
		a := d.items[addon].Addon
		dc = d.readRelease(ctx, a)
		if dc.err != nil {
			dc.err = fmt.Errorf("reading its manifest: %w", dc.err)
		}
	} else {
		dc = d.recordedLocked(ctx, addon)
	}
	d.byAddon[addon] = dc
	return dc
}

// readRelease fetches, verifies, decodes and maps the manifest of a
// release.
func (d *declarations) readRelease(ctx context.Context, a *Addon) *declared {
	objs, err := releaseObjects(ctx, d.fetcher, a)
	var rel *release
	if err == nil {
		w := &addonWriter{client: d.client, parallelism: defaultParallelism, defined: d.defined}
		rel, err = w.prepare(ctx, objs)
	}
	if err != nil {
		return &declared{err: err}
	}
	return newDeclared(a, rel, objs)
}

// recordedLocked reads what an addon outside the run declares: the union of
// the releases its install record and its pending release name, each found
// in the channel the record names (read once per run) by name, id, version
// and manifest hash, and its manifest verified as for applying.
func (d *declarations) recordedLocked(ctx context.Context, addon string) *declared {
	installed, err := d.readInstalledLocked(ctx)
	if err != nil {
		return &declared{err: err}
	}
	type named struct{ channel, id, version, hash string }
	var releases []named
	for _, in := range installed {
		if in.Name != addon {
			continue
		}
		if in.Invalid != "" {
			return &declared{err: errors.New("its install record does not parse")}
		}
		if r := in.Record; r != nil {
			releases = append(releases, named{r.Channel, r.ID, r.Version, r.ManifestHash})
		}
		if p := in.Pending; p.namesRelease() {
			if n := (named{p.Channel, p.ID, p.Version, p.ManifestHash}); !slices.Contains(releases, n) {
				releases = append(releases, n)
			}
		} else if p != nil {
			return &declared{err: errors.New("its pending release names no release")}
		}
	}
	if len(releases) == 0 {
		return &declared{err: errors.New("it has no install record")}
	}
	var dc *declared
	for _, r := range releases {
		a, err := d.findLocked(ctx, addon, r.channel, r.id, r.version, r.hash)
		if err != nil {
			return &declared{err: err}
		}
		got := d.readRelease(ctx, a)
		if got.err != nil {
			return &declared{err: fmt.Errorf("reading its installed release: %w", got.err)}
		}
		dc = dc.union(got)
	}
	return dc
}

// findLocked finds a recorded release in its channel.
func (d *declarations) findLocked(ctx context.Context, addon, channel, id, version, hash string) (*Addon, error) {
	if channel == "" {
		return nil, errors.New("its install record names no channel")
	}
	lc, ok := d.channels[channel]
	if !ok {
		lc.releases, lc.err = Load(ctx, d.fetcher, channel)
		d.channels[channel] = lc
	}
	if lc.err != nil {
		return nil, fmt.Errorf("reading the channel of its installed release: %w", lc.err)
	}
	for _, a := range lc.releases {
		// kOps's records hold no version.
		if a.Name == addon && a.ID == id && (version == "" || a.VersionString() == version) && strings.EqualFold(a.ManifestHash, hash) {
			return a, nil
		}
	}
	return nil, fmt.Errorf("channel %s no longer lists its installed release %s", channel, describeRelease(version, id))
}

// mayHold reports, without reading any release, whether an addon outside
// the run may declare the object live (nil when not read): the object says
// the addon declared it when it was last applied (DeclaredByAnnotation),
// or, for an install record without an inventory (kOps's channels wrote
// it), kOps's channels applied the object. An object carries the label of
// the addon that applied it last, so no other addon outside the run
// declares it unless it shares it, which the annotation records.
func (d *declarations) mayHold(ctx context.Context, addon string, live *unstructured.Unstructured) (bool, error) {
	if live == nil {
		return true, nil
	}
	if slices.Contains(declaredBy(live), addon) {
		return true, nil
	}
	if !kopsMade(live) {
		return false, nil
	}
	installed, err := d.readInstalled(ctx)
	if err != nil {
		return false, err
	}
	for _, in := range installed {
		if in.Name == addon && (in.Invalid != "" || in.Record != nil && (in.Record.Inventory == nil || in.Record.Inventory.Identity == "")) {
			return true, nil
		}
	}
	return false, nil
}

// DeclaredByAnnotation lists, comma-separated and sorted, every addon that
// declared an object when it was last applied, when more than one did (two
// addons declaring it alike, or one adopting it from another, see
// AdoptAnnotation). The object's IdentityLabel names the one that applied
// it; the others keep it from being pruned or deleted with the first
// (it is handed over to them instead), even when they are not in the run.
// channels sets it, as DeclaredByFieldManager; it is not meant to be
// written in manifests.
const DeclaredByAnnotation = "channels.kos.example.com/declared-by"

// declaredBy reads an object's DeclaredByAnnotation.
func declaredBy(u *unstructured.Unstructured) []string {
	v := u.GetAnnotations()[DeclaredByAnnotation]
	if v == "" {
		return nil
	}
	return strings.Split(v, ",")
}

// declaredByValues returns the DeclaredByAnnotation of each object of a
// release that other addons declare too (others, by key).
func declaredByValues(self string, others map[ObjectKey]map[string]bool) map[ObjectKey]string {
	out := map[ObjectKey]string{}
	for key, by := range others {
		if len(by) == 0 {
			continue
		}
		names := map[string]bool{self: true}
		for n := range by {
			names[n] = true
		}
		out[key] = strings.Join(sortedStrings(names), ",")
	}
	return out
}

// DeclaredByFieldManager is the field manager that writes
// DeclaredByAnnotation, apart from the applier (FieldManager): an apply of
// a manifest, which never holds the annotation, leaves it alone, and drift
// checks do not see it as a change.
const DeclaredByFieldManager = "channels-declared-by"

// syncDeclaredBy sets an applied object's DeclaredByAnnotation to want, or
// removes it when want is empty, when it differs from out (the object as
// applied).
func (w *addonWriter) syncDeclaredBy(ctx context.Context, t *target, out *unstructured.Unstructured, want string) error {
	if out == nil || out.GetAnnotations()[DeclaredByAnnotation] == want {
		return nil
	}
	obj := &unstructured.Unstructured{}
	obj.SetAPIVersion(t.obj.GetAPIVersion())
	obj.SetKind(t.obj.GetKind())
	obj.SetName(t.key.Name)
	obj.SetNamespace(t.key.Namespace)
	if want != "" {
		obj.SetAnnotations(map[string]string{DeclaredByAnnotation: want})
	}
	_, err := resourceFor(w.client.Dynamic, t.mapping.Resource, t.key.Namespace).Apply(ctx, t.key.Name, obj, metav1.ApplyOptions{FieldManager: DeclaredByFieldManager, Force: true})
	if err != nil {
		return fmt.Errorf("recording who declares %s: %w", t.key, err)
	}
	return nil
}

// coDeclarers returns, for each addon of a run, the objects other addons
// of the run declare too (Namespaces left out), with their names.
func coDeclarers(ros []*rollout) map[*rollout]map[ObjectKey]map[string]bool {
	claims := map[ObjectKey][]*rollout{}
	for _, ro := range ros {
		for _, u := range ro.objs {
			if key := keyOf(u); !key.IsNamespace() {
				claims[key] = append(claims[key], ro)
			}
		}
	}
	out := map[*rollout]map[ObjectKey]map[string]bool{}
	for key, by := range claims {
		for _, ro := range by {
			for _, o := range by {
				if o == ro {
					continue
				}
				if out[ro] == nil {
					out[ro] = map[ObjectKey]map[string]bool{}
				}
				if out[ro][key] == nil {
					out[ro][key] = map[string]bool{}
				}
				out[ro][key][o.item.Addon.Name] = true
			}
		}
	}
	return out
}

// kopsMade reports whether kOps's channels applied an object: it carries
// the labels kOps stamps on its addons' objects, or fields of its field
// manager.
func kopsMade(u *unstructured.Unstructured) bool {
	l := u.GetLabels()
	if _, ok := l[kopsAddonLabel]; ok || l[managedByLabel] == "kops" {
		return true
	}
	for _, e := range u.GetManagedFields() {
		if e.Manager == kopsFieldManager {
			return true
		}
	}
	return false
}

// The labels kOps gives its addons' objects, and the field manager its
// channels applies with.
const (
	kopsAddonLabel   = "addon.kops.k8s.io/name"
	managedByLabel   = "app.kubernetes.io/managed-by"
	kopsFieldManager = "kops"
)

// candidates names the addons other than self, and not ignored, whose
// declarations may hold key: every addon of the run, and the recorded ones
// outside it that mayHold the object.
func (d *declarations) candidates(ctx context.Context, key ObjectKey, self string, live *unstructured.Unstructured) ([]string, error) {
	names := map[string]bool{}
	for name := range d.items {
		names[name] = true
	}
	installed, err := d.readInstalled(ctx)
	if err != nil {
		return nil, err
	}
	for _, in := range installed {
		names[in.Name] = true
	}
	var out []string
	for _, name := range sortedStrings(names) {
		if name == self || d.ignore[name] {
			continue
		}
		if !d.fromRun(name) {
			ok, err := d.mayHold(ctx, name, live)
			if err != nil {
				return nil, err
			}
			if !ok {
				continue
			}
		}
		out = append(out, name)
	}
	return out, nil
}

// others returns the addons other than self that declare key, each with its
// target (nil when not mapped), and the addons whose declarations may hold
// it but cannot be read, each with why: an addon of the run whose manifest
// did not load, a recorded one whose release cannot be read. live is the
// object on the cluster, nil when not read.
func (d *declarations) others(ctx context.Context, key ObjectKey, self string, live *unstructured.Unstructured) (by map[string]*target, unknown []string, err error) {
	names, err := d.candidates(ctx, key, self, live)
	if err != nil {
		return nil, nil, err
	}
	by = map[string]*target{}
	for _, name := range names {
		dc := d.of(ctx, name)
		if dc.err != nil {
			unknown = append(unknown, fmt.Sprintf("%s (%v)", name, dc.err))
			continue
		}
		if t, ok := dc.keys[key]; ok {
			by[name] = t
		}
	}
	return by, unknown, nil
}

// readInstalled returns every install record and pending release on the
// cluster, read once per run.
func (d *declarations) readInstalled(ctx context.Context) ([]Installed, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.readInstalledLocked(ctx)
}

func (d *declarations) readInstalledLocked(ctx context.Context) ([]Installed, error) {
	if !d.installedRead {
		d.installed, d.installedErr = d.client.Installed(ctx)
		d.installedRead = true
	}
	return d.installed, d.installedErr
}

// recorded reports whether an addon has an install record or a pending
// release on the cluster.
func (d *declarations) recorded(ctx context.Context, addon string) (bool, error) {
	installed, err := d.readInstalled(ctx)
	if err != nil {
		return false, err
	}
	for _, in := range installed {
		if in.Name == addon {
			return true, nil
		}
	}
	return false, nil
}

// sameDeclaration reports whether two addons declare an object alike: equal
// but for the labels that name the addon (IdentityLabel, kOps's
// addon.kops.k8s.io/name, and the keys of either addon's selector, given as
// ignore) and AdoptAnnotation. kOps ships such objects in two addons (its
// scaleway-secret); they are one object with two declarers.
func sameDeclaration(a, b *unstructured.Unstructured, ignore map[string]bool) bool {
	return reflect.DeepEqual(declaredContent(a, ignore), declaredContent(b, ignore))
}

func declaredContent(u *unstructured.Unstructured, ignore map[string]bool) map[string]any {
	c := u.DeepCopy()
	l := c.GetLabels()
	for k := range l {
		if k == IdentityLabel || k == kopsAddonLabel || ignore[k] {
			delete(l, k)
		}
	}
	c.SetLabels(l)
	an := c.GetAnnotations()
	delete(an, AdoptAnnotation)
	c.SetAnnotations(an)
	return c.Object
}

// checkDuplicates refuses, for the addons of a run, every object two of
// them declare differently, unless an addon declares it with
// AdoptAnnotation: the error of each such addon names the others. An
// object they all declare alike (see sameDeclaration) is one object with
// several declarers, and needs no annotation. Namespaces are left out:
// every addon declares the namespaces it uses, as kOps's channels applies
// them.
func checkDuplicates(ros []*rollout) map[string]error {
	claims := map[ObjectKey][]*rollout{}
	objs := map[*rollout]map[ObjectKey]*unstructured.Unstructured{}
	for _, ro := range ros {
		objs[ro] = map[ObjectKey]*unstructured.Unstructured{}
		for _, u := range ro.objs {
			if key := keyOf(u); !key.IsNamespace() {
				claims[key] = append(claims[key], ro)
				objs[ro][key] = u
			}
		}
	}
	errs := map[string][]error{}
	for key, by := range claims {
		if len(by) < 2 {
			continue
		}
		ignore := map[string]bool{}
		for _, ro := range by {
			for k := range ro.item.Addon.Selector {
				ignore[k] = true
			}
		}
		alike := true
		for _, ro := range by[1:] {
			alike = alike && sameDeclaration(objs[by[0]][key], objs[ro][key], ignore)
		}
		if alike {
			continue
		}
		for _, ro := range by {
			if ro.adopt[key] {
				continue
			}
			var others []string
			for _, o := range by {
				if o != ro {
					others = append(others, fmt.Sprintf("%q", o.item.Addon.Name))
				}
			}
			errs[ro.item.Addon.Name] = append(errs[ro.item.Addon.Name], fmt.Errorf("%s is declared differently by addon %q and by addon %s: declare it alike in each, set annotation %s: \"true\" on it in the manifest of each addon that is to take it over, or drop it from all but one",
				key, ro.item.Addon.Name, strings.Join(others, ", "), AdoptAnnotation))
		}
	}
	out := map[string]error{}
	for name, es := range errs {
		sort.Slice(es, func(i, j int) bool { return es[i].Error() < es[j].Error() })
		out[name] = errors.Join(es...)
	}
	return out
}

// checkOwnership refuses the objects of a release that exist and are not
// free to take:
//
//   - an object carrying the IdentityLabel of another addon that still
//     declares it differently (an addon declaring it alike shares it), or
//     whose declarations cannot be read while it is installed, unless the
//     manifest adopts it (AdoptAnnotation). An owner's declarations are
//     those of the run or, for an addon outside it, those of the releases
//     its install record and pending release name (see declarations); an
//     object of an addon that has neither is a leftover, free to take;
//   - a foreign object, which neither channels nor kOps's channels made
//     (see madeByChannels), unless the manifest or the object itself
//     carries AdoptAnnotation or the run adopts foreign objects
//     (ApplyOptions.Adopt).
//
// It lists the metadata of the objects of every kind and namespace the
// release applies to, once each and all at once, by a selector that leaves
// out the objects labelled as this addon's; Namespaces, which every addon
// declares, are left out, and so are the
// kinds the run's CRDs define (none of their objects can be found before
// those apply) and objects to create only (an existing one is left as it
// is).
func (w *addonWriter) checkOwnership(ctx context.Context, ro *rollout, r *reporter) error {
	_, shared, errs, err := w.ownership(ctx, ro, r)
	if err != nil {
		return err
	}
	if ro.shared == nil {
		ro.shared = map[ObjectKey]map[string]bool{}
	}
	for key, by := range shared {
		for name := range by {
			if ro.shared[key] == nil {
				ro.shared[key] = map[string]bool{}
			}
			ro.shared[key][name] = true
		}
	}
	sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
	return errors.Join(errs...)
}

// ownership does checkOwnership's work, returning also the objects the
// release adopts, each with whom from (refused or not), the addons outside
// the run that declare an object too (alike, or adopted from them), and
// each refusal.
func (w *addonWriter) ownership(ctx context.Context, ro *rollout, r *reporter) (adopted map[ObjectKey]string, shared map[ObjectKey]map[string]bool, refused []error, err error) {
	a := ro.item.Addon
	type where struct {
		mapping   *meta.RESTMapping
		namespace string
	}
	seen := map[string]bool{}
	var lists []where
	for _, t := range ro.rel.ready {
		if t.key.IsNamespace() {
			continue
		}
		id := t.mapping.Resource.String() + "/" + t.key.Namespace
		if !seen[id] {
			seen[id] = true
			lists = append(lists, where{mapping: t.mapping, namespace: t.key.Namespace})
		}
	}
	sort.Slice(lists, func(i, j int) bool {
		if gi, gj := lists[i].mapping.Resource.String(), lists[j].mapping.Resource.String(); gi != gj {
			return gi < gj
		}
		return lists[i].namespace < lists[j].namespace
	})
	// One list per kind and namespace, of metadata alone, run at once:
	// every object that does not carry this addon's IdentityLabel (a
	// selector key!=value also selects the objects without the key).
	found := make([][]*unstructured.Unstructured, len(lists))
	err = w.each(ctx, len(lists), func(ctx context.Context, i int) error {
		wh := lists[i]
		opts := metav1.ListOptions{LabelSelector: IdentityLabel + "!=" + a.Name}
		err := w.client.listMetadata(ctx, wh.mapping, wh.namespace, opts, func(u *unstructured.Unstructured) {
			found[i] = append(found[i], u)
		})
		if err != nil && !meta.IsNoMatchError(err) {
			return fmt.Errorf("listing %s to check who owns it: %w", wh.mapping.GroupVersionKind.GroupKind(), err)
		}
		return nil
	})
	if err != nil {
		return nil, nil, nil, err
	}
	once := map[ObjectKey]bool{}
	for _, u := range ro.objs {
		if CreateOnly(u) {
			once[keyOf(u)] = true
		}
	}
	adopted = map[ObjectKey]string{}
	shared = map[ObjectKey]map[string]bool{}
	share := func(key ObjectKey, owner string) {
		if w.decl.fromRun(owner) {
			return // the run's own sharing is coDeclarers'
		}
		if shared[key] == nil {
			shared[key] = map[string]bool{}
		}
		shared[key][owner] = true
	}
	for i, wh := range lists {
		gk := wh.mapping.GroupVersionKind.GroupKind()
		for _, u := range found[i] {
			key := ObjectKey{GroupKind: gk, Namespace: u.GetNamespace(), Name: u.GetName()}
			if _, ok := ro.rel.done.keep[key]; !ok || u.GetDeletionTimestamp() != nil || once[key] {
				continue
			}
			owner, labeled := u.GetLabels()[IdentityLabel]
			if !labeled {
				if madeByChannels(u, a.Selector) {
					continue
				}
				adopted[key] = "neither channels nor kOps made it"
				switch {
				case ro.adopt[key], adopts(u):
					r.report(EventNote, a.Name, "Adopting %s, which neither channels nor kOps made: it is annotated %s", key, AdoptAnnotation)
				case w.adoptForeign:
					r.report(EventNote, a.Name, "Adopting %s, which neither channels nor kOps made (adopt asked)", key)
				default:
					refused = append(refused, fmt.Errorf("%s exists and neither channels nor kOps's channels made it (fields of %s): annotate it %s=true (kubectl annotate), or adopt with --adopt, to let addon %q take it over",
						key, foreignManagers(u), AdoptAnnotation, a.Name))
				}
				continue
			}
			why, declares, err := w.owns(ctx, owner, key, ro)
			if err != nil {
				return nil, nil, nil, err
			}
			if declares {
				share(key, owner)
			}
			if ro.adopt[key] {
				adopted[key] = fmt.Sprintf("from addon %s", owner)
				r.report(EventNote, a.Name, "Adopting %s from addon %q", key, owner)
				continue
			}
			if why != "" {
				refused = append(refused, fmt.Errorf("%s belongs to addon %q, which %s; addon %q declares it too: set annotation %s: \"true\" on it in this addon's manifest to take it over",
					key, owner, why, a.Name, AdoptAnnotation))
			}
		}
	}
	return adopted, shared, refused, nil
}

// madeByChannels reports whether an object without IdentityLabel was made
// by channels (an older release of this tool, which stamped the addon's
// selector alone, or one that applied it as FieldManager) or by kOps's
// channels (see kopsMade).
func madeByChannels(u *unstructured.Unstructured, selector map[string]string) bool {
	if kopsMade(u) {
		return true
	}
	for _, e := range u.GetManagedFields() {
		if e.Manager == FieldManager {
			return true
		}
	}
	if len(selector) == 0 {
		return false
	}
	l := u.GetLabels()
	for k, v := range selector {
		if got, ok := l[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// foreignManagers names the field managers of an object, for the message
// that refuses to adopt it.
func foreignManagers(u *unstructured.Unstructured) string {
	set := map[string]bool{}
	for _, e := range u.GetManagedFields() {
		set[e.Manager] = true
	}
	if len(set) == 0 {
		return "no manager"
	}
	return strings.Join(sortedStrings(set), ", ")
}

// owns says why owner still owns key ("declares it differently", "may
// still declare it (...)"), or "" when it has let go of it or declares it
// alike (the object then has both as declarers), and whether owner
// declares it.
func (w *addonWriter) owns(ctx context.Context, owner string, key ObjectKey, ro *rollout) (string, bool, error) {
	dc := w.decl.of(ctx, owner)
	if dc.err == nil {
		theirs, ok := dc.objs[key]
		if !ok {
			return "", false, nil
		}
		ignore := maps.Clone(dc.selector)
		for k := range ro.item.Addon.Selector {
			ignore[k] = true
		}
		for _, u := range ro.objs {
			if keyOf(u) == key && sameDeclaration(u, theirs, ignore) {
				return "", true, nil
			}
		}
		return "declares it differently", true, nil
	}
	recorded, err := w.decl.recorded(ctx, owner)
	if err != nil {
		return "", false, err
	}
	if recorded || w.decl.fromRun(owner) {
		return "may still declare it (what it declares is unknown: " + dc.err.Error() + ")", true, nil
	}
	return "", false, nil
}

// definitionUsers names the addons other than self whose install records
// or pending releases use a Namespace (they hold objects or install
// records in it) or a CRD (they hold objects of the kind it defines, kind):
// those are never deleted, by prune or by delete.
func definitionUsers(installed []Installed, self string, key ObjectKey, kind schema.GroupKind) []string {
	var out []string
	for _, in := range installed {
		if in.Name == self {
			continue
		}
		var invs []*Inventory
		if in.Record != nil && in.Record.Inventory != nil {
			invs = append(invs, in.Record.Inventory)
		}
		if in.Pending != nil {
			invs = append(invs, &in.Pending.Inventory)
		}
		uses := false
		switch {
		case key.IsNamespace():
			uses = in.Namespace == key.Name
			for _, inv := range invs {
				for _, ns := range inv.Namespaces {
					uses = uses || ns == key.Name
				}
			}
		case key.GroupKind == crdKind && !kind.Empty():
			for _, inv := range invs {
				for _, k := range inv.Kinds {
					uses = uses || schema.ParseGroupKind(k) == kind
				}
			}
		}
		if uses {
			out = append(out, in.Name)
		}
	}
	sort.Strings(out)
	return out
}

// definedKindOf returns the kind a CRD defines; empty for other objects.
func definedKindOf(u *unstructured.Unstructured) schema.GroupKind {
	if u.GroupVersionKind().GroupKind() != crdKind {
		return schema.GroupKind{}
	}
	group, _, _ := unstructured.NestedString(u.Object, "spec", "group")
	kind, _, _ := unstructured.NestedString(u.Object, "spec", "names", "kind")
	return schema.GroupKind{Group: group, Kind: kind}
}

// listMetadata lists the metadata of the objects of a mapping's kind in a
// namespace ("" for a cluster-scoped kind, or every namespace) that opts
// select, page by page, and calls fn for each, as an Unstructured holding
// its kind and metadata alone.
func (c *Client) listMetadata(ctx context.Context, mapping *meta.RESTMapping, namespace string, opts metav1.ListOptions, fn func(*unstructured.Unstructured)) error {
	var ri metadata.ResourceInterface = c.Metadata.Resource(mapping.Resource)
	if namespace != "" {
		ri = c.Metadata.Resource(mapping.Resource).Namespace(namespace)
	}
	opts.Limit = listLimit
	for {
		list, err := ri.List(ctx, opts)
		if err != nil {
			return err
		}
		for i := range list.Items {
			u, err := metadataObject(mapping.GroupVersionKind, &list.Items[i])
			if err != nil {
				return err
			}
			fn(u)
		}
		if list.Continue == "" {
			return nil
		}
		opts.Continue = list.Continue
	}
}

// metadataObject returns an object's metadata as an Unstructured of its
// kind, for the code that reads labels, annotations and managed fields of
// listed objects.
func metadataObject(gvk schema.GroupVersionKind, m *metav1.PartialObjectMetadata) (*unstructured.Unstructured, error) {
	md, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&m.ObjectMeta)
	if err != nil {
		return nil, fmt.Errorf("reading the metadata of %s %s: %w", gvk.Kind, m.Name, err)
	}
	u := &unstructured.Unstructured{Object: map[string]any{"metadata": md}}
	u.SetGroupVersionKind(gvk)
	return u, nil
}
