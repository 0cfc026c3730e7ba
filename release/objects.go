package release

// This file reads the objects of a render and writes patches of them.

import (
	"encoding/json"
	"fmt"
	"maps"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/resid"
	"sigs.k8s.io/yaml"
)

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
