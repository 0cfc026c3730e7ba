package e2e

import (
	"maps"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	kosrelease "github.com/kos-sdn/kos/release"
	"github.com/kos-sdn/kos/release/api"
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
