package bundle

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kos-sdn/kos/channels"
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
	},
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
		if !e.IsDir() {
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
	var changes []string
	for _, f := range b.Folders {
		filled, err := FillHashes(b.Path(f.Index))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, m := range filled {
			changes = append(changes, fmt.Sprintf("%s: added the manifestHash of %s", f.Index, m))
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
