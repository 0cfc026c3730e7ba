package release

// This file applies an operator's release configuration to a render: the
// patches, images and replicas it adds to the kustomization.

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/resid"
	"sigs.k8s.io/yaml"

	"github.com/kos-sdn/kos/release/api"
)

// configure adds what the configuration changes to k, from the objects of
// the render without it: the pods' settings, the images, the replicas, the
// objects' own settings, then the operator's patches, in that order.
func (r *Renderer) configure(k *types.Kustomization, m resmap.ResMap) error {
	objs, err := objects(m)
	if err != nil {
		return err
	}
	l := &patchList{k: k}
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
		l.add(r.podPatch(o, spec))
	}
	r.configureImages(k, images)
	if r.Resolve != nil {
		l.errs = append(l.errs, r.resolveImages(k, objs, images)...)
	}
	r.configureReplicas(k, objs)
	for _, o := range objs {
		r.objectPatches(l, o)
	}
	r.operatorPatches(l, m)
	return errors.Join(l.errs...)
}

// patchList collects the patches of a configuration in a kustomization,
// and the errors of making them.
type patchList struct {
	k    *types.Kustomization
	errs []error
}

// add adds p, or records err; errSkip is no error.
func (l *patchList) add(p types.Patch, err error) {
	if errors.Is(err, errSkip) {
		return
	}
	if err != nil {
		l.errs = append(l.errs, err)
		return
	}
	l.k.Patches = append(l.k.Patches, p)
}

// addOps adds the JSON 6902 patch of o with ops, or records err.
func (l *patchList) addOps(o object, ops []map[string]any, err error) {
	if err != nil {
		l.errs = append(l.errs, err)
		return
	}
	l.add(o.json6902(ops))
}

// configureImages sets the images the pods use (names): the operator's,
// else the registry's.
func (r *Renderer) configureImages(k *types.Kustomization, names map[string]bool) {
	for _, name := range slices.Sorted(maps.Keys(names)) {
		if ref, ok := r.cfg.Images[name]; ok {
			img := imageOverride(name, ref)
			if img.NewTag == "" && img.Digest == "" {
				// Without a tag of its own, the image keeps the release's.
				img.NewTag = imageOf(k.Images, name).NewTag
			}
			k.Images = setImage(k.Images, img)
		} else if r.cfg.Registry != "" && strings.HasPrefix(name, api.KOSRegistry+"/") {
			img := imageOf(k.Images, name)
			img.NewName = strings.TrimSuffix(r.cfg.Registry, "/") + strings.TrimPrefix(name, api.KOSRegistry)
			k.Images = setImage(k.Images, img)
		}
	}
}

// resolveImages pins KOS's images among names to the digests r.Resolve
// finds for their tags, and returns the errors of resolving.
func (r *Renderer) resolveImages(k *types.Kustomization, objs []object, names map[string]bool) []error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(names)) {
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
	return errs
}

// configureReplicas sets the replicas of the components the
// configuration gives some, among objs.
func (r *Renderer) configureReplicas(k *types.Kustomization, objs []object) {
	for _, name := range slices.Sorted(maps.Keys(r.cfg.Components)) {
		if c := r.cfg.Components[name]; c.Replicas != nil {
			w := api.Workloads[name]
			if slices.ContainsFunc(objs, func(o object) bool { return o.kind == w.Kind && o.name == w.Name }) {
				k.Replicas = append(k.Replicas, types.Replica{Name: w.Name, Count: int64(*c.Replicas)})
			}
		}
	}
}

// objectPatches adds the patches of the settings of o that the
// configuration changes: etcd's storage and backups, the CNI binaries'
// folder, Prometheus's retention and the monitors' labels.
func (r *Renderer) objectPatches(l *patchList, o object) {
	cfg := r.cfg
	switch {
	case o.kind == "StatefulSet" && o.name == "kos-etcd":
		l.add(r.etcdPatch(o))
	case o.kind == "PersistentVolume" && o.name == "kos-etcd-single-node" && cfg.Etcd.Storage.Size != nil:
		l.add(o.smp(map[string]any{"spec": map[string]any{"capacity": map[string]any{"storage": cfg.Etcd.Storage.Size.String()}}}))
	case o.kind == "PersistentVolumeClaim" && o.name == "kos-etcd-data" && cfg.Etcd.Storage.Size != nil:
		l.add(o.smp(map[string]any{"spec": map[string]any{"resources": map[string]any{"requests": map[string]any{"storage": cfg.Etcd.Storage.Size.String()}}}}))
	case o.kind == "PersistentVolumeClaim" && o.name == "kos-etcd-backup":
		spec := map[string]any{}
		if s := cfg.Etcd.Backup.Size; s != nil {
			spec["resources"] = map[string]any{"requests": map[string]any{"storage": s.String()}}
		}
		// Without a class of its own, the backup claim takes the
		// members': a cluster that needs one named for etcd has no
		// default class either, where the claim would stay Pending and
		// no backup would run.
		if c := cmp.Or(cfg.Etcd.Backup.StorageClassName, cfg.Etcd.Storage.StorageClassName); c != "" {
			spec["storageClassName"] = c
		}
		if len(spec) > 0 {
			l.add(o.smp(map[string]any{"spec": spec}))
		}
	case o.kind == "CronJob" && o.name == "kos-etcd-backup":
		if s := cfg.Etcd.Backup.Schedule; s != "" {
			l.add(o.smp(map[string]any{"spec": map[string]any{"schedule": s}}))
		}
		if n := cfg.Etcd.Backup.Keep; n != nil {
			ops, err := o.flagOps("backup", "--keep", strconv.Itoa(int(*n)))
			l.addOps(o, ops, err)
		}
	case o.kind == "DaemonSet" && o.name == "kos-agent" && cfg.CNI.BinDir != "":
		l.add(o.smp(map[string]any{"spec": nested([]string{"template", "spec"}, map[string]any{
			"volumes": []any{map[string]any{"name": "cni-bin", "hostPath": map[string]any{"path": cfg.CNI.BinDir}}},
		})}))
	case o.kind == "Deployment" && o.name == "prometheus" && o.namespace == "kos-monitoring" && cfg.Monitoring.Retention != "":
		ops, err := o.flagOps("prometheus", "--storage.tsdb.retention.time", cfg.Monitoring.Retention)
		l.addOps(o, ops, err)
	case (o.kind == "PodMonitor" || o.kind == "PrometheusRule") && len(cfg.Monitoring.SelectorLabels) > 0:
		labels := map[string]any{}
		for k, v := range cfg.Monitoring.SelectorLabels {
			labels[k] = v
		}
		l.add(o.smp(map[string]any{"metadata": map[string]any{"labels": labels}}))
	}
}

// operatorPatches adds the operator's patches, each where it matches an
// object of m, and notes which matched.
func (r *Renderer) operatorPatches(l *patchList, m resmap.ResMap) {
	for i, p := range r.cfg.Patches {
		patch, sel, err := operatorPatch(p)
		if err != nil {
			l.errs = append(l.errs, fmt.Errorf("patches[%d]: %w", i, err))
			continue
		}
		matches, err := m.Select(sel)
		if err != nil {
			l.errs = append(l.errs, fmt.Errorf("patches[%d]: %w", i, err))
			continue
		}
		if len(matches) > 0 {
			r.matched[i] = true
			l.k.Patches = append(l.k.Patches, patch)
		}
	}
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
