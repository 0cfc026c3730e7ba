package bundle

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/blang/semver/v4"

	"github.com/kos-sdn/kos/channels"
	"github.com/kos-sdn/kos/release"
)

// Base is the revision Verify holds released addons to: what was released
// there may not change.
type Base struct {
	// Name names the revision in messages, such as HEAD.
	Name string
	// Read returns the content of a file, by its path relative to the
	// repository root, at the revision; ok is false when the file did not
	// exist there.
	Read func(path string) (data []byte, ok bool, err error)
}

// Verify checks the bundle under root, whose channel files are chans, and
// returns one line per problem,
// each saying what to do; none means the bundle is consistent. With a base,
// it also checks that no release listed there changed or went away. Its
// error is for failing to check at all.
func Verify(ctx context.Context, root string, chans []Channel, base *Base) ([]string, error) {
	b, err := Load(ctx, root, chans)
	if err != nil {
		return nil, err
	}
	v := &verifier{b: b}
	for _, f := range b.Folders {
		v.folder(f)
	}
	v.addons()
	for _, ch := range chans {
		v.channel(ctx, ch)
	}
	v.alternatives()
	v.verifySource()
	if problems, err := Lint(ctx, root, chans); err != nil {
		v.problemf("%v", err)
	} else {
		v.problems = append(v.problems, problems...)
	}
	if base != nil {
		if err := v.history(base); err != nil {
			return nil, err
		}
	}
	return v.problems, nil
}

type verifier struct {
	b        *Bundle
	problems []string
}

func (v *verifier) problemf(format string, args ...any) {
	v.problems = append(v.problems, fmt.Sprintf(format, args...))
}

// folder checks one addon folder: that it loads, is in one channel, and that
// each of its releases is complete, names a manifest of the folder, and has
// the hash of that manifest.
func (v *verifier) folder(f *Folder) {
	switch in := v.b.folderChannels(f.Name); len(in) {
	case 0:
		v.problemf("%s/%s is in no channel file: add it to Channels in tools/addons/bundle/bundle.go", AddonsDir, f.Name)
	case 1:
	default:
		v.problemf("%s/%s is in %d channel files (%s): keep it in one", AddonsDir, f.Name, len(in), strings.Join(in, ", "))
	}
	if f.LoadErr != nil {
		v.problemf("%s does not load with channels: %v", f.Index, f.LoadErr)
		return
	}
	if len(f.Releases) == 0 {
		v.problemf("%s lists no release: add one or delete the folder", f.Index)
	}
	dir := v.b.Path(filepath.Join(AddonsDir, f.Name))
	named := map[string]bool{}
	for _, a := range f.Releases {
		r := describe(a)
		if a.Version == nil {
			v.problemf("%s: release %s has no version: give it one", f.Index, r)
		}
		if a.KubernetesVersion == "" {
			v.problemf("%s: release %s has no kubernetesVersion: give it the range of Kubernetes versions it was checked against", f.Index, r)
		}
		if a.ID == "" {
			v.problemf("%s: release %s has no id: give it one that names its Kubernetes range (k8s-1.29)", f.Index, r)
		}
		if len(a.Selector) == 0 {
			v.problemf("%s: release %s has no selector: give it the addon's labels (pruning finds objects by them)", f.Index, r)
		}
		if a.Inline != nil || strings.Contains(a.Manifest, "://") || filepath.Dir(a.Manifest) != dir {
			v.problemf("%s: release %s: its manifest %s is not a file of %s/%s: put the manifest there and name it by its file name", f.Index, r, a.Manifest, AddonsDir, f.Name)
			continue
		}
		named[filepath.Base(a.Manifest)] = true
		manifest := v.b.Rel(a.Manifest)
		data, err := os.ReadFile(a.Manifest)
		if err != nil {
			v.problemf("%s: release %s: its manifest %s cannot be read (%v): restore it from git", f.Index, r, manifest, err)
			continue
		}
		switch got := channels.HashManifest(data); {
		case a.ManifestHash == "":
			v.problemf("%s: release %s has no manifestHash: run make addons", f.Index, r)
		case got != a.ManifestHash:
			v.problemf("%s changed after release %s was made (its SHA-256 is %s, %s says %s): released manifests are immutable, so restore it (git checkout -- %s) and release the change as a new version; a release never published may instead lose its manifestHash line and get a new one from make addons",
				manifest, r, got, f.Index, a.ManifestHash, manifest)
		}
		v.objects(manifest, a, data)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		v.problemf("%s/%s cannot be listed: %v", AddonsDir, f.Name, err)
		return
	}
	for _, e := range entries {
		if !e.IsDir() && isManifestFile(e.Name()) && !named[e.Name()] {
			v.problemf("%s/%s/%s is the manifest of no release: list it in %s or delete it", AddonsDir, f.Name, e.Name(), f.Index)
		}
	}
}

// objects checks that a manifest decodes and that each of its objects
// carries the release's selector, so that the manifest means the same applied
// by kubectl as by channels, which stamps the selector on.
func (v *verifier) objects(manifest string, a *channels.Addon, data []byte) {
	objs, err := channels.DecodeObjects(data)
	if err != nil {
		v.problemf("%s does not decode: %v", manifest, err)
		return
	}
	if len(objs) == 0 {
		v.problemf("%s holds no object: an empty release uninstalls, so give it a prune spec or objects", manifest)
	}
	for _, u := range objs {
		if !hasSelector(u.GetLabels(), a.Selector) {
			what := u.GetKind() + " " + u.GetName()
			if ns := u.GetNamespace(); ns != "" {
				what = u.GetKind() + " " + ns + "/" + u.GetName()
			}
			v.problemf("%s: %s lacks the labels of the selector of release %s (%s): add them", manifest, what, describe(a), labelString(a.Selector))
		}
	}
}

// addons checks what must agree across every release of one addon, in
// whatever folder: the selector and the namespace of the install record.
func (v *verifier) addons() {
	type first struct {
		a     *channels.Addon
		index string
	}
	seen := map[string]first{}
	for _, f := range v.b.Folders {
		for _, a := range f.Releases {
			prev, ok := seen[a.Name]
			if !ok {
				seen[a.Name] = first{a, f.Index}
				continue
			}
			if labelString(prev.a.Selector) != labelString(a.Selector) {
				v.problemf("addon %s has the selector %s in %s but %s in %s (release %s): give every release of an addon the same selector",
					a.Name, labelString(prev.a.Selector), prev.index, labelString(a.Selector), f.Index, describe(a))
			}
			if prev.a.Namespace != a.Namespace {
				v.problemf("addon %s keeps its install record in %s per %s but in %s per %s (release %s): give every release of an addon the same namespace",
					a.Name, prev.a.Namespace, prev.index, a.Namespace, f.Index, describe(a))
			}
		}
	}
}

// channel checks one channel file: that no two of its releases compete for
// one cluster, that the file is what Render makes, and that it loads and its
// manifests resolve.
func (v *verifier) channel(ctx context.Context, ch Channel) {
	var releases []*channels.Addon
	for _, name := range ch.Folders {
		if f := v.b.Folder(name); f != nil {
			releases = append(releases, f.Releases...)
		}
	}
	for i, a := range releases {
		for _, o := range releases[:i] {
			if a.Name != o.Name || a.VersionString() != o.VersionString() {
				continue
			}
			if a.ID == o.ID {
				v.problemf("%s: releases %s and %s have the same version and id: give them distinct ids", ch.Path, describe(o), describe(a))
			} else if k, ok := commonVersion(o.KubernetesVersion, a.KubernetesVersion); ok {
				v.problemf("%s: releases %s and %s both fit Kubernetes %s: make their kubernetesVersion ranges disjoint", ch.Path, describe(o), describe(a), k)
			}
		}
	}

	want, err := v.b.Render(ch)
	if err != nil {
		v.problemf("%s cannot be made: %v", ch.Path, err)
		return
	}
	got, err := os.ReadFile(v.b.Path(ch.Path))
	if err != nil || string(got) != string(want) {
		v.problemf("%s is out of date with addons/*/addon.yaml: run make addons", ch.Path)
		return
	}
	fetcher := channels.NewFetcher()
	loaded, err := channels.Load(ctx, fetcher, v.b.Path(ch.Path))
	if err != nil {
		v.problemf("%s does not load with channels: %v", ch.Path, err)
		return
	}
	// The hashes are those of the addon.yaml files, checked above; what is
	// left is that the manifests resolve from the channel's location.
	for _, a := range loaded {
		if _, err := fetcher.Fetch(ctx, a.Manifest); err != nil {
			v.problemf("%s: release %s: %v", ch.Path, describe(a), err)
		}
	}
}

// alternatives checks that an addon whose releases several channels offer
// (the local channel's replace the bootstrap channel's) has every version in
// each: a cluster given both channels would otherwise switch to the other
// kind of release when only one channel has the newest version.
func (v *verifier) alternatives() {
	versions := map[string]map[string][]string{} // addon -> channel -> versions
	for _, ch := range v.b.Channels {
		for _, name := range ch.Folders {
			f := v.b.Folder(name)
			if f == nil {
				continue
			}
			for _, a := range f.Releases {
				if versions[a.Name] == nil {
					versions[a.Name] = map[string][]string{}
				}
				if !slices.Contains(versions[a.Name][ch.Path], a.VersionString()) {
					versions[a.Name][ch.Path] = append(versions[a.Name][ch.Path], a.VersionString())
				}
			}
		}
	}
	for _, addon := range sortedKeys(versions) {
		byChannel := versions[addon]
		if len(byChannel) < 2 {
			continue
		}
		for _, ch := range sortedKeys(byChannel) {
			for _, other := range sortedKeys(byChannel) {
				for _, ver := range byChannel[ch] {
					if !slices.Contains(byChannel[other], ver) {
						v.problemf("addon %s %s is in %s but not in %s: release that version in both, or clusters given both channels switch between their kinds of release",
							addon, ver, ch, other)
					}
				}
			}
		}
	}
}

// history checks that every release the base lists is still listed, with
// the same manifest and hash: a released manifest is immutable. Its
// kubernetesVersion range may narrow: the range says which clusters the
// channel offers the release to, not what the release is, and capping an
// old open-ended range is how a channel stops offering the old release to
// Kubernetes versions a newer release has stopped at (see channels lint).
func (v *verifier) history(base *Base) error {
	for _, f := range v.b.Folders {
		data, ok, err := base.Read(f.Index)
		if err != nil {
			return fmt.Errorf("reading %s at %s: %w", f.Index, base.Name, err)
		}
		if !ok {
			continue
		}
		// Parsed as if it were the current file, so that manifests resolve
		// to the same paths.
		released, err := channels.Parse(v.b.Path(f.Index), data)
		if err != nil {
			// A base that did not load was never a release.
			continue
		}
		for _, old := range released {
			if old.ManifestHash == "" {
				continue
			}
			if !release.Released && old.VersionString() == release.Version {
				// The version the source renders, not released yet:
				// make addons renders it again as the source changes.
				continue
			}
			cur := findRelease(f.Releases, old)
			switch {
			case f.LoadErr != nil:
				// Reported already.
			case cur == nil:
				v.problemf("%s: release %s, listed at %s, is gone: every released version stays listed; restore it (git checkout %s -- %s)",
					f.Index, describe(old), base.Name, base.Name, f.Index)
			case cur.ManifestHash != old.ManifestHash || cur.Manifest != old.Manifest:
				v.problemf("%s: release %s changed since %s (manifest %s, manifestHash %s; now %s, %s): released manifests are immutable, so restore it (git checkout %s -- %s %s) and release the change as a new version",
					f.Index, describe(old), base.Name, v.b.Rel(old.Manifest), old.ManifestHash, v.b.Rel(cur.Manifest), cur.ManifestHash,
					base.Name, f.Index, v.b.Rel(old.Manifest))
			}
		}
	}
	return nil
}

func findRelease(releases []*channels.Addon, want *channels.Addon) *channels.Addon {
	for _, a := range releases {
		if a.Name == want.Name && a.VersionString() == want.VersionString() && a.ID == want.ID {
			return a
		}
	}
	return nil
}

// commonVersion returns a Kubernetes version both ranges contain, trying
// every minor version from 1.0 to 1.99 at patch levels 0 and 99; ok is false
// when there is none. An empty range contains every version.
func commonVersion(r1, r2 string) (string, bool) {
	parse := func(r string) semver.Range {
		if r == "" {
			return func(semver.Version) bool { return true }
		}
		rng, err := semver.ParseRange(r)
		if err != nil {
			return func(semver.Version) bool { return false }
		}
		return rng
	}
	a, b := parse(r1), parse(r2)
	for minor := uint64(0); minor < 100; minor++ {
		for _, patch := range []uint64{0, 99} {
			k := semver.Version{Major: 1, Minor: minor, Patch: patch}
			if a(k) && b(k) {
				return k.String(), true
			}
		}
	}
	return "", false
}

// labelString writes labels as k=v,... in key order.
func labelString(labels map[string]string) string {
	var parts []string
	for _, k := range sortedKeys(labels) {
		parts = append(parts, k+"="+labels[k])
	}
	return strings.Join(parts, ",")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
