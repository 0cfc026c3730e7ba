package release

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kos-sdn/kos/addons"
	"github.com/kos-sdn/kos/channels"
	"github.com/kos-sdn/kos/release/api"
)

func modules(t *testing.T) map[string]string {
	t.Helper()
	m, err := KOSModules()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestRenderCommitted renders the source as make addons does, from the
// embedded copy kos-release carries, and compares with the repository's
// manifests.
func TestRenderCommitted(t *testing.T) {
	r, err := NewRenderer(addons.FS, nil, modules(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range Targets {
		t.Run(target.File(), func(t *testing.T) {
			got, err := r.Render(target)
			if err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(filepath.Join("..", "addons", filepath.FromSlash(target.File())))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("the render differs from the committed manifest (run make addons):\n%s", cmp.Diff(string(got), string(want)))
			}
		})
	}
}

func everyKey(t *testing.T) *api.ReleaseConfig {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "every-key.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := api.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func writeTree(t *testing.T, cfg *api.ReleaseConfig) string {
	t.Helper()
	out := t.TempDir()
	if _, err := WriteTree(context.Background(), TreeOptions{Source: addons.FS, Out: out, Config: cfg, Modules: modules(t)}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestWriteTreeTwice writes a configured release twice: the same bytes.
func TestWriteTreeTwice(t *testing.T) {
	cfg := everyKey(t)
	a, b := writeTree(t, cfg), writeTree(t, cfg)
	files := 0
	err := filepath.WalkDir(a, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(a, p)
		x, _ := os.ReadFile(p)
		y, err := os.ReadFile(filepath.Join(b, rel))
		if err != nil {
			return err
		}
		if !bytes.Equal(x, y) {
			t.Errorf("%s differs between two renders", rel)
		}
		files++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := len(Targets) + len(Channels); files != want {
		t.Errorf("the tree holds %d files, want %d", files, want)
	}
}

// tree is the objects of a release tree, by manifest.
type tree map[string][]*unstructured.Unstructured

func loadTree(t *testing.T, out string) tree {
	t.Helper()
	tr := tree{}
	for _, target := range Targets {
		data, err := os.ReadFile(filepath.Join(out, "addons", filepath.FromSlash(target.File())))
		if err != nil {
			t.Fatal(err)
		}
		objs, err := channels.DecodeObjects(data)
		if err != nil {
			t.Fatal(err)
		}
		tr[target.File()] = objs
	}
	return tr
}

// find returns the objects of that kind and name across the tree, by
// manifest.
func (tr tree) find(kind, name string) map[string]*unstructured.Unstructured {
	out := map[string]*unstructured.Unstructured{}
	for file, objs := range tr {
		for _, u := range objs {
			if u.GetKind() == kind && u.GetName() == name {
				out[file] = u
			}
		}
	}
	return out
}

func typed[T any](t *testing.T, u *unstructured.Unstructured) *T {
	t.Helper()
	obj := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, obj); err != nil {
		t.Fatal(err)
	}
	return obj
}

// podSpec returns the pod template spec of a workload.
func podSpec(t *testing.T, u *unstructured.Unstructured) corev1.PodSpec {
	t.Helper()
	switch u.GetKind() {
	case "Deployment":
		return typed[appsv1.Deployment](t, u).Spec.Template.Spec
	case "DaemonSet":
		return typed[appsv1.DaemonSet](t, u).Spec.Template.Spec
	case "StatefulSet":
		return typed[appsv1.StatefulSet](t, u).Spec.Template.Spec
	case "CronJob":
		return typed[batchv1.CronJob](t, u).Spec.JobTemplate.Spec.Template.Spec
	}
	t.Fatalf("%s %s has no pods", u.GetKind(), u.GetName())
	return corev1.PodSpec{}
}

func container(t *testing.T, spec corev1.PodSpec, name string) corev1.Container {
	t.Helper()
	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %s", name)
	return corev1.Container{}
}

func arg(c corev1.Container, flag string) string {
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
	}
	return ""
}

func rl(kv ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}

// check is what one setting of testdata/every-key.yaml makes of one
// object, in every manifest that has it.
type check struct {
	name string
	kind string
	obj  string
	// files are the manifests the object must be in.
	files []string
	got   func(t *testing.T, u *unstructured.Unstructured) any
	want  any
}

// everyKeyChecks are the checks of every setting of
// testdata/every-key.yaml.
func everyKeyChecks() []check {
	agents := []string{"kos-agent/0.4.0-k8s-1.29.yaml", "kos-agent/0.4.0-k8s-1.30.yaml", "kos-agent-userspace/0.4.0-k8s-1.29.yaml", "kos-agent-userspace/0.4.0-k8s-1.30.yaml"}
	apiservers := []string{"kos-apiserver/0.4.0-k8s-1.29.yaml", "kos-apiserver/0.4.0-k8s-1.30.yaml"}
	etcds := []string{"kos-etcd/0.4.0.yaml", "kos-etcd-single-node/0.4.0.yaml"}
	cm := []string{"kos-controller-manager/0.4.0.yaml"}
	etcd := []string{"kos-etcd/0.4.0.yaml"}
	single := []string{"kos-etcd-single-node/0.4.0.yaml"}
	mon := []string{"kos-monitoring/0.4.0.yaml"}
	op := []string{"kos-monitoring/prometheus-operator/0.4.0.yaml"}
	image := func(name string) func(t *testing.T, u *unstructured.Unstructured) any {
		return func(t *testing.T, u *unstructured.Unstructured) any { return container(t, podSpec(t, u), name).Image }
	}
	nodeSelector := func(t *testing.T, u *unstructured.Unstructured) any { return podSpec(t, u).NodeSelector }
	tolerations := func(t *testing.T, u *unstructured.Unstructured) any { return podSpec(t, u).Tolerations }
	priority := func(t *testing.T, u *unstructured.Unstructured) any { return podSpec(t, u).PriorityClassName }
	resources := func(name string) func(t *testing.T, u *unstructured.Unstructured) any {
		return func(t *testing.T, u *unstructured.Unstructured) any {
			return container(t, podSpec(t, u), name).Resources
		}
	}
	flag := func(name, f string) func(t *testing.T, u *unstructured.Unstructured) any {
		return func(t *testing.T, u *unstructured.Unstructured) any { return arg(container(t, podSpec(t, u), name), f) }
	}
	pullSecrets := func(t *testing.T, u *unstructured.Unstructured) any { return podSpec(t, u).ImagePullSecrets }
	secrets := []corev1.LocalObjectReference{{Name: "pull-secret"}}
	labels := func(t *testing.T, u *unstructured.Unstructured) any { return u.GetLabels()["release"] }
	annotation := func(t *testing.T, u *unstructured.Unstructured) any { return u.GetAnnotations()["example.org/patched"] }
	checks := []check{
		{"registry", "Deployment", "kos-apiserver", apiservers, image("kos-apiserver"), "registry.example.org/kos/kos-apiserver:0.4.0"},
		{"registry", "Deployment", "kos-controller-manager", cm, image("kos-controller-manager"), "registry.example.org/kos/kos-controller-manager:0.4.0"},
		{"registry", "DaemonSet", "kos-agent", agents, image("install-cni"), "registry.example.org/kos/kos-agent:0.4.0"},
		{"registry", "StatefulSet", "kos-etcd", etcds, image("etcd"), "registry.example.org/kos/etcd:3.6.4"},
		{"registry", "CronJob", "kos-etcd-backup", etcd, image("backup"), "registry.example.org/kos/kos-apiserver:0.4.0"},
		{"images", "Deployment", "prometheus", mon, image("prometheus"), "mirror.example.org/prometheus:v2.53.3"},
		{"images", "Deployment", "grafana", mon, image("grafana"), "mirror.example.org/grafana@sha256:0000000000000000000000000000000000000000000000000000000000000001"},
		{"imagePullSecrets", "Deployment", "kos-apiserver", apiservers, pullSecrets, secrets},
		{"imagePullSecrets", "Deployment", "kos-pki", apiservers, pullSecrets, secrets},
		{"imagePullSecrets", "Deployment", "kos-controller-manager", cm, pullSecrets, secrets},
		{"imagePullSecrets", "DaemonSet", "kos-agent", agents, pullSecrets, secrets},
		{"imagePullSecrets", "StatefulSet", "kos-etcd", etcds, pullSecrets, secrets},
		{"imagePullSecrets", "CronJob", "kos-etcd-backup", etcd, pullSecrets, secrets},
		{"imagePullSecrets", "Deployment", "prometheus", mon, pullSecrets, secrets},
		{"imagePullSecrets", "Deployment", "grafana", mon, pullSecrets, secrets},
		{"components.kos-apiserver.replicas", "Deployment", "kos-apiserver", apiservers, func(t *testing.T, u *unstructured.Unstructured) any {
			return *typed[appsv1.Deployment](t, u).Spec.Replicas
		}, int32(3)},
		{"components.kos-apiserver.nodeSelector", "Deployment", "kos-apiserver", apiservers, nodeSelector, map[string]string{"pool": "kos-control"}},
		{"components.kos-apiserver.tolerations", "Deployment", "kos-apiserver", apiservers, tolerations, []corev1.Toleration{{Key: "dedicated", Operator: "Equal", Value: "kos", Effect: "NoSchedule"}}},
		{"components.kos-apiserver.priorityClassName", "Deployment", "kos-apiserver", apiservers, priority, "kos-critical"},
		{"components.kos-apiserver.resources", "Deployment", "kos-apiserver", apiservers, resources("kos-apiserver"), corev1.ResourceRequirements{Requests: rl("cpu", "200m", "memory", "256Mi"), Limits: rl("cpu", "2", "memory", "1Gi")}},
		{"components.kos-controller-manager.replicas", "Deployment", "kos-controller-manager", cm, func(t *testing.T, u *unstructured.Unstructured) any {
			return *typed[appsv1.Deployment](t, u).Spec.Replicas
		}, int32(1)},
		{"components.kos-controller-manager.nodeSelector", "Deployment", "kos-controller-manager", cm, nodeSelector, map[string]string{"pool": "kos-control"}},
		// Merged: the manifest's requests stay.
		{"components.kos-controller-manager.resources", "Deployment", "kos-controller-manager", cm, resources("kos-controller-manager"), corev1.ResourceRequirements{Requests: rl("cpu", "100m", "memory", "64Mi"), Limits: rl("memory", "512Mi")}},
		{"components.kos-pki.nodeSelector", "Deployment", "kos-pki", apiservers, nodeSelector, map[string]string{"pool": "kos-control"}},
		{"components.kos-pki.priorityClassName", "Deployment", "kos-pki", apiservers, priority, "kos-critical"},
		{"components.kos-etcd.nodeSelector", "StatefulSet", "kos-etcd", etcds, nodeSelector, map[string]string{"pool": "kos-etcd"}},
		{"components.kos-etcd.tolerations", "StatefulSet", "kos-etcd", etcds, tolerations, []corev1.Toleration{{Key: "dedicated", Operator: "Exists"}}},
		{"components.kos-etcd.resources", "StatefulSet", "kos-etcd", etcds, func(t *testing.T, u *unstructured.Unstructured) any {
			return container(t, podSpec(t, u), "etcd").Resources.Limits
		}, rl("memory", "2Gi")},
		{"components.kos-etcd-backup.nodeSelector", "CronJob", "kos-etcd-backup", etcd, nodeSelector, map[string]string{"pool": "kos-etcd"}},
		{"components.kos-etcd-backup.resources", "CronJob", "kos-etcd-backup", etcd, func(t *testing.T, u *unstructured.Unstructured) any {
			return container(t, podSpec(t, u), "backup").Resources.Limits
		}, rl("cpu", "500m")},
		{"components.kos-agent.tolerations", "DaemonSet", "kos-agent", agents, tolerations, []corev1.Toleration{{Operator: "Exists", Effect: "NoExecute"}}},
		{"components.kos-agent.priorityClassName", "DaemonSet", "kos-agent", agents, priority, "kos-node-critical"},
		{"components.kos-agent.resources.kos-agent", "DaemonSet", "kos-agent", agents, func(t *testing.T, u *unstructured.Unstructured) any {
			return container(t, podSpec(t, u), "kos-agent").Resources.Limits
		}, rl("cpu", "1", "memory", "512Mi")},
		{"components.kos-agent.resources.ovs", "DaemonSet", "kos-agent", agents, func(t *testing.T, u *unstructured.Unstructured) any {
			return container(t, podSpec(t, u), "ovs").Resources.Limits
		}, rl("memory", "1Gi")},
		{"components.kos-agent.resources.install-cni", "DaemonSet", "kos-agent", agents, func(t *testing.T, u *unstructured.Unstructured) any {
			return container(t, podSpec(t, u), "install-cni").Resources.Limits
		}, rl("cpu", "100m")},
		{"components.prometheus.nodeSelector", "Deployment", "prometheus", mon, nodeSelector, map[string]string{"pool": "monitoring"}},
		{"components.prometheus.resources", "Deployment", "prometheus", mon, func(t *testing.T, u *unstructured.Unstructured) any {
			return container(t, podSpec(t, u), "prometheus").Resources.Limits
		}, rl("memory", "2Gi")},
		{"components.grafana.nodeSelector", "Deployment", "grafana", mon, nodeSelector, map[string]string{"pool": "monitoring"}},
		{"etcd.storage.size", "StatefulSet", "kos-etcd", etcd, func(t *testing.T, u *unstructured.Unstructured) any {
			return typed[appsv1.StatefulSet](t, u).Spec.VolumeClaimTemplates[0].Spec.Resources.Requests.Storage().String()
		}, "10Gi"},
		{"etcd.storage.size (quota)", "StatefulSet", "kos-etcd", etcds, flag("etcd", "--quota-backend-bytes"), fmt.Sprint(EtcdQuota(10 << 30))},
		{"etcd.storage.size (single node)", "PersistentVolume", "kos-etcd-single-node", single, func(t *testing.T, u *unstructured.Unstructured) any {
			return typed[corev1.PersistentVolume](t, u).Spec.Capacity.Storage().String()
		}, "10Gi"},
		{"etcd.storage.size (single node)", "PersistentVolumeClaim", "kos-etcd-data", single, func(t *testing.T, u *unstructured.Unstructured) any {
			return typed[corev1.PersistentVolumeClaim](t, u).Spec.Resources.Requests.Storage().String()
		}, "10Gi"},
		{"etcd.storage.storageClassName", "StatefulSet", "kos-etcd", etcd, func(t *testing.T, u *unstructured.Unstructured) any {
			return *typed[appsv1.StatefulSet](t, u).Spec.VolumeClaimTemplates[0].Spec.StorageClassName
		}, "fast-ssd"},
		{"etcd.backup.size", "PersistentVolumeClaim", "kos-etcd-backup", etcd, func(t *testing.T, u *unstructured.Unstructured) any {
			return typed[corev1.PersistentVolumeClaim](t, u).Spec.Resources.Requests.Storage().String()
		}, "40Gi"},
		{"etcd.backup.storageClassName", "PersistentVolumeClaim", "kos-etcd-backup", etcd, func(t *testing.T, u *unstructured.Unstructured) any {
			return *typed[corev1.PersistentVolumeClaim](t, u).Spec.StorageClassName
		}, "cheap-hdd"},
		{"etcd.backup.schedule", "CronJob", "kos-etcd-backup", etcd, func(t *testing.T, u *unstructured.Unstructured) any {
			return typed[batchv1.CronJob](t, u).Spec.Schedule
		}, "5 * * * *"},
		{"etcd.backup.keep", "CronJob", "kos-etcd-backup", etcd, flag("backup", "--keep"), "24"},
		{"cni.binDir", "DaemonSet", "kos-agent", agents, func(t *testing.T, u *unstructured.Unstructured) any {
			for _, v := range podSpec(t, u).Volumes {
				if v.Name == "cni-bin" {
					return v.HostPath.Path
				}
			}
			return nil
		}, "/usr/libexec/cni"},
		{"monitoring.selectorLabels", "PodMonitor", "kos", op, labels, "prometheus"},
		{"monitoring.selectorLabels", "PodMonitor", "kos-apiserver", op, labels, "prometheus"},
		{"monitoring.selectorLabels", "PrometheusRule", "kos", op, labels, "prometheus"},
		{"monitoring.retention", "Deployment", "prometheus", mon, flag("prometheus", "--storage.tsdb.retention.time"), "15d"},
		{"patches[0] (JSON 6902)", "Deployment", "kos-apiserver", apiservers, annotation, "json6902"},
		{"patches[1] (strategic merge)", "DaemonSet", "kos-agent", agents, annotation, "strategic-merge"},
	}
	return checks
}

// runChecks runs checks on the objects of tr; a manifest not in tr (not
// applied) is skipped, and each check must have run on some manifest.
func runChecks(t *testing.T, tr tree, checks []check) {
	t.Helper()
	for _, c := range checks {
		t.Run(c.name+"/"+c.kind+"/"+c.obj, func(t *testing.T) {
			found := tr.find(c.kind, c.obj)
			ran := 0
			for _, file := range c.files {
				if _, applied := tr[file]; !applied {
					continue
				}
				u, ok := found[file]
				if !ok {
					t.Errorf("%s: no %s %s", file, c.kind, c.obj)
					continue
				}
				ran++
				if diff := cmp.Diff(c.got(t, u), c.want); diff != "" {
					t.Errorf("%s: %s %s (-got +want):\n%s", file, c.kind, c.obj, diff)
				}
			}
			if ran == 0 {
				t.Errorf("%s: no manifest with %s %s", c.name, c.kind, c.obj)
			}
		})
	}
}

// TestEveryKey renders a release with a configuration that sets every key
// and reads each setting back from the rendered objects.
func TestEveryKey(t *testing.T) {
	runChecks(t, loadTree(t, writeTree(t, everyKey(t))), everyKeyChecks())
}

// TestBackupClaimTakesMembersClass renders a release that names only the
// members' StorageClass: the backup claim takes it too (a cluster that
// needs the class named has no default for the claim either), and a class
// of the backup's own wins.
func TestBackupClaimTakesMembersClass(t *testing.T) {
	class := func(t *testing.T, u *unstructured.Unstructured) any {
		return *typed[corev1.PersistentVolumeClaim](t, u).Spec.StorageClassName
	}
	etcd := []string{"kos-etcd/0.4.0.yaml"}
	cfg := &api.ReleaseConfig{APIVersion: api.APIVersion, Kind: api.Kind}
	cfg.Etcd.Storage.StorageClassName = "fast-ssd"
	runChecks(t, loadTree(t, writeTree(t, cfg)), []check{{"etcd.storage.storageClassName", "PersistentVolumeClaim", "kos-etcd-backup", etcd, class, "fast-ssd"}})
	cfg.Etcd.Backup.StorageClassName = "cheap-hdd"
	runChecks(t, loadTree(t, writeTree(t, cfg)), []check{{"etcd.backup.storageClassName", "PersistentVolumeClaim", "kos-etcd-backup", etcd, class, "cheap-hdd"}})
}

// TestPatchMatchingNothing is refused: a patch that patches nothing is a
// mistake (a name misspelled).
func TestPatchMatchingNothing(t *testing.T) {
	cfg := &api.ReleaseConfig{APIVersion: api.APIVersion, Kind: api.Kind, Patches: []api.Patch{
		{Target: &api.Target{Kind: "Deployment", Name: "kos-apiserver"}, Patch: `[{"op": "add", "path": "/metadata/annotations", "value": {"a": "b"}}]`},
		{Target: &api.Target{Kind: "Deployment", Name: "kos-apiservr"}, Patch: `[{"op": "add", "path": "/metadata/annotations", "value": {"a": "b"}}]`},
	}}
	_, err := WriteTree(context.Background(), TreeOptions{Source: addons.FS, Out: t.TempDir(), Config: cfg, Modules: modules(t)})
	if err == nil || err.Error() != "patches[1] matches no object of the release" {
		t.Errorf("WriteTree: %v, want patches[1] matches no object of the release", err)
	}
}

// TestPatchThatFails names the patch's file and what kustomize said.
func TestPatchThatFails(t *testing.T) {
	cfg := &api.ReleaseConfig{APIVersion: api.APIVersion, Kind: api.Kind, Patches: []api.Patch{
		{Target: &api.Target{Kind: "Deployment", Name: "kos-apiserver"}, Patch: `[{"op": "remove", "path": "/spec/nothing"}]`},
	}}
	_, err := WriteTree(context.Background(), TreeOptions{Source: addons.FS, Out: t.TempDir(), Config: cfg, Modules: modules(t)})
	if err == nil || !strings.Contains(err.Error(), "kos-apiserver/0.4.0-k8s-1.29.yaml: applying the release configuration") {
		t.Errorf("WriteTree: %v, want an error naming the manifest", err)
	}
}
