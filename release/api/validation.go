package api

import (
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"
)

// Workload is the object of a component: its pods are what a Component
// configures.
type Workload struct {
	// Kind, Namespace and Name name the object.
	Kind, Namespace, Name string
	// Containers are its containers' and init containers' names.
	Containers []string
	// Replicas says whether Component.Replicas may be set.
	Replicas bool
}

// Workloads are the components a ReleaseConfig may name, by name.
var Workloads = map[string]Workload{
	"kos-etcd":               {Kind: "StatefulSet", Namespace: "example-com", Name: "kos-etcd", Containers: []string{"etcd"}},
	"kos-etcd-backup":        {Kind: "CronJob", Namespace: "example-com", Name: "kos-etcd-backup", Containers: []string{"backup"}},
	"kos-apiserver":          {Kind: "Deployment", Namespace: "example-com", Name: "kos-apiserver", Containers: []string{"kos-apiserver"}, Replicas: true},
	"kos-pki":                {Kind: "Deployment", Namespace: "example-com", Name: "kos-pki", Containers: []string{"kos-pki"}},
	"kos-controller-manager": {Kind: "Deployment", Namespace: "example-com", Name: "kos-controller-manager", Containers: []string{"kos-controller-manager"}, Replicas: true},
	"kos-agent":              {Kind: "DaemonSet", Namespace: "kos-node", Name: "kos-agent", Containers: []string{"install-cni", "ovs", "kos-agent"}},
	"prometheus":             {Kind: "Deployment", Namespace: "kos-monitoring", Name: "prometheus", Containers: []string{"prometheus"}},
	"grafana":                {Kind: "Deployment", Namespace: "kos-monitoring", Name: "grafana", Containers: []string{"grafana"}},
}

// Images are the images the manifests name, without their tags: the keys
// Images may have.
var Images = []string{
	"kos.example.com/etcd",
	"kos.example.com/kos-agent",
	"kos.example.com/kos-apiserver",
	"kos.example.com/kos-controller-manager",
	"quay.io/prometheus/prometheus",
	"docker.io/grafana/grafana",
}

// KOSRegistry is the registry the manifests name the KOS images in; Registry
// replaces it.
const KOSRegistry = "kos.example.com"

// The smallest etcd data volume: it holds etcd's WAL (448 MiB) and its
// database twice.
var minEtcdVolume = resource.MustParse("1Gi")

// cronSchedule is five fields of cron, or a macro such as @daily.
var cronSchedule = regexp.MustCompile(`^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|(\S+\s+){4}\S+)$`)

// promDuration is a Prometheus duration, such as 15d or 1w2d.
var promDuration = regexp.MustCompile(`^(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?$`)

// Validate returns every problem of a release configuration, each with its
// key's path.
func Validate(cfg *ReleaseConfig) field.ErrorList {
	var errs field.ErrorList
	if cfg.APIVersion != APIVersion {
		errs = append(errs, field.NotSupported(field.NewPath("apiVersion"), cfg.APIVersion, []string{APIVersion}))
	}
	if cfg.Kind != Kind {
		errs = append(errs, field.NotSupported(field.NewPath("kind"), cfg.Kind, []string{Kind}))
	}
	if cfg.Registry != "" {
		p := field.NewPath("registry")
		if cfg.Registry == KOSRegistry || strings.HasPrefix(cfg.Registry, KOSRegistry+"/") {
			errs = append(errs, field.Invalid(p, cfg.Registry, "give the registry the images were pushed to, not "+KOSRegistry))
		} else if _, err := name.NewRepository(strings.TrimSuffix(cfg.Registry, "/")+"/image", name.StrictValidation); err != nil {
			errs = append(errs, field.Invalid(p, cfg.Registry, err.Error()))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(cfg.Images)) {
		p := field.NewPath("images").Key(k)
		if !slices.Contains(Images, k) {
			errs = append(errs, field.NotSupported(p, k, Images))
			continue
		}
		if _, err := name.ParseReference(cfg.Images[k], name.StrictValidation); err != nil {
			errs = append(errs, field.Invalid(p, cfg.Images[k], err.Error()))
		}
	}
	for i, s := range cfg.ImagePullSecrets {
		for _, msg := range validation.IsDNS1123Subdomain(s) {
			errs = append(errs, field.Invalid(field.NewPath("imagePullSecrets").Index(i), s, msg))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(cfg.Components)) {
		errs = append(errs, validateComponent(field.NewPath("components").Key(k), k, cfg.Components[k])...)
	}
	errs = append(errs, validateEtcd(field.NewPath("etcd"), cfg.Etcd)...)
	if d := cfg.CNI.BinDir; d != "" {
		p := field.NewPath("cni", "binDir")
		if !path.IsAbs(d) || path.Clean(d) != d {
			errs = append(errs, field.Invalid(p, d, "must be an absolute, clean path of the node, such as /opt/cni/bin"))
		}
	}
	errs = append(errs, validateLabels(cfg.Monitoring.SelectorLabels, field.NewPath("monitoring", "selectorLabels"))...)
	if r := cfg.Monitoring.Retention; r != "" && (!promDuration.MatchString(r) || !strings.ContainsAny(r, "123456789")) {
		errs = append(errs, field.Invalid(field.NewPath("monitoring", "retention"), r, "must be a positive Prometheus duration, such as 15d or 12h"))
	}
	for i, p := range cfg.Patches {
		errs = append(errs, validatePatch(field.NewPath("patches").Index(i), p)...)
	}
	return errs
}

func validateComponent(p *field.Path, name string, c Component) field.ErrorList {
	w, ok := Workloads[name]
	if !ok {
		return field.ErrorList{field.NotSupported(p, name, slices.Sorted(maps.Keys(Workloads)))}
	}
	var errs field.ErrorList
	if c.Replicas != nil {
		switch {
		case !w.Replicas:
			errs = append(errs, field.Forbidden(p.Child("replicas"), fmt.Sprintf("the number of %s's pods is not a setting (replicas may be set for %s)", name, strings.Join(replicated(), " and "))))
		case *c.Replicas < 1:
			errs = append(errs, field.Invalid(p.Child("replicas"), *c.Replicas, "must be at least 1"))
		}
	}
	errs = append(errs, validateLabels(c.NodeSelector, p.Child("nodeSelector"))...)
	for i, t := range c.Tolerations {
		errs = append(errs, validateToleration(p.Child("tolerations").Index(i), t)...)
	}
	if c.PriorityClassName != "" {
		for _, msg := range validation.IsDNS1123Subdomain(c.PriorityClassName) {
			errs = append(errs, field.Invalid(p.Child("priorityClassName"), c.PriorityClassName, msg))
		}
	}
	for _, container := range slices.Sorted(maps.Keys(c.Resources)) {
		cp := p.Child("resources").Key(container)
		if !slices.Contains(w.Containers, container) {
			errs = append(errs, field.NotSupported(cp, container, w.Containers))
			continue
		}
		errs = append(errs, validateResources(cp, c.Resources[container])...)
	}
	return errs
}

func replicated() []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(Workloads)) {
		if Workloads[k].Replicas {
			out = append(out, k)
		}
	}
	return out
}

func validateLabels(l map[string]string, p *field.Path) field.ErrorList {
	return metav1validation.ValidateLabels(l, p)
}

func validateToleration(p *field.Path, t corev1.Toleration) field.ErrorList {
	var errs field.ErrorList
	if t.Key != "" {
		for _, msg := range validation.IsQualifiedName(t.Key) {
			errs = append(errs, field.Invalid(p.Child("key"), t.Key, msg))
		}
	}
	switch t.Operator {
	case "", corev1.TolerationOpEqual:
		if t.Key == "" {
			errs = append(errs, field.Invalid(p.Child("operator"), t.Operator, "an empty key needs the operator Exists"))
		}
		for _, msg := range validation.IsValidLabelValue(t.Value) {
			errs = append(errs, field.Invalid(p.Child("value"), t.Value, msg))
		}
	case corev1.TolerationOpExists:
		if t.Value != "" {
			errs = append(errs, field.Invalid(p.Child("value"), t.Value, "must be empty with the operator Exists"))
		}
	default:
		errs = append(errs, field.NotSupported(p.Child("operator"), t.Operator, []corev1.TolerationOperator{corev1.TolerationOpEqual, corev1.TolerationOpExists}))
	}
	switch t.Effect {
	case "", corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
	default:
		errs = append(errs, field.NotSupported(p.Child("effect"), t.Effect, []corev1.TaintEffect{corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute}))
	}
	if t.TolerationSeconds != nil && t.Effect != corev1.TaintEffectNoExecute {
		errs = append(errs, field.Invalid(p.Child("tolerationSeconds"), *t.TolerationSeconds, "only with the effect NoExecute"))
	}
	return errs
}

func validateResources(p *field.Path, r corev1.ResourceRequirements) field.ErrorList {
	var errs field.ErrorList
	if len(r.Claims) > 0 {
		errs = append(errs, field.Forbidden(p.Child("claims"), "resource claims are not a setting"))
	}
	for _, list := range []struct {
		name string
		l    corev1.ResourceList
	}{{"requests", r.Requests}, {"limits", r.Limits}} {
		for _, k := range slices.Sorted(maps.Keys(list.l)) {
			kp := p.Child(list.name).Key(string(k))
			switch k {
			case corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage:
			default:
				errs = append(errs, field.NotSupported(kp, k, []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage}))
				continue
			}
			if q := list.l[k]; q.Sign() <= 0 {
				errs = append(errs, field.Invalid(kp, q.String(), "must be positive"))
			}
		}
	}
	for k, req := range r.Requests {
		if lim, ok := r.Limits[k]; ok && req.Cmp(lim) > 0 {
			errs = append(errs, field.Invalid(p.Child("requests").Key(string(k)), req.String(), "must not be above the limit "+lim.String()))
		}
	}
	return errs
}

func validateEtcd(p *field.Path, e Etcd) field.ErrorList {
	var errs field.ErrorList
	if s := e.Storage.Size; s != nil && s.Cmp(minEtcdVolume) < 0 {
		errs = append(errs, field.Invalid(p.Child("storage", "size"), s.String(), "etcd's volume must hold its WAL and its database twice: at least 1Gi"))
	}
	errs = append(errs, validateClass(p.Child("storage", "storageClassName"), e.Storage.StorageClassName)...)
	if s := e.Backup.Size; s != nil && s.Sign() <= 0 {
		errs = append(errs, field.Invalid(p.Child("backup", "size"), s.String(), "must be positive"))
	}
	errs = append(errs, validateClass(p.Child("backup", "storageClassName"), e.Backup.StorageClassName)...)
	if s := e.Backup.Schedule; s != "" && !cronSchedule.MatchString(s) {
		errs = append(errs, field.Invalid(p.Child("backup", "schedule"), s, "must be a cron schedule of five fields, such as \"17 */6 * * *\""))
	}
	if k := e.Backup.Keep; k != nil && *k < 1 {
		errs = append(errs, field.Invalid(p.Child("backup", "keep"), *k, "must keep at least 1 snapshot"))
	}
	return errs
}

func validateClass(p *field.Path, class string) field.ErrorList {
	var errs field.ErrorList
	if class != "" {
		for _, msg := range validation.IsDNS1123Subdomain(class) {
			errs = append(errs, field.Invalid(p, class, msg))
		}
	}
	return errs
}

func validatePatch(p *field.Path, patch Patch) field.ErrorList {
	var errs field.ErrorList
	if strings.TrimSpace(patch.Patch) == "" {
		return append(errs, field.Required(p.Child("patch"), "a strategic merge patch or a JSON 6902 patch"))
	}
	var body any
	if err := yaml.Unmarshal([]byte(patch.Patch), &body); err != nil {
		return append(errs, field.Invalid(p.Child("patch"), "", "not YAML or JSON: "+err.Error()))
	}
	switch b := body.(type) {
	case []any:
		if patch.Target == nil {
			errs = append(errs, field.Required(p.Child("target"), "a JSON 6902 patch needs a target"))
		}
		for i, op := range b {
			m, ok := op.(map[string]any)
			if !ok || m["op"] == nil || m["path"] == nil {
				errs = append(errs, field.Invalid(p.Child("patch").Index(i), op, "a JSON 6902 operation has an op and a path"))
			}
		}
	case map[string]any:
		if patch.Target == nil {
			meta, _ := b["metadata"].(map[string]any)
			if b["apiVersion"] == nil || b["kind"] == nil || meta == nil || meta["name"] == nil {
				errs = append(errs, field.Required(p.Child("target"), "a strategic merge patch without a target names its object: apiVersion, kind and metadata.name"))
			}
		}
	default:
		errs = append(errs, field.Invalid(p.Child("patch"), "", "must be an object (strategic merge) or a list of operations (JSON 6902)"))
	}
	if t := patch.Target; t != nil {
		if *t == (Target{}) {
			errs = append(errs, field.Required(p.Child("target"), "select objects by at least one of group, version, kind, name, namespace, labelSelector"))
		}
		if t.LabelSelector != "" {
			if _, err := labels.Parse(t.LabelSelector); err != nil {
				errs = append(errs, field.Invalid(p.Child("target", "labelSelector"), t.LabelSelector, err.Error()))
			}
		}
	}
	return errs
}
