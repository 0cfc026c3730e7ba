package api

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
)

const head = "apiVersion: kos.example.com/v1alpha1\nkind: ReleaseConfig\n"

func TestDecodeEveryKey(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "testdata", "every-key.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	size := resource.MustParse("10Gi")
	backup := resource.MustParse("40Gi")
	got := []any{cfg.Registry, cfg.Images["quay.io/prometheus/prometheus"], cfg.ImagePullSecrets, *cfg.Components["kos-apiserver"].Replicas,
		cfg.Components["kos-apiserver"].NodeSelector, cfg.Components["kos-agent"].Tolerations, cfg.Components["kos-agent"].PriorityClassName,
		func() string {
			q := cfg.Components["kos-agent"].Resources["ovs"].Limits[corev1.ResourceMemory]
			return q.String()
		}(), cfg.Etcd.Storage.Size.String(), cfg.Etcd.Storage.StorageClassName,
		cfg.Etcd.Backup.Size.String(), cfg.Etcd.Backup.StorageClassName, cfg.Etcd.Backup.Schedule, *cfg.Etcd.Backup.Keep, cfg.CNI.BinDir,
		cfg.Monitoring.SelectorLabels, cfg.Monitoring.Retention, len(cfg.Patches), cfg.Patches[0].Target.Kind}
	want := []any{"registry.example.org/kos", "mirror.example.org/prometheus:v2.53.3", []string{"pull-secret"}, int32(3),
		map[string]string{"pool": "kos-control"}, []corev1.Toleration{{Operator: "Exists", Effect: "NoExecute"}}, "kos-node-critical",
		"1Gi", size.String(), "fast-ssd", backup.String(), "cheap-hdd", "5 * * * *", int32(24), "/usr/libexec/cni",
		map[string]string{"release": "prometheus"}, "15d", 2, "Deployment"}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("decoded (-got +want):\n%s", diff)
	}
}

// TestDecodeRefuses gives one wrong key or value at a time: each is
// refused with its path.
func TestDecodeRefuses(t *testing.T) {
	tests := []struct {
		name, body string
		// want are the messages' parts, each with its key's path.
		want []string
	}{
		{"no apiVersion", "kind: ReleaseConfig\n", []string{`apiVersion: Unsupported value: ""`}},
		{"wrong kind", "apiVersion: kos.example.com/v1alpha1\nkind: Release\n", []string{`kind: Unsupported value: "Release"`}},
		{"unknown key", head + "registri: r.example.org\n", []string{`unknown field "registri"`}},
		{"unknown nested key", head + "components:\n  kos-agent:\n    nodeselector: {a: b}\n", []string{`unknown field "components.kos-agent.nodeselector"`}},
		{"unknown key in etcd", head + "etcd:\n  storage:\n    sise: 1Gi\n", []string{`unknown field "etcd.storage.sise"`}},
		{"duplicate key", head + "registry: a.example.org\nregistry: b.example.org\n", []string{`key "registry" already set in map`}},
		{"wrong type", head + "imagePullSecrets: pull-secret\n", []string{"imagePullSecrets"}},
		{"registry kos.example.com", head + "registry: kos.example.com/x\n", []string{`registry: Invalid value: "kos.example.com/x": give the registry the images were pushed to`}},
		{"registry bad", head + "registry: 'Registry Example'\n", []string{`registry: Invalid value: "Registry Example"`}},
		{"image unknown", head + "images:\n  quay.io/prometheus/prom: x.example.org/p:1\n", []string{`images[quay.io/prometheus/prom]: Unsupported value: "quay.io/prometheus/prom"`}},
		{"image bad reference", head + "images:\n  docker.io/grafana/grafana: 'x.example.org/G:'\n", []string{`images[docker.io/grafana/grafana]: Invalid value: "x.example.org/G:"`}},
		{"pull secret bad", head + "imagePullSecrets: [Pull_Secret]\n", []string{`imagePullSecrets[0]: Invalid value: "Pull_Secret"`}},
		{"component unknown", head + "components:\n  kos-agnet: {}\n", []string{`components[kos-agnet]: Unsupported value: "kos-agnet"`}},
		{"replicas not a setting", head + "components:\n  kos-agent:\n    replicas: 2\n", []string{"components[kos-agent].replicas: Forbidden: the number of kos-agent's pods is not a setting"}},
		{"replicas zero", head + "components:\n  kos-apiserver:\n    replicas: 0\n", []string{"components[kos-apiserver].replicas: Invalid value: 0: must be at least 1"}},
		{"node selector bad", head + "components:\n  kos-etcd:\n    nodeSelector: {'a b': c}\n", []string{`components[kos-etcd].nodeSelector: Invalid value: "a b"`}},
		{"toleration operator", head + "components:\n  kos-etcd:\n    tolerations: [{key: a, operator: Maybe}]\n", []string{`components[kos-etcd].tolerations[0].operator: Unsupported value: "Maybe"`}},
		{"toleration effect", head + "components:\n  kos-etcd:\n    tolerations: [{key: a, operator: Exists, effect: Never}]\n", []string{`components[kos-etcd].tolerations[0].effect: Unsupported value: "Never"`}},
		{"toleration value with Exists", head + "components:\n  kos-etcd:\n    tolerations: [{key: a, operator: Exists, value: b}]\n", []string{`components[kos-etcd].tolerations[0].value: Invalid value: "b": must be empty with the operator Exists`}},
		{"toleration empty key with Equal", head + "components:\n  kos-etcd:\n    tolerations: [{operator: Equal}]\n", []string{`components[kos-etcd].tolerations[0].operator: Invalid value: "Equal": an empty key needs the operator Exists`}},
		{"toleration seconds", head + "components:\n  kos-etcd:\n    tolerations: [{key: a, operator: Exists, effect: NoSchedule, tolerationSeconds: 5}]\n", []string{"components[kos-etcd].tolerations[0].tolerationSeconds: Invalid value: 5: only with the effect NoExecute"}},
		{"priority class", head + "components:\n  kos-pki:\n    priorityClassName: Critical\n", []string{`components[kos-pki].priorityClassName: Invalid value: "Critical"`}},
		{"resources unknown container", head + "components:\n  kos-agent:\n    resources:\n      agent: {}\n", []string{`components[kos-agent].resources[agent]: Unsupported value: "agent"`}},
		{"resources unknown resource", head + "components:\n  kos-agent:\n    resources:\n      ovs: {limits: {gpu: 1}}\n", []string{`components[kos-agent].resources[ovs].limits[gpu]: Unsupported value: "gpu"`}},
		{"resources not positive", head + "components:\n  kos-agent:\n    resources:\n      ovs: {limits: {cpu: 0}}\n", []string{`components[kos-agent].resources[ovs].limits[cpu]: Invalid value: "0": must be positive`}},
		{"resources request above limit", head + "components:\n  grafana:\n    resources:\n      grafana: {requests: {memory: 2Gi}, limits: {memory: 1Gi}}\n", []string{`components[grafana].resources[grafana].requests[memory]: Invalid value: "2Gi": must not be above the limit 1Gi`}},
		{"resources bad quantity", head + "components:\n  grafana:\n    resources:\n      grafana: {limits: {memory: lots}}\n", []string{"quantities must match the regular expression"}},
		{"resources claims", head + "components:\n  grafana:\n    resources:\n      grafana: {claims: [{name: x}]}\n", []string{"components[grafana].resources[grafana].claims: Forbidden: resource claims are not a setting"}},
		{"etcd size small", head + "etcd:\n  storage:\n    size: 512Mi\n", []string{`etcd.storage.size: Invalid value: "512Mi": etcd's volume must hold its WAL and its database twice: at least 1Gi`}},
		{"etcd class", head + "etcd:\n  storage:\n    storageClassName: Fast\n", []string{`etcd.storage.storageClassName: Invalid value: "Fast"`}},
		{"backup size", head + "etcd:\n  backup:\n    size: 0\n", []string{`etcd.backup.size: Invalid value: "0": must be positive`}},
		{"backup class", head + "etcd:\n  backup:\n    storageClassName: a_b\n", []string{`etcd.backup.storageClassName: Invalid value: "a_b"`}},
		{"backup schedule", head + "etcd:\n  backup:\n    schedule: every hour\n", []string{`etcd.backup.schedule: Invalid value: "every hour": must be a cron schedule of five fields`}},
		{"backup keep", head + "etcd:\n  backup:\n    keep: 0\n", []string{"etcd.backup.keep: Invalid value: 0: must keep at least 1 snapshot"}},
		{"cni relative", head + "cni:\n  binDir: opt/cni/bin\n", []string{`cni.binDir: Invalid value: "opt/cni/bin": must be an absolute, clean path`}},
		{"cni unclean", head + "cni:\n  binDir: /opt/cni/bin/\n", []string{`cni.binDir: Invalid value: "/opt/cni/bin/"`}},
		{"selector labels", head + "monitoring:\n  selectorLabels: {release: 'not valid!'}\n", []string{`monitoring.selectorLabels: Invalid value: "not valid!"`}},
		{"retention", head + "monitoring:\n  retention: 15 days\n", []string{`monitoring.retention: Invalid value: "15 days": must be a positive Prometheus duration`}},
		{"retention zero", head + "monitoring:\n  retention: 0d\n", []string{`monitoring.retention: Invalid value: "0d"`}},
		{"patch empty", head + "patches:\n- target: {kind: Deployment}\n", []string{"patches[0].patch: Required value"}},
		{"patch not yaml", head + "patches:\n- target: {kind: Deployment}\n  patch: '{a: [}'\n", []string{"patches[0].patch: Invalid value: \"\": not YAML or JSON"}},
		{"patch a string", head + "patches:\n- target: {kind: Deployment}\n  patch: just words\n", []string{"patches[0].patch: Invalid value: \"\": must be an object (strategic merge) or a list of operations (JSON 6902)"}},
		{"json 6902 without target", head + "patches:\n- patch: '[{op: remove, path: /a}]'\n", []string{"patches[0].target: Required value: a JSON 6902 patch needs a target"}},
		{"json 6902 operation without path", head + "patches:\n- target: {kind: Deployment}\n  patch: '[{op: remove}]'\n", []string{"patches[0].patch[0]: Invalid value"}},
		{"strategic merge without a name", head + "patches:\n- patch: '{kind: Deployment, apiVersion: apps/v1}'\n", []string{"patches[0].target: Required value: a strategic merge patch without a target names its object"}},
		{"empty target", head + "patches:\n- target: {}\n  patch: '{a: b}'\n", []string{"patches[0].target: Required value: select objects by at least one of"}},
		{"bad label selector", head + "patches:\n- target: {labelSelector: 'a in (b'}\n  patch: '{a: b}'\n", []string{`patches[0].target.labelSelector: Invalid value: "a in (b"`}},
		{"unknown target key", head + "patches:\n- target: {knd: Deployment}\n  patch: '{a: b}'\n", []string{`unknown field "patches[0].target.knd"`}},
		{"every problem at once", head + "registry: kos.example.com\ncni:\n  binDir: x\n", []string{"registry: Invalid value", "cni.binDir: Invalid value"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode([]byte(tt.body))
			if err == nil {
				t.Fatalf("Decode accepted\n%s", tt.body)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Decode: %v\nwant it to contain %q", err, w)
				}
			}
		})
	}
}

func TestValidateAcceptsEachKeyAlone(t *testing.T) {
	q := resource.MustParse("2Gi")
	tests := []struct {
		name string
		cfg  ReleaseConfig
	}{
		{"nothing", ReleaseConfig{}},
		{"registry with port", ReleaseConfig{Registry: "localhost:5000/kos"}},
		{"image by digest", ReleaseConfig{Images: map[string]string{"kos.example.com/etcd": "r.example.org/etcd@sha256:" + strings.Repeat("a", 64)}}},
		{"replicas", ReleaseConfig{Components: map[string]Component{"kos-controller-manager": {Replicas: ptr.To[int32](3)}}}},
		{"toleration of everything", ReleaseConfig{Components: map[string]Component{"kos-agent": {Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}}}}},
		{"etcd at 2Gi", ReleaseConfig{Etcd: Etcd{Storage: Volume{Size: &q}}}},
		{"cron macro", ReleaseConfig{Etcd: Etcd{Backup: Backup{Schedule: "@daily"}}}},
		{"retention in weeks", ReleaseConfig{Monitoring: Monitoring{Retention: "2w3d"}}},
		{"strategic merge patch", ReleaseConfig{Patches: []Patch{{Patch: "apiVersion: v1\nkind: Service\nmetadata: {name: x}\n"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.APIVersion, tt.cfg.Kind = APIVersion, Kind
			if errs := Validate(&tt.cfg); len(errs) > 0 {
				t.Errorf("Validate: %v", errs)
			}
		})
	}
}
