package release

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"reflect"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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

// podSpecPaths are where the pod template's spec is, by kind.
var podSpecPaths = map[string][]string{
	"Deployment":  {"spec", "template", "spec"},
	"DaemonSet":   {"spec", "template", "spec"},
	"StatefulSet": {"spec", "template", "spec"},
	"Job":         {"spec", "template", "spec"},
	"CronJob":     {"spec", "jobTemplate", "spec", "template", "spec"},
}

// object is one object of a render, decoded.
type object struct {
	kind, name, namespace, apiVersion string
	u                                 map[string]any
}

func objects(m resmap.ResMap) ([]object, error) {
	var out []object
	for _, res := range m.Resources() {
		data, err := res.AsYAML()
		if err != nil {
			return nil, err
		}
		var u map[string]any
		if err := yaml.Unmarshal(data, &u); err != nil {
			return nil, err
		}
		out = append(out, object{kind: res.GetKind(), name: res.GetName(), namespace: res.GetNamespace(), apiVersion: res.GetApiVersion(), u: u})
	}
	return out, nil
}

// podSpec returns an object's pod template spec, typed, and its JSON
// pointer; ok is false for objects without pods.
func (o object) podSpec() (*corev1.PodSpec, string, bool, error) {
	p, ok := podSpecPaths[o.kind]
	if !ok {
		return nil, "", false, nil
	}
	m, found, err := unstructured.NestedMap(o.u, p...)
	if err != nil || !found {
		return nil, "", false, err
	}
	data, err := json.Marshal(m)
	if err != nil {
		return nil, "", false, err
	}
	spec := &corev1.PodSpec{}
	if err := json.Unmarshal(data, spec); err != nil {
		return nil, "", false, fmt.Errorf("%s %s: %w", o.kind, o.name, err)
	}
	return spec, "/" + strings.Join(p, "/"), true, nil
}

// nested returns a map of maps along p ending in leaf.
func nested(p []string, leaf map[string]any) map[string]any {
	for i := len(p) - 1; i >= 0; i-- {
		leaf = map[string]any{p[i]: leaf}
	}
	return leaf
}

// smp returns a strategic merge patch of o with body under its top level.
func (o object) smp(body map[string]any) (types.Patch, error) {
	meta := map[string]any{"name": o.name}
	if o.namespace != "" {
		meta["namespace"] = o.namespace
	}
	if m, ok := body["metadata"].(map[string]any); ok {
		maps.Copy(meta, m)
	}
	p := map[string]any{"apiVersion": o.apiVersion, "kind": o.kind, "metadata": meta}
	for k, v := range body {
		if k != "metadata" {
			p[k] = v
		}
	}
	data, err := json.Marshal(p)
	if err != nil {
		return types.Patch{}, err
	}
	return types.Patch{Patch: string(data)}, nil
}

// json6902 returns a JSON 6902 patch of o.
func (o object) json6902(ops []map[string]any) (types.Patch, error) {
	data, err := json.Marshal(ops)
	if err != nil {
		return types.Patch{}, err
	}
	group, version, _ := strings.Cut(o.apiVersion, "/")
	if version == "" {
		group, version = "", group
	}
	return types.Patch{Patch: string(data), Target: &types.Selector{ResId: resid.ResId{
		Gvk: resid.Gvk{Group: group, Version: version, Kind: o.kind}, Name: o.name, Namespace: o.namespace}}}, nil
}

// flagOps returns the operations that set a container's FLAG=VALUE
// argument of o, which the source must give.
func (o object) flagOps(container, flag, value string) ([]map[string]any, error) {
	spec, prefix, ok, err := o.podSpec()
	if err != nil || !ok {
		return nil, fmt.Errorf("%s %s has no pods", o.kind, o.name)
	}
	for ci, c := range spec.Containers {
		if c.Name != container {
			continue
		}
		for ai, a := range c.Args {
			if strings.HasPrefix(a, flag+"=") {
				p := fmt.Sprintf("%s/containers/%d/args/%d", prefix, ci, ai)
				return []map[string]any{
					{"op": "test", "path": p, "value": a},
					{"op": "replace", "path": p, "value": flag + "=" + value},
				}, nil
			}
		}
	}
	return nil, fmt.Errorf("%s %s: container %s has no argument %s=", o.kind, o.name, container, flag)
}

// configure adds what the configuration changes to k, from the objects of
// the render without it.
func (r *Renderer) configure(k *types.Kustomization, m resmap.ResMap) error {
	objs, err := objects(m)
	if err != nil {
		return err
	}
	cfg := r.cfg
	var errs []error
	add := func(p types.Patch, err error) {
		if errors.Is(err, errSkip) {
			return
		}
		if err != nil {
			errs = append(errs, err)
			return
		}
		k.Patches = append(k.Patches, p)
	}
	images := map[string]bool{}
	for _, o := range objs {
		spec, _, ok, err := o.podSpec()
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
			images[imageName(c.Image)] = true
		}
		add(r.podPatch(o, spec))
	}

	// Images: the operator's, else the registry's.
	for _, name := range slices.Sorted(maps.Keys(images)) {
		if ref, ok := cfg.Images[name]; ok {
			img := imageOverride(name, ref)
			if img.NewTag == "" && img.Digest == "" {
				// Without a tag of its own, the image keeps the release's.
				img.NewTag = imageOf(k.Images, name).NewTag
			}
			k.Images = setImage(k.Images, img)
		} else if cfg.Registry != "" && strings.HasPrefix(name, api.KOSRegistry+"/") {
			img := imageOf(k.Images, name)
			img.NewName = strings.TrimSuffix(cfg.Registry, "/") + strings.TrimPrefix(name, api.KOSRegistry)
			k.Images = setImage(k.Images, img)
		}
	}
	if r.Resolve != nil {
		for _, name := range slices.Sorted(maps.Keys(images)) {
			img := imageOf(k.Images, name)
			// Only KOS's images: the others (Prometheus, Grafana) are
			// pinned with the configuration's images if at all.
			if img.Digest != "" || !strings.HasPrefix(name, api.KOSRegistry+"/") {
				continue
			}
			ref := name
			if img.NewName != "" {
				ref = img.NewName
			}
			tag := img.NewTag
			if tag == "" {
				tag = imageTag(objs, name)
			}
			if tag == "" {
				continue
			}
			digest, err := r.Resolve(ref + ":" + tag)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if digest != "" {
				// Written NAME:TAG@DIGEST; the runtime pulls by digest.
				img.Digest = digest
				k.Images = setImage(k.Images, img)
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Components)) {
		if c := cfg.Components[name]; c.Replicas != nil {
			w := api.Workloads[name]
			if slices.ContainsFunc(objs, func(o object) bool { return o.kind == w.Kind && o.name == w.Name }) {
				k.Replicas = append(k.Replicas, types.Replica{Name: w.Name, Count: int64(*c.Replicas)})
			}
		}
	}

	for _, o := range objs {
		switch {
		case o.kind == "StatefulSet" && o.name == "kos-etcd":
			add(r.etcdPatch(o))
		case o.kind == "PersistentVolume" && o.name == "kos-etcd-single-node" && cfg.Etcd.Storage.Size != nil:
			add(o.smp(map[string]any{"spec": map[string]any{"capacity": map[string]any{"storage": cfg.Etcd.Storage.Size.String()}}}))
		case o.kind == "PersistentVolumeClaim" && o.name == "kos-etcd-data" && cfg.Etcd.Storage.Size != nil:
			add(o.smp(map[string]any{"spec": map[string]any{"resources": map[string]any{"requests": map[string]any{"storage": cfg.Etcd.Storage.Size.String()}}}}))
		case o.kind == "PersistentVolumeClaim" && o.name == "kos-etcd-backup":
			spec := map[string]any{}
			if s := cfg.Etcd.Backup.Size; s != nil {
				spec["resources"] = map[string]any{"requests": map[string]any{"storage": s.String()}}
			}
			// Without a class of its own, the backup claim takes the
			// members': a cluster that needs one named for etcd has
			// no default class either, where the claim would stay
			// Pending and no backup would run.
			if c := cmp.Or(cfg.Etcd.Backup.StorageClassName, cfg.Etcd.Storage.StorageClassName); c != "" {
				spec["storageClassName"] = c
			}
			if len(spec) > 0 {
				add(o.smp(map[string]any{"spec": spec}))
			}
		case o.kind == "CronJob" && o.name == "kos-etcd-backup":
			if s := cfg.Etcd.Backup.Schedule; s != "" {
				add(o.smp(map[string]any{"spec": map[string]any{"schedule": s}}))
			}
			if n := cfg.Etcd.Backup.Keep; n != nil {
				ops, err := o.flagOps("backup", "--keep", strconv.Itoa(int(*n)))
				if err == nil {
					add(o.json6902(ops))
				} else {
					errs = append(errs, err)
				}
			}
		case o.kind == "DaemonSet" && o.name == "kos-agent" && cfg.CNI.BinDir != "":
			add(o.smp(map[string]any{"spec": nested([]string{"template", "spec"}, map[string]any{
				"volumes": []any{map[string]any{"name": "cni-bin", "hostPath": map[string]any{"path": cfg.CNI.BinDir}}},
			})}))
		case o.kind == "Deployment" && o.name == "prometheus" && o.namespace == "kos-monitoring" && cfg.Monitoring.Retention != "":
			ops, err := o.flagOps("prometheus", "--storage.tsdb.retention.time", cfg.Monitoring.Retention)
			if err == nil {
				add(o.json6902(ops))
			} else {
				errs = append(errs, err)
			}
		case (o.kind == "PodMonitor" || o.kind == "PrometheusRule") && len(cfg.Monitoring.SelectorLabels) > 0:
			labels := map[string]any{}
			for k, v := range cfg.Monitoring.SelectorLabels {
				labels[k] = v
			}
			add(o.smp(map[string]any{"metadata": map[string]any{"labels": labels}}))
		}
	}

	// The operator's patches, each where it matches.
	for i, p := range cfg.Patches {
		patch, sel, err := operatorPatch(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("patches[%d]: %w", i, err))
			continue
		}
		matches, err := m.Select(sel)
		if err != nil {
			errs = append(errs, fmt.Errorf("patches[%d]: %w", i, err))
			continue
		}
		if len(matches) > 0 {
			r.matched[i] = true
			k.Patches = append(k.Patches, patch)
		}
	}
	return errors.Join(errs...)
}

// podPatch is the strategic merge patch of the configuration of o's pods:
// its component's settings and the image pull secrets.
func (r *Renderer) podPatch(o object, spec *corev1.PodSpec) (types.Patch, error) {
	body := map[string]any{}
	if s := r.cfg.ImagePullSecrets; len(s) > 0 {
		var refs []any
		for _, name := range s {
			refs = append(refs, map[string]any{"name": name})
		}
		body["imagePullSecrets"] = refs
	}
	for name, c := range r.cfg.Components {
		w := api.Workloads[name]
		if w.Kind != o.kind || w.Name != o.name || w.Namespace != o.namespace {
			continue
		}
		if c.NodeSelector != nil {
			sel := map[string]any{"$patch": "replace"}
			for k, v := range c.NodeSelector {
				sel[k] = v
			}
			body["nodeSelector"] = sel
		}
		if c.Tolerations != nil {
			body["tolerations"] = c.Tolerations
		}
		if c.PriorityClassName != "" {
			body["priorityClassName"] = c.PriorityClassName
		}
		for _, container := range slices.Sorted(maps.Keys(c.Resources)) {
			list := "containers"
			if slices.ContainsFunc(spec.InitContainers, func(x corev1.Container) bool { return x.Name == container }) {
				list = "initContainers"
			}
			entries, _ := body[list].([]any)
			body[list] = append(entries, map[string]any{"name": container, "resources": c.Resources[container]})
		}
	}
	if len(body) == 0 {
		return types.Patch{}, errSkip
	}
	return o.smp(map[string]any{"spec": nested(podSpecPaths[o.kind][1:], body)})
}

// errSkip says that there is nothing to patch.
var errSkip = errors.New("nothing to patch")

// etcdPatch sizes the volumes of the three-member etcd and its quota.
func (r *Renderer) etcdPatch(o object) (types.Patch, error) {
	st := r.cfg.Etcd.Storage
	if st.Size == nil && st.StorageClassName == "" {
		return types.Patch{}, errSkip
	}
	var ops []map[string]any
	if st.Size != nil {
		q, err := o.flagOps("etcd", "--quota-backend-bytes", strconv.FormatInt(EtcdQuota(st.Size.Value()), 10))
		if err != nil {
			return types.Patch{}, err
		}
		ops = append(ops, q...)
	}
	claims, _, _ := unstructured.NestedSlice(o.u, "spec", "volumeClaimTemplates")
	for i, c := range claims {
		name, _, _ := unstructured.NestedString(c.(map[string]any), "metadata", "name")
		if name != "data" {
			continue
		}
		p := fmt.Sprintf("/spec/volumeClaimTemplates/%d", i)
		ops = append(ops, map[string]any{"op": "test", "path": p + "/metadata/name", "value": "data"})
		if st.Size != nil {
			ops = append(ops, map[string]any{"op": "replace", "path": p + "/spec/resources/requests/storage", "value": st.Size.String()})
		}
		if st.StorageClassName != "" {
			ops = append(ops, map[string]any{"op": "add", "path": p + "/spec/storageClassName", "value": st.StorageClassName})
		}
	}
	return o.json6902(ops)
}

// The space quota of etcd on a volume of a given size: the volume holds the
// database twice at the worst moment (defragmenting writes the new file
// before it drops the old; a member that fell behind receives the leader's
// whole database) and the WAL and the member's other files (etcdWALBytes:
// 6 WAL files of 64 MiB and 64 MiB more), and etcd advises against quotas
// above etcdMaxQuota. On the default 2Gi volume that is the 800 MiB of the
// manifests.
const (
	etcdWALBytes = 448 << 20
	etcdMaxQuota = 8 << 30
)

// EtcdQuota returns the --quota-backend-bytes of an etcd member whose volume
// holds volume bytes.
func EtcdQuota(volume int64) int64 {
	return min((volume-etcdWALBytes)/2, etcdMaxQuota)
}

// operatorPatch converts an operator's patch to kustomize's, with the
// selector of the objects it patches.
func operatorPatch(p api.Patch) (types.Patch, types.Selector, error) {
	out := types.Patch{Patch: p.Patch}
	if t := p.Target; t != nil {
		sel := types.Selector{ResId: resid.ResId{Gvk: resid.Gvk{Group: t.Group, Version: t.Version, Kind: t.Kind}, Name: t.Name, Namespace: t.Namespace}, LabelSelector: t.LabelSelector}
		out.Target = &sel
		return out, sel, nil
	}
	var obj struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
	}
	if err := yaml.Unmarshal([]byte(p.Patch), &obj); err != nil {
		return out, types.Selector{}, err
	}
	group, version, _ := strings.Cut(obj.APIVersion, "/")
	if version == "" {
		group, version = "", group
	}
	return out, types.Selector{ResId: resid.ResId{Gvk: resid.Gvk{Group: group, Version: version, Kind: obj.Kind}, Name: obj.Metadata.Name, Namespace: obj.Metadata.Namespace}}, nil
}

// imageName returns an image reference without its tag and digest.
func imageName(ref string) string {
	if i := strings.Index(ref, "@"); i >= 0 {
		ref = ref[:i]
	}
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		ref = ref[:i]
	}
	return ref
}

// imageOverride is the kustomize image that replaces name with ref.
func imageOverride(name, ref string) types.Image {
	img := types.Image{Name: name}
	if i := strings.Index(ref, "@"); i >= 0 {
		ref, img.Digest = ref[:i], ref[i+1:]
	}
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		ref, img.NewTag = ref[:i], ref[i+1:]
	}
	img.NewName = ref
	return img
}

// imageTag returns the tag the objects give the image name, "" for none.
func imageTag(objs []object, name string) string {
	for _, o := range objs {
		spec, _, ok, err := o.podSpec()
		if err != nil || !ok {
			continue
		}
		for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
			if imageName(c.Image) != name || strings.Contains(c.Image, "@") {
				continue
			}
			if i := strings.LastIndex(c.Image, ":"); i > strings.LastIndex(c.Image, "/") {
				return c.Image[i+1:]
			}
		}
	}
	return ""
}

func imageOf(images []types.Image, name string) types.Image {
	for _, img := range images {
		if img.Name == name {
			return img
		}
	}
	return types.Image{Name: name}
}

func setImage(images []types.Image, img types.Image) []types.Image {
	for i := range images {
		if images[i].Name == img.Name {
			images[i] = img
			return images
		}
	}
	return append(images, img)
}
