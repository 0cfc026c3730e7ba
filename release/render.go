package release

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"reflect"
	"slices"
	"strings"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/kustomize/kyaml/resid"
	"sigs.k8s.io/yaml"

	"github.com/kos-sdn/kos/release/api"
)

// The folders of the renderer's in-memory file system: the addons folder is
// copied to addonsRoot, and each render's kustomization is written to
// renderDir beside it.
const (
	addonsRoot = "/addons"
	renderDir  = "/render"
)

// rulesFile holds the KOS alerts, relative to the addons folder.
const rulesFile = "kos-monitoring/rules/kos.rules.yaml"

// Resolver returns the digest (sha256:...) of an image reference
// (NAME:TAG), "" when the registry has no such image.
type Resolver func(ref string) (string, error)

// Renderer renders the targets of one source with one configuration.
type Renderer struct {
	fs      filesys.FileSystem
	cfg     api.ReleaseConfig
	modules map[string]string
	// Resolve, when set, pins each KOS image the configuration does not
	// pin by the digest it returns; an image it has no digest for keeps
	// its tag.
	Resolve Resolver
	// matched records, by index in cfg.Patches, the patches that matched
	// an object of some render.
	matched map[int]bool
}

// NewRenderer returns a renderer of the addons folder src (addons.FS, or
// the repository's folder) with cfg, which may be nil for none. Modules
// map Go module paths to the versions the manifests' heads name (those of
// go.mod); every module a head names must be there.
func NewRenderer(src fs.FS, cfg *api.ReleaseConfig, modules map[string]string) (*Renderer, error) {
	mem := filesys.MakeFsInMemory()
	err := fs.WalkDir(src, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(src, p)
		if err != nil {
			return err
		}
		return mem.WriteFile(path.Join(addonsRoot, p), data)
	})
	if err != nil {
		return nil, fmt.Errorf("reading the addon sources: %w", err)
	}
	r := &Renderer{fs: mem, modules: modules, matched: map[int]bool{}}
	if cfg != nil {
		r.cfg = *cfg
	}
	return r, nil
}

// Render returns the manifest of a target: its source built by kustomize,
// the KOS images tagged with Version, and the configuration applied.
func (r *Renderer) Render(t Target) ([]byte, error) {
	// The first build is the release without the configuration: what the
	// configuration's patches are made from (the index of a flag in its
	// container's arguments, which objects an operator's patch matches).
	k := r.baseKustomization(t)
	first, err := r.build(t, k)
	if err != nil {
		return nil, err
	}
	if patch, ok, err := r.rulesPatch(first); err != nil {
		return nil, fmt.Errorf("%s: %w", t.Source, err)
	} else if ok {
		k.Patches = append(k.Patches, patch)
		if first, err = r.build(t, k); err != nil {
			return nil, err
		}
	}
	if err := r.configure(k, first); err != nil {
		return nil, fmt.Errorf("%s: applying the release configuration: %w", t.File(), err)
	}
	m, err := r.build(t, k)
	if err != nil {
		return nil, fmt.Errorf("%s: applying the release configuration: %w", t.File(), err)
	}
	body, err := m.AsYaml()
	if err != nil {
		return nil, fmt.Errorf("%s: writing the manifest: %w", t.File(), err)
	}
	head, err := r.head(t)
	if err != nil {
		return nil, err
	}
	return append(head, body...), nil
}

// Unmatched returns the indexes of the configuration's patches that matched
// no object of any render so far.
func (r *Renderer) Unmatched() []int {
	var out []int
	for i := range r.cfg.Patches {
		if !r.matched[i] {
			out = append(out, i)
		}
	}
	return out
}

// head is the comment that opens a manifest.
func (r *Renderer) head(t Target) ([]byte, error) {
	var mods []string
	for _, m := range append(slices.Clone(t.Modules), headModules...) {
		v, ok := r.modules[m]
		if !ok {
			return nil, fmt.Errorf("%s: the version of the Go module %s is unknown", t.File(), m)
		}
		mods = append(mods, m+" "+v)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "# %s %s, rendered by kos-release from addons/%s.\n", t.Folder, Version, t.Source)
	fmt.Fprintf(&b, "# Do not edit: change the source (its comments say why each object is as it\n")
	fmt.Fprintf(&b, "# is) and run make addons. Go modules (go.mod): %s.\n", strings.Join(mods, ", "))
	if !isZero(r.cfg) {
		fmt.Fprintf(&b, "# With an operator's release configuration (%s %s).\n", api.APIVersion, api.Kind)
	}
	return b.Bytes(), nil
}

// isZero says whether cfg changes nothing.
func isZero(cfg api.ReleaseConfig) bool {
	cfg.APIVersion, cfg.Kind = "", ""
	return reflect.DeepEqual(cfg, api.ReleaseConfig{})
}

// baseKustomization is the kustomization of a target without the
// configuration: the source, and the KOS images tagged with Version.
func (r *Renderer) baseKustomization(t Target) *types.Kustomization {
	k := &types.Kustomization{
		TypeMeta:  types.TypeMeta{APIVersion: types.KustomizationVersion, Kind: types.KustomizationKind},
		Resources: []string{path.Join("..", addonsRoot, t.Source)},
	}
	for _, image := range api.Images {
		if strings.HasPrefix(image, api.KOSRegistry+"/") && image != api.KOSRegistry+"/etcd" {
			k.Images = append(k.Images, types.Image{Name: image, NewTag: Version})
		}
	}
	return k
}

// build runs kustomize on k.
func (r *Renderer) build(t Target, k *types.Kustomization) (resmap.ResMap, error) {
	data, err := yaml.Marshal(k)
	if err != nil {
		return nil, err
	}
	if err := r.fs.WriteFile(path.Join(renderDir, "kustomization.yaml"), data); err != nil {
		return nil, err
	}
	opts := krusty.MakeDefaultOptions()
	// The sources name the alerts and dashboards of
	// addons/kos-monitoring, outside their folders.
	opts.LoadRestrictions = types.LoadRestrictionsNone
	m, err := krusty.MakeKustomizer(opts).Run(r.fs, renderDir)
	if err != nil {
		return nil, fmt.Errorf("rendering %s: %w", t.Source, err)
	}
	return m, nil
}

// rulesPatch sets the groups of the PrometheusRule kos, when the render has
// it, to those of the alerts file.
func (r *Renderer) rulesPatch(m resmap.ResMap) (types.Patch, bool, error) {
	found := false
	for _, res := range m.Resources() {
		if res.GetKind() == "PrometheusRule" && res.GetName() == "kos" {
			found = true
		}
	}
	if !found {
		return types.Patch{}, false, nil
	}
	data, err := r.fs.ReadFile(path.Join(addonsRoot, rulesFile))
	if err != nil {
		return types.Patch{}, false, err
	}
	var rules struct {
		Groups []any `json:"groups"`
	}
	if err := yaml.UnmarshalStrict(data, &rules); err != nil {
		return types.Patch{}, false, fmt.Errorf("reading %s: %w", rulesFile, err)
	}
	ops, err := json.Marshal([]map[string]any{{"op": "replace", "path": "/spec/groups", "value": rules.Groups}})
	if err != nil {
		return types.Patch{}, false, err
	}
	return types.Patch{Patch: string(ops), Target: &types.Selector{ResId: resid.ResId{Gvk: resid.Gvk{Kind: "PrometheusRule"}, Name: "kos"}}}, true, nil
}
