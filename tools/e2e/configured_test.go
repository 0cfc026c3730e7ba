package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	networkv1alpha1 "github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	kosrelease "github.com/kos-sdn/kos/release"
	"github.com/kos-sdn/kos/release/api"
	"github.com/kos-sdn/kos/tools/figures"
	"github.com/kos-sdn/kos/tools/kosinstall"
	"github.com/kos-sdn/kos/tools/testenv"
)

// A configured release: an operator's release configuration (docs/install.md,
// "Configuration") that sets every key, rendered by the kos-release command
// as an operator runs it. TestConfiguredRelease checks, without a cluster,
// that every setting reaches the rendered manifests; TestIntegrationOperate
// installs the release over the standard one on three nodes and reads every
// setting back from the live objects. Both read the same table
// (configuredChecks).

// What the configuration names, chosen so that the cluster keeps working.
const (
	// configuredPriorityClass is the pods' PriorityClass, which the cluster
	// step creates.
	configuredPriorityClass = "kos-e2e-configured"
	// configuredPullSecret is the pods' image pull Secret, which the
	// cluster step creates in every KOS namespace, for the registry.
	configuredPullSecret = "kos-e2e-pull"
	// configuredBackupSchedule is far from the test's hours, so that no
	// backup runs during it.
	configuredBackupSchedule = "41 4 * * 6"
	configuredBackupKeep     = 5
	// configuredCNIBinDir is the nodes' folder of CNI plugins; it is the
	// release's default, because the runtime of these nodes looks there
	// and the uninstall checks that folder.
	configuredCNIBinDir = "/opt/cni/bin"
	// configuredAnnotation is the annotation the operator's patches add.
	configuredAnnotation = "e2e.kos.example.com/configured"
	// configuredRetention is the bundled Prometheus's.
	configuredRetention = "5d"
)

var (
	// configuredEtcdSize fits the nodes' 2Gi local volumes: a new member's
	// claim would bind one.
	configuredEtcdSize = resource.MustParse("1536Mi")
	// configuredBackupSize is the new backup claim's; the step gives it a
	// volume of that size.
	configuredBackupSize = resource.MustParse("4Gi")
	// configuredLimits are generous: no container of the test comes near
	// them.
	configuredLimits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("2Gi")}
	// configuredReplicas differ from the release's two each.
	configuredReplicas = map[string]int32{"kos-apiserver": 3, "kos-controller-manager": 1}
	// configuredSelectorLabels label the Prometheus Operator's objects.
	configuredSelectorLabels = map[string]string{"release": "kos-e2e"}
)

// configuredParams are what a configured release depends on besides the
// constants: where the images are.
type configuredParams struct {
	// registry is where the KOS images were pushed, REGISTRY/PREFIX.
	registry string
	// controllerManagerDigest pins kos-controller-manager's image, which
	// the configuration names by itself (images).
	controllerManagerDigest string
}

// controllerManagerImage is the image the configuration gives
// kos-controller-manager: the registry's, pinned by digest alone.
func (p configuredParams) controllerManagerImage() string {
	return p.registry + "/kos-controller-manager@" + p.controllerManagerDigest
}

// mirrorImage is where the configuration takes a third-party image from.
func (p configuredParams) mirrorImage(name string) string {
	return p.registry + "/mirror/" + name
}

// configuredTolerations are the tolerations of component name's pods: the
// agent tolerates every taint, as the release's does, written as two
// tolerations; the others the control plane's taint and one of the test's.
func configuredTolerations(name string) []corev1.Toleration {
	if name == "kos-agent" {
		return []corev1.Toleration{
			{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
			{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
		}
	}
	return []corev1.Toleration{
		{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: "e2e.kos.example.com/configured", Operator: corev1.TolerationOpEqual, Value: "true", Effect: corev1.TaintEffectNoSchedule},
	}
}

// configuredRelease returns the configuration that sets every key.
func configuredRelease(p configuredParams) *api.ReleaseConfig {
	cfg := &api.ReleaseConfig{
		APIVersion: api.APIVersion,
		Kind:       api.Kind,
		Registry:   p.registry,
		Images: map[string]string{
			"kos.example.com/kos-controller-manager": p.controllerManagerImage(),
			"quay.io/prometheus/prometheus":          p.mirrorImage("prometheus:v2.53.3"),
			"docker.io/grafana/grafana":              p.mirrorImage("grafana:11.3.1"),
		},
		ImagePullSecrets: []string{configuredPullSecret},
		Components:       map[string]api.Component{},
		Etcd: api.Etcd{
			Storage: api.Volume{Size: &configuredEtcdSize, StorageClassName: kosinstall.LocalStorageClass},
			Backup: api.Backup{
				Volume:   api.Volume{Size: &configuredBackupSize, StorageClassName: kosinstall.LocalStorageClass},
				Schedule: configuredBackupSchedule,
				Keep:     ptr.To[int32](configuredBackupKeep),
			},
		},
		CNI:        api.CNI{BinDir: configuredCNIBinDir},
		Monitoring: api.Monitoring{SelectorLabels: configuredSelectorLabels, Retention: configuredRetention},
		Patches: []api.Patch{
			// A strategic merge patch, which names its object.
			{Patch: "apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: kos-agent\n  namespace: kos-node\n  annotations:\n    " + configuredAnnotation + ": strategic-merge\n"},
			// A JSON 6902 patch, with its target.
			{
				Target: &api.Target{Kind: "Deployment", Name: "kos-apiserver"},
				Patch:  "- op: add\n  path: /spec/template/metadata/annotations/" + strings.ReplaceAll(configuredAnnotation, "/", "~1") + "\n  value: json6902\n",
			},
		},
	}
	for name, w := range api.Workloads {
		c := api.Component{
			NodeSelector:      kosinstall.NodeLabels(),
			Tolerations:       configuredTolerations(name),
			PriorityClassName: configuredPriorityClass,
			Resources:         map[string]corev1.ResourceRequirements{},
		}
		for _, container := range w.Containers {
			c.Resources[container] = corev1.ResourceRequirements{Limits: configuredLimits.DeepCopy()}
		}
		if w.Replicas {
			c.Replicas = ptr.To(configuredReplicas[name])
		}
		cfg.Components[name] = c
	}
	return cfg
}

// settingCheck is one setting of the configuration as an object shows it.
type settingCheck struct {
	// key is the configuration's key, as docs/install.md writes it.
	key string
	// kind, namespace and name are the object's; an empty name means every
	// object of the kind in the namespace.
	kind, namespace, name string
	// field says where in the object the setting is.
	field string
	want  string
	got   func(obj map[string]any) (string, error)
	// renderOnly, when set, says why the cluster does not run the object:
	// only renders are checked.
	renderOnly string
	// asDefault, when set, says why want is the release's default too, so
	// that a render without the configuration gives it as well.
	asDefault string
	// except is a manifest of the tree whose object of that name has not
	// the setting, by design.
	except string
}

// object names the check's object.
func (c settingCheck) object() string {
	name := c.name
	if name == "" {
		name = "*"
	}
	return c.kind + " " + c.namespace + "/" + name
}

// Why some objects are only rendered.
const (
	notMonitored  = "the cluster does not install kos-monitoring (its images are not in the test's registry)"
	notSingleNode = "the three nodes run the three-member etcd, not the single-node one"
)

// configuredChecks returns where every setting of configuredRelease(p)
// shows, and its value there.
func configuredChecks(p configuredParams) []settingCheck {
	var checks []settingCheck
	add := func(c settingCheck) { checks = append(checks, c) }
	for _, name := range slices.Sorted(maps.Keys(api.Workloads)) {
		w := api.Workloads[name]
		spec := podSpecPath(w.Kind)
		renderOnly := ""
		if w.Namespace == "kos-monitoring" {
			renderOnly = notMonitored
		}
		at := func(key, field string, want any, fields ...string) {
			add(settingCheck{
				key: key, kind: w.Kind, namespace: w.Namespace, name: w.Name, field: field,
				want: valueString(want), got: fieldOf(fields...), renderOnly: renderOnly,
			})
		}
		prefix := "components[" + name + "]"
		specField := strings.Join(spec, ".")
		at("imagePullSecrets", specField+".imagePullSecrets", []corev1.LocalObjectReference{{Name: configuredPullSecret}}, append(spec, "imagePullSecrets")...)
		at(prefix+".nodeSelector", specField+".nodeSelector", kosinstall.NodeLabels(), append(spec, "nodeSelector")...)
		at(prefix+".tolerations", specField+".tolerations", configuredTolerations(name), append(spec, "tolerations")...)
		at(prefix+".priorityClassName", specField+".priorityClassName", configuredPriorityClass, append(spec, "priorityClassName")...)
		if w.Replicas {
			at(prefix+".replicas", "spec.replicas", configuredReplicas[name], "spec", "replicas")
		}
		for _, container := range w.Containers {
			add(settingCheck{
				key:  prefix + ".resources[" + container + "]",
				kind: w.Kind, namespace: w.Namespace, name: w.Name,
				field: "container " + container + " resources.limits",
				want:  valueString(configuredLimits), got: containerField(spec, container, "resources", "limits"),
				renderOnly: renderOnly,
			})
			image := settingCheck{
				key:  "registry",
				kind: w.Kind, namespace: w.Namespace, name: w.Name,
				field: "container " + container + " image, its repository's folder",
				want:  p.registry, got: imageFolder(spec, container),
			}
			switch name {
			case "kos-controller-manager":
				image.key, image.field, image.want, image.got = "images[kos.example.com/kos-controller-manager]", "container "+container+" image", p.controllerManagerImage(), containerField(spec, container, "image")
			case "prometheus", "grafana":
				tag := map[string]string{"prometheus": "prometheus:v2.53.3", "grafana": "grafana:11.3.1"}[name]
				image.key, image.field, image.want, image.got = "images["+map[string]string{"prometheus": "quay.io/prometheus/prometheus", "grafana": "docker.io/grafana/grafana"}[name]+"]", "container "+container+" image", p.mirrorImage(tag), containerField(spec, container, "image")
				image.renderOnly = renderOnly
			}
			add(image)
		}
	}
	etcd := podSpecPath("StatefulSet")
	add(settingCheck{
		key: "etcd.storage.size", kind: "StatefulSet", namespace: kosinstall.Namespace, name: "kos-etcd",
		field: "volumeClaimTemplates[data] spec.resources.requests.storage", want: configuredEtcdSize.String(),
		got: claimTemplateField("resources", "requests", "storage"), except: singleNodeEtcd,
	})
	add(settingCheck{
		key: "etcd.storage.size", kind: "StatefulSet", namespace: kosinstall.Namespace, name: "kos-etcd",
		field: "container etcd flag --quota-backend-bytes", want: strconv.FormatInt(kosrelease.EtcdQuota(configuredEtcdSize.Value()), 10),
		got: containerFlag(etcd, "etcd", "--quota-backend-bytes"),
	})
	add(settingCheck{
		key: "etcd.storage.size", kind: "PersistentVolume", name: "kos-etcd-single-node",
		field: "spec.capacity.storage", want: configuredEtcdSize.String(), got: fieldOf("spec", "capacity", "storage"),
		renderOnly: notSingleNode,
	})
	add(settingCheck{
		key: "etcd.storage.size", kind: "PersistentVolumeClaim", namespace: kosinstall.Namespace, name: "kos-etcd-data",
		field: "spec.resources.requests.storage", want: configuredEtcdSize.String(), got: fieldOf("spec", "resources", "requests", "storage"),
		renderOnly: notSingleNode,
	})
	add(settingCheck{
		key: "etcd.storage.storageClassName", kind: "StatefulSet", namespace: kosinstall.Namespace, name: "kos-etcd",
		field: "volumeClaimTemplates[data] spec.storageClassName", want: kosinstall.LocalStorageClass,
		got: claimTemplateField("storageClassName"), except: singleNodeEtcd,
	})
	add(settingCheck{
		key: "etcd.backup.size", kind: "PersistentVolumeClaim", namespace: kosinstall.Namespace, name: "kos-etcd-backup",
		field: "spec.resources.requests.storage", want: configuredBackupSize.String(), got: fieldOf("spec", "resources", "requests", "storage"),
	})
	add(settingCheck{
		key: "etcd.backup.storageClassName", kind: "PersistentVolumeClaim", namespace: kosinstall.Namespace, name: "kos-etcd-backup",
		field: "spec.storageClassName", want: kosinstall.LocalStorageClass, got: fieldOf("spec", "storageClassName"),
	})
	add(settingCheck{
		key: "etcd.backup.schedule", kind: "CronJob", namespace: kosinstall.Namespace, name: "kos-etcd-backup",
		field: "spec.schedule", want: configuredBackupSchedule, got: fieldOf("spec", "schedule"),
	})
	add(settingCheck{
		key: "etcd.backup.keep", kind: "CronJob", namespace: kosinstall.Namespace, name: "kos-etcd-backup",
		field: "container backup flag --keep", want: strconv.Itoa(configuredBackupKeep), got: containerFlag(podSpecPath("CronJob"), "backup", "--keep"),
	})
	agent := podSpecPath("DaemonSet")
	add(settingCheck{
		key: "cni.binDir", kind: "DaemonSet", namespace: kosinstall.AgentNamespace, name: "kos-agent",
		field: "volume cni-bin hostPath.path", want: configuredCNIBinDir, got: volumeField(agent, "cni-bin", "hostPath", "path"),
		asDefault: "the nodes' runtime finds its plugins in the default folder",
	})
	for _, kind := range []string{"PodMonitor", "PrometheusRule"} {
		add(settingCheck{
			key: "monitoring.selectorLabels", kind: kind, namespace: "kos-monitoring",
			field: "metadata.labels[release]", want: configuredSelectorLabels["release"], got: fieldOf("metadata", "labels", "release"),
			renderOnly: notMonitored,
		})
	}
	add(settingCheck{
		key: "monitoring.retention", kind: "Deployment", namespace: "kos-monitoring", name: "prometheus",
		field: "container prometheus flag --storage.tsdb.retention.time", want: configuredRetention,
		got: containerFlag(podSpecPath("Deployment"), "prometheus", "--storage.tsdb.retention.time"), renderOnly: notMonitored,
	})
	add(settingCheck{
		key: "patches[0]", kind: "DaemonSet", namespace: kosinstall.AgentNamespace, name: "kos-agent",
		field: "metadata.annotations[" + configuredAnnotation + "]", want: "strategic-merge", got: fieldOf("metadata", "annotations", configuredAnnotation),
	})
	add(settingCheck{
		key: "patches[1]", kind: "Deployment", namespace: kosinstall.Namespace, name: "kos-apiserver",
		field: "spec.template.metadata.annotations[" + configuredAnnotation + "]", want: "json6902",
		got: fieldOf("spec", "template", "metadata", "annotations", configuredAnnotation),
	})
	return checks
}

// singleNodeEtcd is the single-node etcd's manifest, whose StatefulSet
// claims kos-etcd-data instead of having a claim template.
const singleNodeEtcd = "addons/kos-etcd-single-node/0.4.0.yaml"

// podSpecPath is where an object of kind holds its pods' spec.
func podSpecPath(kind string) []string {
	if kind == "CronJob" {
		return []string{"spec", "jobTemplate", "spec", "template", "spec"}
	}
	return []string{"spec", "template", "spec"}
}

// errMissing says that an object lacks the field a check reads.
var errMissing = errors.New("no such field")

// fieldOf reads the field at fields.
func fieldOf(fields ...string) func(map[string]any) (string, error) {
	return func(obj map[string]any) (string, error) {
		v, ok, err := unstructured.NestedFieldNoCopy(obj, fields...)
		if err != nil {
			return "", err
		}
		if !ok {
			return "", errMissing
		}
		return valueString(v), nil
	}
}

// container returns the container or init container name of the pod spec
// at spec.
func container(obj map[string]any, spec []string, name string) (map[string]any, error) {
	for _, list := range []string{"initContainers", "containers"} {
		items, _, err := unstructured.NestedSlice(obj, append(slices.Clone(spec), list)...)
		if err != nil {
			return nil, err
		}
		for _, item := range items {
			if c, ok := item.(map[string]any); ok && c["name"] == name {
				return c, nil
			}
		}
	}
	return nil, fmt.Errorf("no container %s", name)
}

// containerField reads a field of a container.
func containerField(spec []string, name string, fields ...string) func(map[string]any) (string, error) {
	return func(obj map[string]any) (string, error) {
		c, err := container(obj, spec, name)
		if err != nil {
			return "", err
		}
		return fieldOf(fields...)(c)
	}
}

// containerFlag reads the value of a container's flag, written
// --flag=value in its command or arguments.
func containerFlag(spec []string, name, flag string) func(map[string]any) (string, error) {
	return func(obj map[string]any) (string, error) {
		c, err := container(obj, spec, name)
		if err != nil {
			return "", err
		}
		for _, list := range []string{"command", "args"} {
			args, _, _ := unstructured.NestedStringSlice(c, list)
			for _, a := range args {
				if v, ok := strings.CutPrefix(a, flag+"="); ok {
					return v, nil
				}
			}
		}
		return "", fmt.Errorf("container %s has no flag %s", name, flag)
	}
}

// imageFolder reads the folder of a container's image: its name without
// the last element, the tag and the digest.
func imageFolder(spec []string, name string) func(map[string]any) (string, error) {
	return func(obj map[string]any) (string, error) {
		image, err := containerField(spec, name, "image")(obj)
		if err != nil {
			return "", err
		}
		image, _, _ = strings.Cut(image, "@")
		if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
			image = image[:i]
		}
		return path.Dir(image), nil
	}
}

// volumeField reads a field of a volume of the pod spec at spec.
func volumeField(spec []string, name string, fields ...string) func(map[string]any) (string, error) {
	return func(obj map[string]any) (string, error) {
		volumes, _, err := unstructured.NestedSlice(obj, append(slices.Clone(spec), "volumes")...)
		if err != nil {
			return "", err
		}
		for _, v := range volumes {
			if m, ok := v.(map[string]any); ok && m["name"] == name {
				return fieldOf(fields...)(m)
			}
		}
		return "", fmt.Errorf("no volume %s", name)
	}
}

// claimTemplateField reads a field of the spec of the StatefulSet's claim
// template data.
func claimTemplateField(fields ...string) func(map[string]any) (string, error) {
	return func(obj map[string]any) (string, error) {
		claims, _, err := unstructured.NestedSlice(obj, "spec", "volumeClaimTemplates")
		if err != nil {
			return "", err
		}
		for _, c := range claims {
			m, _ := c.(map[string]any)
			if n, _, _ := unstructured.NestedString(m, "metadata", "name"); n == "data" {
				return fieldOf(append([]string{"spec"}, fields...)...)(m)
			}
		}
		return "", errors.New("no claim template data")
	}
}

// valueString writes v as a check compares it: a string as it is, anything
// else as JSON with sorted keys, as it reads from an object decoded from
// YAML or from the API alike.
func valueString(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%v", v)
	}
	var generic any
	if err := json.Unmarshal(data, &generic); err != nil {
		return string(data)
	}
	if s, ok := generic.(string); ok {
		return s
	}
	data, _ = json.Marshal(generic)
	return string(data)
}

// settingResult is a check's outcome on one object.
type settingResult struct {
	check settingCheck
	// where names the object read: its file, or "live".
	where string
	got   string
	err   error
}

// ok says whether the object has the setting.
func (r settingResult) ok() bool { return r.err == nil && r.got == r.check.want }

// runChecks runs every check on the objects objects returns for it.
func runChecks(checks []settingCheck, objects func(settingCheck) ([]sourcedObject, error)) []settingResult {
	var out []settingResult
	for _, c := range checks {
		objs, err := objects(c)
		if err == nil && len(objs) == 0 {
			err = errors.New("no such object")
		}
		if err != nil {
			out = append(out, settingResult{check: c, err: err})
			continue
		}
		for _, o := range objs {
			got, err := c.got(o.obj)
			out = append(out, settingResult{check: c, where: o.where, got: got, err: err})
		}
	}
	return out
}

// settingsTable writes the results as a table: key, object, field, want,
// got.
func settingsTable(results []settingResult) string {
	var b bytes.Buffer
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "KEY\tOBJECT\tWHERE\tFIELD\tWANT\tGOT\t")
	for _, r := range results {
		got := r.got
		if r.err != nil {
			got = "error: " + r.err.Error()
		}
		mark := ""
		if !r.ok() {
			mark = "  <- differs"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.check.key, r.check.object(), r.where, r.check.field, r.check.want, got, mark)
	}
	w.Flush()
	return b.String()
}

// reportSettings logs the table and fails t naming each setting that an
// object does not have.
func reportSettings(t *testing.T, results []settingResult) {
	t.Helper()
	t.Logf("the configuration's settings:\n%s", settingsTable(results))
	for _, r := range results {
		switch {
		case r.err != nil:
			t.Errorf("%s: %s %s (%s): %v, want %s", r.check.key, r.check.object(), r.where, r.check.field, r.err, r.check.want)
		case !r.ok():
			t.Errorf("%s: %s %s (%s) is %s, want %s", r.check.key, r.check.object(), r.where, r.check.field, r.got, r.check.want)
		}
	}
}

// sourcedObject is an object and where it was read.
type sourcedObject struct {
	where string
	obj   map[string]any
}

// treeObjects reads every object of the manifests of a release tree (not
// its channels), by kind, namespace and name.
func treeObjects(tree string) (map[string][]sourcedObject, error) {
	out := map[string][]sourcedObject{}
	err := filepath.WalkDir(filepath.Join(tree, "addons"), func(file string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(file, ".yaml") {
			return err
		}
		f, err := os.Open(file)
		if err != nil {
			return err
		}
		defer f.Close()
		rel, _ := filepath.Rel(tree, file)
		r := utilyaml.NewYAMLReader(bufio.NewReader(f))
		for {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("reading %s: %w", rel, err)
			}
			var obj map[string]any
			if err := yaml.Unmarshal(doc, &obj); err != nil {
				return fmt.Errorf("reading %s: %w", rel, err)
			}
			u := unstructured.Unstructured{Object: obj}
			if obj == nil || u.GetKind() == "Addons" {
				continue
			}
			key := settingObjectKey(u.GetKind(), u.GetNamespace(), u.GetName())
			out[key] = append(out[key], sourcedObject{where: filepath.ToSlash(rel), obj: obj})
		}
	})
	return out, err
}

// settingObjectKey keys objects by kind, namespace and name.
func settingObjectKey(kind, namespace, name string) string {
	return kind + "/" + namespace + "/" + name
}

// renderedObjects returns the objects of a tree a check reads.
func renderedObjects(objs map[string][]sourcedObject) func(settingCheck) ([]sourcedObject, error) {
	return func(c settingCheck) ([]sourcedObject, error) {
		var out []sourcedObject
		for _, key := range slices.Sorted(maps.Keys(objs)) {
			if key == settingObjectKey(c.kind, c.namespace, c.name) || c.name == "" && strings.HasPrefix(key, settingObjectKey(c.kind, c.namespace, "")) {
				out = append(out, objs[key]...)
			}
		}
		return slices.DeleteFunc(out, func(o sourcedObject) bool { return o.where == c.except }), nil
	}
}

// renderConfigured writes cfg to a file in dir and renders it with the
// kos-release command bin, as an operator runs it, into dir/release; with
// resolve, pinning the images by digest. It returns the tree's folder.
func renderConfigured(t *testing.T, bin, dir string, cfg *api.ReleaseConfig, resolve bool) string {
	t.Helper()
	data, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "release-config.yaml")
	if err := os.WriteFile(config, data, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("the release configuration:\n%s", data)
	tree := filepath.Join(dir, "release")
	args := []string{"render", "--config", config, "--out", tree}
	if resolve {
		args = append(args, "--resolve")
	}
	renderTree(t, bin, args...)
	return tree
}

// renderTree runs kos-release (bin) with args.
func renderTree(t *testing.T, bin string, args ...string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), bin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if _, err := cmd.Output(); err != nil {
		t.Fatalf("kos-release %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
}

// configLeaves returns the keys of a ReleaseConfig, from its type: each
// field of the package's own structs, with "[]" for a map's key ("components[].replicas").
func configLeaves(t reflect.Type, prefix string) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "apiVersion" || name == "kind" {
			continue
		}
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		own := func(t reflect.Type) bool {
			return t.Kind() == reflect.Struct && t.PkgPath() == reflect.TypeFor[api.ReleaseConfig]().PkgPath()
		}
		switch {
		case strings.Contains(","+opts, ",inline"):
			out = append(out, configLeaves(ft, prefix)...)
		case own(ft):
			out = append(out, configLeaves(ft, prefix+name+".")...)
		case ft.Kind() == reflect.Map && own(ft.Elem()):
			out = append(out, configLeaves(ft.Elem(), prefix+name+"[].")...)
		default:
			out = append(out, prefix+name)
		}
	}
	return out
}

// keyPattern finds the map keys of a configuration key.
var keyPattern = regexp.MustCompile(`\[[^\]]*\]`)

// TestConfiguredRelease renders the configuration that sets every key
// with kos-release, as the cluster step does but without resolving images,
// and checks that every key is set, that every setting reaches every
// rendered object that should have it, and that it is not what a render
// without the configuration gives (but where the table says why).
func TestConfiguredRelease(t *testing.T) {
	bin := testenv.Build(t, "cmd/kos-release")
	p := configuredParams{registry: "10.0.0.1:5000/kos", controllerManagerDigest: "sha256:" + strings.Repeat("0", 63) + "1"}
	checks := configuredChecks(p)

	t.Run("every key", func(t *testing.T) {
		var covered []string
		for _, c := range checks {
			covered = append(covered, keyPattern.ReplaceAllString(c.key, "[]"))
		}
		for _, leaf := range configLeaves(reflect.TypeFor[api.ReleaseConfig](), "") {
			if !slices.ContainsFunc(covered, func(k string) bool {
				return k == leaf || strings.HasPrefix(k, leaf+"[") || strings.HasPrefix(k, leaf+".")
			}) {
				t.Errorf("no check reads key %s", leaf)
			}
		}
		cfg := configuredRelease(p)
		for name, w := range api.Workloads {
			c := cfg.Components[name]
			if c.NodeSelector == nil || c.Tolerations == nil || c.PriorityClassName == "" || len(c.Resources) != len(w.Containers) || w.Replicas != (c.Replicas != nil) {
				t.Errorf("components[%s] does not set every key: %+v", name, c)
			}
		}
	})

	dir := t.TempDir()
	tree := renderConfigured(t, bin, dir, configuredRelease(p), false)
	objs, err := treeObjects(tree)
	if err != nil {
		t.Fatal(err)
	}
	results := runChecks(checks, renderedObjects(objs))
	reportSettings(t, results)
	for _, want := range []string{"addons/kos-agent/0.4.0-k8s-1.29.yaml", "addons/kos-agent-userspace/0.4.0-k8s-1.30.yaml", "addons/kos-apiserver/0.4.0-k8s-1.29.yaml", "addons/kos-apiserver/0.4.0-k8s-1.30.yaml"} {
		if !slices.ContainsFunc(results, func(r settingResult) bool { return r.where == want }) {
			t.Errorf("no setting was read from %s: every variant has the settings", want)
		}
	}

	// A render without the configuration has none of them.
	plain := filepath.Join(dir, "plain")
	renderTree(t, bin, "render", "--out", plain)
	plainObjs, err := treeObjects(plain)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range runChecks(checks, renderedObjects(plainObjs)) {
		if r.ok() && r.check.asDefault == "" {
			t.Errorf("%s: %s %s (%s) is %s without the configuration too: the check cannot tell that the key reached it", r.check.key, r.check.object(), r.where, r.check.field, r.got)
		}
		if !r.ok() && r.check.asDefault != "" {
			t.Errorf("%s: %s %s (%s) is %s without the configuration, but the table says %s is the default (%s)", r.check.key, r.check.object(), r.where, r.check.field, r.got, r.check.want, r.check.asDefault)
		}
	}
}

// testConfiguredRelease installs, over the standard release, the release
// rendered by kos-release from the configuration that sets every key: as
// an operator does it, with the pull Secret and the PriorityClass it names
// made first, the etcd members' StatefulSet and the backup claim let go as
// docs/install.md says (their volume settings reach no running object
// otherwise), the tree published on an HTTPS server and applied with our
// channels. Once KOS is ready, the guests ping across the nodes, new
// attachments on every node do too, and every setting is read back from
// the live objects.
func (o *operate) testConfiguredRelease(t *testing.T) {
	ctx := t.Context()
	began := time.Now()
	bin := testenv.Build(t, "cmd/kos-release")
	o.channelsBin = testenv.Build(t, "cmd/channels")

	pc := &schedulingv1.PriorityClass{
		ObjectMeta:  metav1.ObjectMeta{Name: configuredPriorityClass},
		Value:       1000000,
		Description: "KOS's pods in the configured release of the e2e tests",
	}
	if _, err := o.kube.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The registry asks for no credentials: these are never used, as an
	// operator's would be for a registry that asks.
	for _, ns := range kosinstall.Namespaces() {
		o.kubectl(t, "-n", ns, "create", "secret", "docker-registry", configuredPullSecret,
			"--docker-server="+o.env.Registry, "--docker-username=e2e", "--docker-password=e2e")
	}
	// kos-controller-manager's image by digest alone, the one the standard
	// install pinned.
	cm, err := o.kube.AppsV1().Deployments(kosinstall.Namespace).Get(ctx, "kos-controller-manager", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var digest string
	for _, c := range cm.Spec.Template.Spec.Containers {
		if c.Name == "kos-controller-manager" {
			_, digest, _ = strings.Cut(c.Image, "@")
		}
	}
	if digest == "" {
		t.Fatalf("kos-controller-manager's container has no image pinned by digest: %+v", cm.Spec.Template.Spec.Containers)
	}
	p := configuredParams{registry: o.env.Registry + "/" + registryPrefix, controllerManagerDigest: digest}

	tree := renderConfigured(t, bin, o.t.TempDir(), configuredRelease(p), true)
	userspace, err := kosinstall.WriteUserspaceAgentChannel(tree)
	if err != nil {
		t.Fatal(err)
	}
	o.https = serveTree(t, o.t, o.env.Nodes[0].HostIP, tree)
	figures.Duration(t, "operate-configured-rendered", time.Since(began))

	// The volume settings, as docs/install.md says: the members'
	// StatefulSet goes (not its pods nor their claims), and so does the
	// backup claim with the volume it was bound to; the new claim gets a
	// volume of its size.
	o.runDoc(t, o.runbook(t, filepath.Join(o.root, "docs", "install.md"), "### Changing etcd's volumes on a running cluster")...)
	o.kubectl(t, "delete", "pv", backupVolume, "--timeout=60s")
	o.provideBackupVolume(t, backupVolume+"-configured", configuredBackupSize)

	applied := time.Now()
	o.userspace = userspace
	o.channels = o.channelsAt(o.https.URL)
	// Each addon rolls its pods, etcd's three members one at a time: on a
	// loaded machine that may take longer than channels' default wait.
	out := o.channelsProcess(t, append(append([]string{"apply", "channel"}, o.channels...), "--yes", "--timeout=10m")...)
	for _, name := range []string{"kos-etcd", "kos-apiserver", "kos-controller-manager", "kos-agent"} {
		if !strings.Contains(out, name+": Updated ") {
			t.Errorf("the apply of the configured release says nothing of updating %s:\n%s", name, out)
		}
	}
	o.waitKOSReady(t, 10*time.Minute)
	figures.Duration(t, "operate-configured-apply-to-ready", time.Since(applied))

	// The agents' pods were replaced, with their Open vSwitch: the guests
	// get their new interfaces, then new attachments on every node.
	for name := range o.guests {
		o.plumb(t, name)
	}
	checkPings(t, o.guestsOf("blue"), 3, 1, time.Minute)
	o.addNetwork(t, "green", "10.253.1.0/24", 4302)
	figures.Duration(t, "operate-configured-apply-to-pinging", time.Since(applied))

	live, err := o.liveObjects()
	if err != nil {
		t.Fatal(err)
	}
	var installed []settingCheck
	for _, c := range configuredChecks(p) {
		if c.renderOnly == "" {
			installed = append(installed, c)
		}
	}
	reportSettings(t, runChecks(installed, live))
	// And the pods run with them.
	for _, pod := range o.kosPods(t) {
		if pod.DeletionTimestamp != nil {
			continue
		}
		if pod.Spec.PriorityClassName != configuredPriorityClass || len(pod.Spec.ImagePullSecrets) != 1 || pod.Spec.ImagePullSecrets[0].Name != configuredPullSecret {
			t.Errorf("pod %s/%s runs with priority class %q and pull secrets %v, want %s and %s", pod.Namespace, pod.Name, pod.Spec.PriorityClassName, pod.Spec.ImagePullSecrets, configuredPriorityClass, configuredPullSecret)
		}
	}
}

// addNetwork makes subnet name with an attachment on every node, each given
// to a guest, and checks they ping each other.
func (o *operate) addNetwork(t *testing.T, name, cidr string, vni uint32) {
	t.Helper()
	o.createSubnet(t, name, cidr, vni)
	for i, n := range o.env.Nodes {
		o.plumb(t, o.attach(t, fmt.Sprintf("%s-%d", name, i+1), name, n.Name))
	}
	checkPings(t, o.guestsOf(name), 3, 1, time.Minute)
}

// createSubnet makes subnet name of the operate test's namespace.
func (o *operate) createSubnet(t *testing.T, name, cidr string, vni uint32) {
	t.Helper()
	subnet := &networkv1alpha1.Subnet{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       networkv1alpha1.SubnetSpec{IPv4: cidr, VNI: vni},
	}
	if _, err := o.network.NetworkV1alpha1().Subnets(standardNamespace).Create(t.Context(), subnet, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	o.subnets[name] = netip.MustParsePrefix(cidr)
}

// liveResources are the resources of the kinds the installed checks read.
var liveResources = map[string]schema.GroupVersionResource{
	"Deployment":            {Group: "apps", Version: "v1", Resource: "deployments"},
	"StatefulSet":           {Group: "apps", Version: "v1", Resource: "statefulsets"},
	"DaemonSet":             {Group: "apps", Version: "v1", Resource: "daemonsets"},
	"CronJob":               {Group: "batch", Version: "v1", Resource: "cronjobs"},
	"PersistentVolumeClaim": {Version: "v1", Resource: "persistentvolumeclaims"},
}

// liveObjects returns the live objects a check reads.
func (o *operate) liveObjects() (func(settingCheck) ([]sourcedObject, error), error) {
	dyn, err := dynamic.NewForConfig(o.env.RESTConfig)
	if err != nil {
		return nil, err
	}
	return func(c settingCheck) ([]sourcedObject, error) {
		gvr, ok := liveResources[c.kind]
		if !ok || c.name == "" {
			return nil, fmt.Errorf("the test reads no live %s", c.kind)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		u, err := dyn.Resource(gvr).Namespace(c.namespace).Get(ctx, c.name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		return []sourcedObject{{where: "live", obj: u.Object}}, nil
	}, nil
}
