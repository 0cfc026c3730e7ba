// Package release writes a publishable KOS release: the repository's channel
// files and the manifests of the releases they list, with the KOS images
// (kos.example.com/NAME:TAG) renamed to an operator's registry, pinned by
// digest where known, operator settings (replica counts, etcd's volumes)
// applied, and every manifestHash recomputed for the manifests as written.
//
// The tree keeps the repository's layout (bootstrap-channel.yaml at its
// root, manifests under addons/), so that the channel's relative manifest
// locations resolve wherever the tree is copied: a web server, an S3 bucket,
// a kOps state store. The repository's own files stay the canonical source
// and are never changed.
package release

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/blang/semver/v4"

	"github.com/kos-sdn/kos/channels"
	"github.com/kos-sdn/kos/tools/addons/bundle"
)

// Options say what to write.
type Options struct {
	// Root is the repository root, whose addons/ and channel files are
	// read.
	Root string
	// Out is the folder the tree is written into; it is created when
	// missing, and files of the same names are replaced.
	Out string
	// Registry replaces kos.example.com in every image name:
	// "HOST[:PORT][/PREFIX]", as the images were pushed (kosimages --push).
	Registry string
	// Version is the newest addon version the tree carries: releases of
	// newer versions are left out. "" means the newest of every release.
	Version string
	// Digests pin images: for an image as the manifests name it
	// (kos.example.com/NAME:TAG), the reference to write instead, such as
	// REGISTRY/NAME:TAG@sha256:... (what catalog.Push returns).
	Digests map[string]string
	// Resolve asks Registry for the digest of every image Digests does not
	// pin; an image the registry does not have keeps its tag (and is
	// listed in Result.Unpinned).
	Resolve bool
	// Insecure allows plain http to Registry when resolving, beyond the
	// loopback and private addresses for which it is always allowed.
	Insecure bool
	// Settings change the manifests of the addons they name.
	Settings []Setting
	// Channels are the channel files to publish; nil means bundle.Channels.
	Channels []bundle.Channel
	// Flavour, when set, names the bundle.Flavour to publish: its channels
	// (made from Channels) in place of Channels, so that the releases of
	// each addon for that kind of cluster are in one file
	// (bootstrap-channel.yaml) and kOps's channels applies one file.
	Flavour string
}

// Result says what Write wrote.
type Result struct {
	// Files are the files written, relative to Out, sorted.
	Files []string
	// Images maps each image the manifests name to what the tree names
	// instead.
	Images map[string]string
	// Unpinned are the images written by tag only: neither Digests nor
	// the registry gave their digest.
	Unpinned []string
}

// Write writes the release tree into opts.Out and checks it: every channel
// it wrote loads with channels.Load and every manifest has its hash.
func Write(ctx context.Context, opts Options) (*Result, error) {
	if err := validate(&opts); err != nil {
		return nil, fmt.Errorf("writing a release: %w", err)
	}
	b, err := bundle.Load(ctx, opts.Root, opts.Channels)
	if err != nil {
		return nil, err
	}
	version, err := pickVersion(b, opts.Version)
	if err != nil {
		return nil, err
	}

	// The releases the tree carries, each manifest once: a manifest file
	// may serve several releases.
	var carried []*channels.Addon
	manifests := map[string][]*channels.Addon{}
	for _, ch := range opts.Channels {
		for _, name := range ch.Folders {
			f := b.Folder(name)
			if f == nil {
				return nil, fmt.Errorf("%s lists the addon folder %s, which does not exist", ch.Path, name)
			}
			if f.LoadErr != nil {
				return nil, fmt.Errorf("%s does not load: %w", f.Index, f.LoadErr)
			}
			var kept []*channels.Addon
			for _, a := range f.Releases {
				if a.Version != nil && a.Version.GT(version) {
					continue
				}
				kept = append(kept, a)
				if _, seen := manifests[a.Manifest]; !seen {
					carried = append(carried, a)
				}
				manifests[a.Manifest] = append(manifests[a.Manifest], a)
			}
			f.Releases = kept
		}
	}
	if err := checkSettings(opts.Settings, carried); err != nil {
		return nil, err
	}

	images := newImageNamer(opts)
	applied := map[Setting]bool{}
	result := &Result{Images: map[string]string{}}
	fetcher := channels.NewFetcher()
	for _, a := range carried {
		// Fetching verifies the repository's hash: a release is copied
		// only as it was released.
		data, err := fetcher.FetchManifest(ctx, a)
		if err != nil {
			return nil, err
		}
		rel := b.Rel(a.Manifest)
		data, did, err := applySettings(data, a.Name, opts.Settings)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", rel, err)
		}
		for _, s := range did {
			applied[s] = true
		}
		if data, err = images.rewrite(ctx, data); err != nil {
			return nil, fmt.Errorf("%s: %w", rel, err)
		}
		if err := writeFile(opts.Out, rel, data); err != nil {
			return nil, err
		}
		result.Files = append(result.Files, rel)
		hash := channels.HashManifest(data)
		for _, r := range manifests[a.Manifest] {
			r.ManifestHash = hash
		}
	}
	var unapplied []error
	for _, s := range opts.Settings {
		if !applied[s] {
			unapplied = append(unapplied, fmt.Errorf("setting %s: no release of %s has what it sets", s, s.Addon))
		}
	}
	if err := errors.Join(unapplied...); err != nil {
		return nil, err
	}
	for _, ch := range opts.Channels {
		ch.Comment, ch.Note = channelComment(ch, version.String(), opts.Registry, opts.Flavour)
		data, err := b.Render(ch)
		if err != nil {
			return nil, err
		}
		if err := writeFile(opts.Out, ch.Path, data); err != nil {
			return nil, err
		}
		result.Files = append(result.Files, ch.Path)
	}
	slices.Sort(result.Files)
	result.Images, result.Unpinned = images.written, images.unpinned()

	if err := check(ctx, opts); err != nil {
		return nil, fmt.Errorf("checking the release written to %s: %w", opts.Out, err)
	}
	return result, nil
}

// validate checks opts and fills in defaults.
func validate(opts *Options) error {
	var errs []error
	if opts.Root == "" {
		errs = append(errs, errors.New("no repository root"))
	}
	if opts.Out == "" {
		errs = append(errs, errors.New("no output folder"))
	}
	if err := checkRegistry(opts.Registry); err != nil {
		errs = append(errs, err)
	}
	if opts.Version != "" {
		if _, err := semver.Parse(opts.Version); err != nil {
			errs = append(errs, fmt.Errorf("version %q: %w", opts.Version, err))
		}
	}
	if opts.Channels == nil {
		opts.Channels = bundle.Channels
	}
	if opts.Flavour != "" {
		if f := bundle.FlavourNamed(opts.Flavour); f != nil {
			opts.Channels = f.Channels(opts.Channels)
		} else {
			var names []string
			for _, f := range bundle.Flavours {
				names = append(names, f.Name)
			}
			errs = append(errs, fmt.Errorf("no flavour %q (flavours: %s)", opts.Flavour, strings.Join(names, ", ")))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	var err error
	if opts.Root, err = filepath.Abs(opts.Root); err != nil {
		return err
	}
	if opts.Out, err = filepath.Abs(opts.Out); err != nil {
		return err
	}
	if opts.Out == opts.Root || strings.HasPrefix(opts.Root, opts.Out+string(filepath.Separator)) {
		return fmt.Errorf("output folder %s holds the repository: write the release elsewhere", opts.Out)
	}
	return nil
}

// pickVersion returns the newest version the tree carries: want, which some
// release must have, or the newest of all releases.
func pickVersion(b *bundle.Bundle, want string) (semver.Version, error) {
	var newest *semver.Version
	var all []string
	for _, f := range b.Folders {
		for _, a := range f.Releases {
			if a.Version == nil {
				continue
			}
			if want != "" && a.Version.String() == want {
				return *a.Version, nil
			}
			if newest == nil || a.Version.GT(*newest) {
				newest = a.Version
			}
			if !slices.Contains(all, a.Version.String()) {
				all = append(all, a.Version.String())
			}
		}
	}
	if want != "" {
		return semver.Version{}, fmt.Errorf("no addon has a release of version %s (versions: %s)", want, strings.Join(all, ", "))
	}
	if newest == nil {
		return semver.Version{}, errors.New("no release has a version")
	}
	return *newest, nil
}

// channelComment heads a published channel: what it is, and that it is not
// the repository's.
func channelComment(ch bundle.Channel, version, registry, flavour string) ([]string, string) {
	what := "KOS " + version
	if flavour != "" {
		what += " (flavour " + flavour + ")"
	}
	comment := []string{
		what + ", published with the images in " + registry + ". Install or",
		"upgrade KOS with",
		"  channels apply channel <this file's https://, s3:// or file:// location> --yes",
		"The manifests are the repository's, with the images renamed (and pinned by",
		"digest) and the operator's settings applied, so their hashes differ from the",
		"repository's " + ch.Path + ".",
	}
	return comment, "Written by `make release` (go run ./tools/addons release); do not edit."
}

// writeFile writes data to out/rel.
func writeFile(out, rel string, data []byte) error {
	path := filepath.Join(out, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("creating the folder of %s: %w", rel, err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", rel, err)
	}
	return nil
}

// check loads every channel written, as channels would, and fetches every
// manifest it lists, which verifies its hash; then it lints the channels
// as clusters apply them (bundle.Lint): a release that time-bombs or whose
// variants are split is not published.
func check(ctx context.Context, opts Options) error {
	fetcher := channels.NewFetcher()
	for _, ch := range opts.Channels {
		releases, err := channels.Load(ctx, fetcher, filepath.Join(opts.Out, filepath.FromSlash(ch.Path)))
		if err != nil {
			return err
		}
		for _, a := range releases {
			if _, err := fetcher.FetchManifest(ctx, a); err != nil {
				return err
			}
		}
	}
	problems, err := bundle.Lint(ctx, opts.Out, opts.Channels)
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range problems {
		errs = append(errs, errors.New(p))
	}
	return errors.Join(errs...)
}
