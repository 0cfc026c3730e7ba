package channels

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kos-sdn/kos/channels/channel"
	"github.com/kos-sdn/kos/channels/install"
)

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
func (dc *declared) Union(b *declared) *declared {
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
	return ok && (it.Decision.Apply || it.Decision.Reason == install.ReasonUpToDate)
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
		if p := in.Pending; p.NamesRelease() {
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
		dc = dc.Union(got)
	}
	return dc
}

// findLocked finds a recorded release in its channel.
func (d *declarations) findLocked(ctx context.Context, addon, location, id, version, hash string) (*Addon, error) {
	if location == "" {
		return nil, errors.New("its install record names no channel")
	}
	lc, ok := d.channels[location]
	if !ok {
		lc.releases, lc.err = Load(ctx, d.fetcher, location)
		d.channels[location] = lc
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
	return nil, fmt.Errorf("channel %s no longer lists its installed release %s", location, channel.DescribeRelease(version, id))
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
