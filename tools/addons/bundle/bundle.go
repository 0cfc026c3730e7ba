package bundle

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kos-sdn/kos/channels"
	"github.com/kos-sdn/kos/release"
)

// AddonsDir is the folder, relative to the repository root, that holds one
// folder per addon.
const AddonsDir = "addons"

// IndexFile names the channel in each addon folder that lists the addon's
// releases.
const IndexFile = "addon.yaml"

// Channel is a channel file made from addon folders.
type Channel struct {
	// Path is the file's path relative to the repository root.
	Path string
	// Name is the channel's metadata.name.
	Name string
	// Comment heads the file, one line per element.
	Comment []string
	// Note is the comment line after Comment; "" says that `make addons`
	// generates the file.
	Note string
	// Folders name the addon folders whose releases the channel lists, in
	// this order.
	Folders []string
	// With names the channel files (by Path) a cluster applies together
	// with this one; Lint checks them as one set, as well as this one
	// alone.
	With []string
}

// Channels are the channel files of the KOS bundle. Every addon folder
// belongs to exactly one of them.
var Channels = []Channel{
	{
		Path: "bootstrap-channel.yaml",
		Name: "kos",
		Comment: []string{
			"The KOS addons: install or upgrade KOS with",
			"  channels apply channel bootstrap-channel.yaml --yes",
			"(or this file's https:// or s3:// location). Every release of every addon is",
			"listed; channels picks the newest that fits the cluster's Kubernetes version.",
		},
		Folders: []string{"kos-etcd", "kos-apiserver", "kos-controller-manager", "kos-agent"},
	},
	{
		Path: "addons/local-channel.yaml",
		Name: "kos-local",
		Comment: []string{
			"Releases for a cluster with one control node whose Open vSwitch has no kernel",
			"module, such as the project's local cluster: etcd as one member on host",
			"storage, and the agent on OVS's userspace datapath. Give it before the",
			"bootstrap channel, whose releases of equal versions it replaces:",
			"  channels apply channel addons/local-channel.yaml bootstrap-channel.yaml --yes",
		},
		Folders: []string{"kos-etcd-single-node", "kos-agent-userspace"},
	},
	{
		Path: "addons/monitoring-channel.yaml",
		Name: "kos-monitoring",
		Comment: []string{
			"Optional: Prometheus, scraping every KOS component, and Grafana with the KOS",
			"dashboards, in the namespace kos-monitoring. Installed only where this channel",
			"is applied, with the bootstrap channel:",
			"  channels apply channel bootstrap-channel.yaml addons/monitoring-channel.yaml --yes",
		},
		Folders: []string{"kos-monitoring"},
		With:    []string{"bootstrap-channel.yaml"},
	},
}

// BootstrapChannel is the Path of the channel every cluster applies.
const BootstrapChannel = "bootstrap-channel.yaml"

// Flavour is one kind of cluster the bundle serves. Its releases of each
// addon are in one channel file: kOps's channels applies the channels it is
// given one at a time, so an addon whose variants were in two channels (the
// local channel given before the bootstrap channel) would switch between
// them on every pass.
type Flavour struct {
	// Name names the flavour on the command line.
	Name string
	// Replace maps folders of the bootstrap channel to the folders whose
	// releases take their place in this flavour.
	Replace map[string]string
}

// Flavours are the kinds of cluster the KOS bundle serves: the standard one
// (bootstrap-channel.yaml as it is), and the local one (one control node, OVS
// without its kernel module) whose etcd and agent releases are those of
// addons/local-channel.yaml.
var Flavours = []Flavour{
	{Name: "standard"},
	{Name: "local", Replace: map[string]string{"kos-etcd": "kos-etcd-single-node", "kos-agent": "kos-agent-userspace"}},
}

// FlavourNamed returns the flavour of that name, or nil.
func FlavourNamed(name string) *Flavour {
	for i := range Flavours {
		if Flavours[i].Name == name {
			return &Flavours[i]
		}
	}
	return nil
}

// Channels returns the channel files of the flavour, made from chans: the
// bootstrap channel with the flavour's folders in place of those they
// replace, and every other channel but those that hold only folders some
// flavour puts in the bootstrap channel (the local channel).
func (f *Flavour) Channels(chans []Channel) []Channel {
	alternative := map[string]bool{}
	for _, fl := range Flavours {
		for _, folder := range fl.Replace {
			alternative[folder] = true
		}
	}
	var out []Channel
	for _, ch := range chans {
		if ch.Path == BootstrapChannel {
			ch.Folders = slices.Clone(ch.Folders)
			for i, folder := range ch.Folders {
				if r, ok := f.Replace[folder]; ok {
					ch.Folders[i] = r
				}
			}
			out = append(out, ch)
			continue
		}
		if len(ch.Folders) > 0 && !slices.ContainsFunc(ch.Folders, func(folder string) bool { return !alternative[folder] }) {
			continue
		}
		out = append(out, ch)
	}
	return out
}

// LintSets returns the sets of chans' paths that clusters apply together,
// which Lint checks: each channel alone, and each with the channels it is
// applied With (those of them chans holds).
func LintSets(chans []Channel) [][]string {
	var out [][]string
	for _, ch := range chans {
		out = append(out, []string{ch.Path})
	}
	for _, ch := range chans {
		set := []string{ch.Path}
		for _, w := range ch.With {
			if slices.ContainsFunc(chans, func(c Channel) bool { return c.Path == w }) {
				set = append(set, w)
			}
		}
		if len(set) > 1 {
			// In the order clusters give them: the others first.
			out = append(out, append(set[1:], set[0]))
		}
	}
	return out
}

// Lint runs channels.Lint on each set of LintSets(chans), loading the
// channel files under dir, and returns one line per problem, naming the
// channel files by their paths relative to dir.
func Lint(ctx context.Context, dir string, chans []Channel) ([]string, error) {
	fetcher := channels.NewFetcher()
	var out []string
	for _, set := range LintSets(chans) {
		var releases []*channels.Addon
		for _, p := range set {
			addons, err := channels.Load(ctx, fetcher, filepath.Join(dir, filepath.FromSlash(p)))
			if err != nil {
				return nil, fmt.Errorf("linting %s: %w", strings.Join(set, " "), err)
			}
			releases = append(releases, addons...)
		}
		for _, p := range channels.Lint(releases) {
			out = append(out, fmt.Sprintf("channels lint %s: %s", strings.Join(set, " "), strings.ReplaceAll(p.String(), dir+string(filepath.Separator), "")))
		}
	}
	return out, nil
}

// Folder is one addon folder and the releases its addon.yaml lists.
type Folder struct {
	// Name is the folder's name under addons/.
	Name string
	// Index is the path of its addon.yaml, relative to the repository root.
	Index string
	// Releases are the releases as channels.Load resolves them; nil when
	// the index did not load.
	Releases []*channels.Addon
	// LoadErr is why the index did not load.
	LoadErr error
}

// Bundle is the addon folders of a repository and the channel files made
// from them.
type Bundle struct {
	// Root is the repository root.
	Root string
	// Channels are the channel files made from the folders (Channels for
	// the KOS repository).
	Channels []Channel
	// Folders are the addon folders, by name.
	Folders []*Folder
}

// Load reads every addon folder under root/addons with channels.Load. An
// index that does not load is kept with its error; only failing to list the
// folders is an error.
func Load(ctx context.Context, root string, chans []Channel) (*Bundle, error) {
	entries, err := os.ReadDir(filepath.Join(root, AddonsDir))
	if err != nil {
		return nil, fmt.Errorf("listing the addon folders: %w", err)
	}
	b := &Bundle{Root: root, Channels: chans}
	fetcher := channels.NewFetcher()
	for _, e := range entries {
		if !e.IsDir() || e.Name() == release.SourceDir {
			continue
		}
		f := &Folder{Name: e.Name(), Index: filepath.ToSlash(filepath.Join(AddonsDir, e.Name(), IndexFile))}
		f.Releases, f.LoadErr = channels.Load(ctx, fetcher, b.Path(f.Index))
		b.Folders = append(b.Folders, f)
	}
	return b, nil
}

// Path returns the absolute path of a path relative to the root.
func (b *Bundle) Path(rel string) string {
	return filepath.Join(b.Root, filepath.FromSlash(rel))
}

// Rel returns the path of an absolute path relative to the root, with
// slashes.
func (b *Bundle) Rel(path string) string {
	rel, err := filepath.Rel(b.Root, path)
	if err != nil {
		return path
	}
	return filepath.ToSlash(rel)
}

// Folder returns the folder of that name, or nil.
func (b *Bundle) Folder(name string) *Folder {
	for _, f := range b.Folders {
		if f.Name == name {
			return f
		}
	}
	return nil
}

// Generate fills in the manifestHash of every release that has none and
// writes the channel files chans. It returns one line per change it made. It
// never changes a hash that is there.
func Generate(ctx context.Context, root string, chans []Channel) ([]string, error) {
	b, err := Load(ctx, root, chans)
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, f := range b.Folders {
		if f.LoadErr != nil {
			errs = append(errs, fmt.Errorf("%s does not load (fix it, then run this again): %w", f.Index, f.LoadErr))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	changes, err := renderSource(root)
	if err != nil {
		return changes, err
	}
	var indexes []string
	for _, f := range b.Folders {
		indexes = append(indexes, f.Index)
	}
	if hasSource(root) {
		// The indexes of rendered manifests outside the folders' own
		// (kos-monitoring/prometheus-operator/channel.yaml).
		for _, t := range release.Targets {
			if index := path.Join(AddonsDir, t.Folder, t.Index); !slices.Contains(indexes, index) {
				indexes = append(indexes, index)
			}
		}
	}
	for _, index := range indexes {
		filled, err := FillHashes(b.Path(index))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, m := range filled {
			changes = append(changes, fmt.Sprintf("%s: added the manifestHash of %s", index, m))
		}
	}
	if len(errs) > 0 {
		return changes, errors.Join(errs...)
	}
	if len(changes) > 0 {
		if b, err = Load(ctx, root, chans); err != nil {
			return changes, err
		}
	}
	for _, ch := range chans {
		data, err := b.Render(ch)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		path := b.Path(ch.Path)
		old, err := os.ReadFile(path)
		if err == nil && string(old) == string(data) {
			continue
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			errs = append(errs, fmt.Errorf("writing %s: %w", ch.Path, err))
			continue
		}
		changes = append(changes, "wrote "+ch.Path)
	}
	if len(errs) > 0 {
		return changes, errors.Join(errs...)
	}
	problems, err := Lint(ctx, root, chans)
	if err != nil {
		return changes, err
	}
	for _, p := range problems {
		errs = append(errs, errors.New(p))
	}
	return changes, errors.Join(errs...)
}

// describe names a release in messages: "kos-etcd 0.1.0 (k8s-1.29)".
func describe(a *channels.Addon) string {
	s := a.Name
	if v := a.VersionString(); v != "" {
		s += " " + v
	}
	if a.ID != "" {
		s += " (" + a.ID + ")"
	}
	return s
}

// folderChannels returns the channels a folder is listed in.
func (b *Bundle) folderChannels(name string) []string {
	var in []string
	for _, ch := range b.Channels {
		if slices.Contains(ch.Folders, name) {
			in = append(in, ch.Path)
		}
	}
	return in
}

// isManifestFile reports whether a file in an addon folder is a manifest by
// its name.
func isManifestFile(name string) bool {
	return name != IndexFile && (strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml"))
}
