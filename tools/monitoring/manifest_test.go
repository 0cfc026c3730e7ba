package monitoring

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/kos-sdn/kos/channels"
	"github.com/kos-sdn/kos/components/pki"
)

// operatorChannel is the channel of the variant for clusters that run the
// Prometheus Operator. It is not an addon folder of the bundle (whose
// channels tools/addons generates and tools/addons/apicheck dry-runs),
// because its CRDs are not in a plain cluster: this package checks its
// hashes and dry-runs it with CRDs of its own (TestIntegrationOperatorDryRun).
const operatorChannel = addonDir + "/prometheus-operator/channel.yaml"

// operatorObjects returns the objects of the newest release of the
// Prometheus Operator variant, its manifestHash verified.
func operatorObjects(t testing.TB) []*unstructured.Unstructured {
	t.Helper()
	ctx := context.Background()
	releases, err := channels.Load(ctx, channels.NewFetcher(), filepath.Join(repoRoot(t), operatorChannel))
	if err != nil {
		t.Fatal(err)
	}
	newest := releases[len(releases)-1]
	data, err := channels.NewFetcher().FetchManifest(ctx, newest)
	if err != nil {
		t.Fatalf("%s: %v (a release not yet published may take the new hash: sha256sum the manifest)", operatorChannel, err)
	}
	objs, err := channels.DecodeObjects(data)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range objs {
		if u.GetLabels()["addon.kos.example.com/name"] != "kos-monitoring" {
			t.Errorf("%s %s lacks the addon's selector label", u.GetKind(), u.GetName())
		}
	}
	return objs
}

func object(t testing.TB, objs []*unstructured.Unstructured, kind, namespace, name string) *unstructured.Unstructured {
	t.Helper()
	for _, u := range objs {
		if u.GetKind() == kind && u.GetNamespace() == namespace && u.GetName() == name {
			return u
		}
	}
	t.Fatalf("the manifest has no %s %s/%s", kind, namespace, name)
	return nil
}

// rulesFile returns the alert rules kept in the repository.
func rulesFile(t testing.TB) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), addonDir, "rules", "kos.rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// newestVersion returns the version of the newest release of a channel
// of the repository.
func newestVersion(t testing.TB, channel string) string {
	t.Helper()
	releases, err := channels.Load(context.Background(), channels.NewFetcher(), filepath.Join(repoRoot(t), channel))
	if err != nil {
		t.Fatal(err)
	}
	return releases[len(releases)-1].VersionString()
}

// TestRunbooks checks that every alert links its section of
// docs/runbooks.md in its runbook_url annotation, and that the section
// exists.
func TestRunbooks(t *testing.T) {
	const prefix = "https://github.com/kos-sdn/kos/blob/main/docs/runbooks.md#"
	page, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "runbooks.md"))
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]bool{}
	for _, line := range strings.Split(string(page), "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			sections[strings.ToLower(h)] = true
		}
	}
	var f struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `json:"alert"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal([]byte(rulesFile(t)), &f); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			n++
			url := r.Annotations["runbook_url"]
			anchor, ok := strings.CutPrefix(url, prefix)
			switch {
			case !ok:
				t.Errorf("alert %s: runbook_url %q, want %s<alert in lower case>", r.Alert, url, prefix)
			case anchor != strings.ToLower(r.Alert):
				t.Errorf("alert %s: runbook_url %q links another alert's section", r.Alert, url)
			case !sections[anchor]:
				t.Errorf("alert %s: docs/runbooks.md has no section \"## %s\"", r.Alert, r.Alert)
			}
		}
	}
	if n < 21 {
		t.Errorf("%d alerts, want at least 21 (issue 36: absent targets, etcd quota, members, leaders, APIService, backups, underlay, heartbeats)", n)
	}
}

// TestRulesShipped checks that both variants carry the rules of the
// repository: the bundled Prometheus's ConfigMap the file itself, the
// PrometheusRule its groups.
func TestRulesShipped(t *testing.T) {
	file := rulesFile(t)
	if got := configMapData(t, manifestObjects(t), "prometheus-rules")["kos.rules.yaml"]; got != file {
		t.Errorf("the ConfigMap prometheus-rules differs from %s/rules/kos.rules.yaml", addonDir)
	}
	var want map[string]any
	if err := yaml.Unmarshal([]byte(file), &want); err != nil {
		t.Fatal(err)
	}
	rule := object(t, operatorObjects(t), "PrometheusRule", "kos-monitoring", "kos")
	if diff := cmp.Diff(want["groups"], rule.Object["spec"].(map[string]any)["groups"]); diff != "" {
		t.Errorf("PrometheusRule kos differs from %s/rules/kos.rules.yaml (-file +rule):\n%s", addonDir, diff)
	}
	dashboards := configMapData(t, operatorObjects(t), "kos-dashboards")
	if diff := cmp.Diff(dashboardFiles(t), dashboards); diff != "" {
		t.Errorf("the operator variant's ConfigMap kos-dashboards differs from %s/dashboards (-files +configmap):\n%s", addonDir, diff)
	}
}

// TestManifestHardened checks what issue 25 asked of the bundled variant:
// no lifecycle or admin API on Prometheus, pods listed only in the
// namespaces it scrapes, kos-apiserver's certificate verified, Grafana
// without anonymous access or a password in the manifest, NetworkPolicies
// in front of both; and that kos-pki may do in the namespace exactly what
// pki.PublishRules says, in both variants.
func TestManifestHardened(t *testing.T) {
	objs := manifestObjects(t)
	prometheus := containerOf(t, object(t, objs, "Deployment", "kos-monitoring", "prometheus"))
	for _, arg := range prometheus.Args {
		if strings.HasPrefix(arg, "--web.enable-lifecycle") || strings.HasPrefix(arg, "--web.enable-admin-api") {
			t.Errorf("prometheus runs with %s", arg)
		}
	}
	for _, u := range objs {
		if u.GetKind() != "ClusterRole" {
			continue
		}
		for _, r := range roleRules(t, u) {
			if len(r.Resources) > 0 {
				t.Errorf("ClusterRole %s grants %v on %v cluster-wide", u.GetName(), r.Verbs, r.Resources)
			}
		}
	}
	var podRoles []string
	for _, u := range objs {
		if u.GetKind() == "Role" && slices.ContainsFunc(roleRules(t, u), func(r rbacv1.PolicyRule) bool { return slices.Contains(r.Resources, "pods") }) {
			podRoles = append(podRoles, u.GetNamespace())
		}
	}
	if diff := cmp.Diff([]string{"example-com", "kos-node"}, podRoles); diff != "" {
		t.Errorf("namespaces where Prometheus may list pods (-want +got):\n%s", diff)
	}

	config := configMapData(t, objs, "prometheus-config")["prometheus.yml"]
	var cfg struct {
		RuleFiles     []string `json:"rule_files"`
		ScrapeConfigs []struct {
			JobName   string         `json:"job_name"`
			Scheme    string         `json:"scheme"`
			TLSConfig map[string]any `json:"tls_config"`
		} `json:"scrape_configs"`
	}
	if err := yaml.Unmarshal([]byte(config), &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.RuleFiles) == 0 {
		t.Error("prometheus.yml loads no rule file")
	}
	for _, job := range cfg.ScrapeConfigs {
		if job.TLSConfig["insecure_skip_verify"] == true {
			t.Errorf("job %s does not verify certificates", job.JobName)
		}
		if job.Scheme == "https" && (job.TLSConfig["ca_file"] == nil || job.TLSConfig["server_name"] == nil) {
			t.Errorf("job %s: tls_config %v, want the KOS CA (ca_file) and the Service's name (server_name)", job.JobName, job.TLSConfig)
		}
	}

	grafana := containerOf(t, object(t, objs, "Deployment", "kos-monitoring", "grafana"))
	env := map[string]string{}
	for _, e := range grafana.Env {
		env[e.Name] = e.Value
	}
	if env["GF_AUTH_ANONYMOUS_ENABLED"] != "false" {
		t.Errorf("GF_AUTH_ANONYMOUS_ENABLED is %q, want false", env["GF_AUTH_ANONYMOUS_ENABLED"])
	}
	if _, ok := env["GF_SECURITY_ADMIN_PASSWORD"]; ok {
		t.Error("Grafana's admin password is in the manifest")
	}
	if f := env["GF_SECURITY_ADMIN_PASSWORD__FILE"]; f != "/etc/grafana/admin/"+pki.PasswordKey {
		t.Errorf("GF_SECURITY_ADMIN_PASSWORD__FILE is %q, want the key %s of the generated Secret", f, pki.PasswordKey)
	}
	secretVolume, _, _ := unstructured.NestedString(volumeOf(t, object(t, objs, "Deployment", "kos-monitoring", "grafana"), "admin"), "secret", "secretName")
	if secretVolume != "grafana-admin" {
		t.Errorf("Grafana's admin volume is Secret %q, want grafana-admin", secretVolume)
	}
	for _, name := range []string{"prometheus", "grafana"} {
		object(t, objs, "NetworkPolicy", "kos-monitoring", name)
	}

	for _, c := range []struct {
		objs []*unstructured.Unstructured
		want []rbacv1.PolicyRule
	}{
		{objs, pki.PublishRules(true, "grafana-admin")},
		{operatorObjects(t), pki.PublishRules(true)},
	} {
		if diff := cmp.Diff(c.want, roleRules(t, object(t, c.objs, "Role", "kos-monitoring", "kos-pki"))); diff != "" {
			t.Errorf("Role kos-monitoring/kos-pki differs from pki.PublishRules (-pki +manifest):\n%s", diff)
		}
	}
}

type container struct {
	Args []string `json:"args"`
	Env  []struct {
		Name  string `json:"name"`
		Value string `json:"value"`
	} `json:"env"`
}

func containerOf(t testing.TB, u *unstructured.Unstructured) container {
	t.Helper()
	cs, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
	if len(cs) != 1 {
		t.Fatalf("%s %s has %d containers, want 1", u.GetKind(), u.GetName(), len(cs))
	}
	var c container
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(cs[0].(map[string]any), &c); err != nil {
		t.Fatal(err)
	}
	return c
}

func volumeOf(t testing.TB, u *unstructured.Unstructured, name string) map[string]any {
	t.Helper()
	vs, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "volumes")
	for _, v := range vs {
		if v := v.(map[string]any); v["name"] == name {
			return v
		}
	}
	t.Fatalf("%s %s has no volume %s", u.GetKind(), u.GetName(), name)
	return nil
}

func roleRules(t testing.TB, u *unstructured.Unstructured) []rbacv1.PolicyRule {
	t.Helper()
	var role rbacv1.ClusterRole // a Role's rules read the same
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &role); err != nil {
		t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
	}
	return role.Rules
}
