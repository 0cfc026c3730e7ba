package release

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/kos-sdn/kos/channels"
	chapi "github.com/kos-sdn/kos/channels/api"
	"github.com/kos-sdn/kos/release/api"
)

// Channel is a channel file of a release tree.
type Channel struct {
	// Path is the file's path in the tree.
	Path string
	// Name is the channel's metadata.name.
	Name string
	// Comment heads the file, one line per element.
	Comment []string
	// Folders are the addon folders (Target.Folder) whose releases of
	// Version the channel lists, in this order.
	Folders []string
	// With names the channel files a cluster applies together with this
	// one; they are linted as one set too.
	With []string
}

// Channels are the channel files of a release tree, at the paths of the
// repository's, so that a tree is laid out as the repository is.
var Channels = []Channel{
	{
		Path: "bootstrap-channel.yaml", Name: "kos",
		Comment: []string{"The KOS addons: install or upgrade KOS with", "  channels apply channel <this file's https://, s3:// or file:// location> --yes"},
		Folders: []string{"kos-etcd", "kos-apiserver", "kos-controller-manager", "kos-agent"},
	},
	{
		Path: "addons/local-channel.yaml", Name: "kos-local",
		Comment: []string{"For a cluster with one control node whose Open vSwitch has no kernel module:", "etcd as one member on host storage, the agent on OVS's userspace datapath.", "Give it before the bootstrap channel, whose releases of equal versions it replaces."},
		Folders: []string{"kos-etcd-single-node", "kos-agent-userspace"},
	},
	{
		Path: "addons/monitoring-channel.yaml", Name: "kos-monitoring",
		Comment: []string{"Optional: Prometheus and Grafana for KOS; apply with the bootstrap channel."},
		Folders: []string{"kos-monitoring"}, With: []string{"bootstrap-channel.yaml"},
	},
	{
		Path: "addons/kos-monitoring/prometheus-operator/channel.yaml", Name: "kos-monitoring-operator",
		Comment: []string{"Optional, for clusters with the Prometheus Operator: PodMonitors, a", "PrometheusRule and the dashboards; apply with the bootstrap channel."},
		Folders: []string{"kos-monitoring/prometheus-operator"}, With: []string{"bootstrap-channel.yaml"},
	},
}

// TreeOptions say what WriteTree writes.
type TreeOptions struct {
	// Source is the addons folder: addons.FS, or the repository's.
	Source fs.FS
	// Out is the folder the tree is written into; files of the same
	// names are replaced.
	Out string
	// Config is the operator's configuration; nil for none.
	Config *api.ReleaseConfig
	// Modules are the Go module versions the manifests' heads name
	// (KOSModules).
	Modules map[string]string
	// Resolve, when set, pins the images by digest (Renderer.Resolve).
	Resolve Resolver
}

// WriteTree renders every manifest of Version with the configuration and
// writes a release tree: the manifests under addons/ and the channel files
// (Channels) that list them with their hashes. It then loads every channel
// written, as channels would, fetches its manifests (which checks their
// hashes) and lints the channels; the files it wrote are returned, sorted.
// Writing a tree twice with the same options writes the same bytes.
func WriteTree(ctx context.Context, opts TreeOptions) ([]string, error) {
	r, err := NewRenderer(opts.Source, opts.Config, opts.Modules)
	if err != nil {
		return nil, err
	}
	r.Resolve = opts.Resolve
	var files []string
	hashes := map[string]string{} // manifest path in the tree -> hash
	for _, t := range Targets {
		data, err := r.Render(t)
		if err != nil {
			return nil, err
		}
		rel := path.Join("addons", t.File())
		if err := writeFile(opts.Out, rel, data); err != nil {
			return nil, err
		}
		files = append(files, rel)
		hashes[rel] = channels.HashManifest(data)
	}
	if unmatched := r.Unmatched(); len(unmatched) > 0 {
		var errs []error
		for _, i := range unmatched {
			errs = append(errs, fmt.Errorf("patches[%d] matches no object of the release", i))
		}
		return nil, errors.Join(errs...)
	}
	for _, ch := range Channels {
		data, err := channelFile(opts, ch, hashes)
		if err != nil {
			return nil, err
		}
		if err := writeFile(opts.Out, ch.Path, data); err != nil {
			return nil, err
		}
		files = append(files, ch.Path)
	}
	slices.Sort(files)
	if err := checkTree(ctx, opts.Out); err != nil {
		return nil, fmt.Errorf("checking the release written to %s: %w", opts.Out, err)
	}
	return files, nil
}

// channelFile returns a channel file listing the releases of Version of its
// folders, as their indexes describe them, with the hashes of the
// manifests written.
func channelFile(opts TreeOptions, ch Channel, hashes map[string]string) ([]byte, error) {
	var specs []*chapi.AddonSpec
	for _, folder := range ch.Folders {
		i := slices.IndexFunc(Targets, func(t Target) bool { return t.Folder == folder })
		if i < 0 {
			return nil, fmt.Errorf("channel %s: no target renders the folder %s", ch.Path, folder)
		}
		index := path.Join(folder, Targets[i].Index)
		data, err := fs.ReadFile(opts.Source, index)
		if err != nil {
			return nil, fmt.Errorf("reading the index addons/%s: %w", index, err)
		}
		// Parsed as if it were in the tree, so that manifests resolve
		// to the tree's files.
		releases, err := channels.Parse(filepath.Join(opts.Out, "addons", filepath.FromSlash(index)), data)
		if err != nil {
			return nil, err
		}
		for _, a := range releases {
			if a.VersionString() != Version {
				continue
			}
			rel, err := filepath.Rel(opts.Out, a.Manifest)
			if err != nil {
				return nil, err
			}
			rel = filepath.ToSlash(rel)
			hash, ok := hashes[rel]
			if !ok {
				return nil, fmt.Errorf("addons/%s: release %s %s names %s, which the source does not render", index, a.Name, a.ID, rel)
			}
			manifest, err := filepath.Rel(filepath.Dir(filepath.Join(opts.Out, filepath.FromSlash(ch.Path))), a.Manifest)
			if err != nil {
				return nil, err
			}
			manifest = filepath.ToSlash(manifest)
			name, namespace := a.Name, a.Namespace
			var upgradesFrom string
			if a.UpgradesFrom != nil {
				upgradesFrom = a.UpgradesFrom.String()
			}
			specs = append(specs, &chapi.AddonSpec{
				Name:               &name,
				Namespace:          &namespace,
				Selector:           a.Selector,
				Version:            a.VersionString(),
				Manifest:           &manifest,
				ManifestHash:       hash,
				KubernetesVersion:  a.KubernetesVersion,
				ID:                 a.ID,
				NeedsRollingUpdate: a.NeedsRollingUpdate,
				NeedsPKI:           a.NeedsPKI,
				Prune:              a.Prune,
				UpgradesFrom:       upgradesFrom,
			})
		}
	}
	body, err := yaml.Marshal(map[string]any{
		"kind":     chapi.Kind,
		"metadata": map[string]string{"name": ch.Name},
		"spec":     chapi.AddonsSpec{Addons: specs},
	})
	if err != nil {
		return nil, fmt.Errorf("encoding %s: %w", ch.Path, err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# KOS %s, rendered by kos-release.\n", Version)
	for _, line := range ch.Comment {
		b.WriteString("# " + line + "\n")
	}
	b.Write(body)
	return []byte(b.String()), nil
}

// checkTree loads every channel of the tree at out, fetches its manifests
// (checking their hashes) and lints the channels alone and as clusters
// apply them together.
func checkTree(ctx context.Context, out string) error {
	fetcher := channels.NewFetcher()
	loaded := map[string][]*channels.Addon{}
	for _, ch := range Channels {
		releases, err := channels.Load(ctx, fetcher, filepath.Join(out, filepath.FromSlash(ch.Path)))
		if err != nil {
			return err
		}
		for _, a := range releases {
			if _, err := fetcher.FetchManifest(ctx, a); err != nil {
				return err
			}
		}
		loaded[ch.Path] = releases
	}
	var errs []error
	for _, ch := range Channels {
		sets := [][]string{{ch.Path}}
		if len(ch.With) > 0 {
			sets = append(sets, append(slices.Clone(ch.With), ch.Path))
		}
		for _, set := range sets {
			var releases []*channels.Addon
			for _, p := range set {
				releases = append(releases, loaded[p]...)
			}
			for _, p := range channels.Lint(releases) {
				errs = append(errs, fmt.Errorf("channels lint %s: %s", strings.Join(set, " "), strings.ReplaceAll(p.String(), out+string(filepath.Separator), "")))
			}
		}
	}
	return errors.Join(errs...)
}

// writeFile writes data to out/rel.
func writeFile(out, rel string, data []byte) error {
	p := filepath.Join(out, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("creating the folder of %s: %w", rel, err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", rel, err)
	}
	return nil
}
