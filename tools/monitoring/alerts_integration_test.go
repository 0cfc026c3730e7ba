package monitoring

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/kos-sdn/kos/components/pki"
	"github.com/kos-sdn/kos/tools/poll"
	"github.com/kos-sdn/kos/tools/prombuild"
	"github.com/kos-sdn/kos/tools/testenv"
)

// alertNames returns the names of the alerts of a rule file.
func alertNames(t testing.TB, rules string) []string {
	t.Helper()
	var f struct {
		Groups []struct {
			Rules []struct {
				Alert string `json:"alert"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal([]byte(rules), &f); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			names = append(names, r.Alert)
		}
	}
	return names
}

// TestIntegrationRulesPromtool checks the rules of the repository (which
// TestRulesShipped compares with the releases) with the promtool of the Prometheus the manifest runs (prombuild): they parse (check rules), and each alert fires on its
// fault's series, after its "for", and not on healthy ones
// (testdata/kos.rules.test.yaml, which must test every alert).
func TestIntegrationRulesPromtool(t *testing.T) {
	promtool, err := prombuild.Binary(t.Context(), "promtool")
	if err != nil {
		t.Fatal(err)
	}
	rules := rulesFile(t)
	if out, err := exec.Command(promtool, "check", "rules", writeFile(t, "kos.rules.yaml", []byte(rules))).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules: %v\n%s", err, out)
	}
	cmd := exec.Command(promtool, "test", "rules", "kos.rules.test.yaml")
	cmd.Dir = filepath.Join(repoRoot(t), "tools", "monitoring", "testdata")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool test rules: %v\n%s", err, out)
	}
	tests, err := os.ReadFile(filepath.Join(cmd.Dir, "kos.rules.test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `json:"alertname"`
				ExpAlerts []any  `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal(tests, &f); err != nil {
		t.Fatal(err)
	}
	fired := map[string]bool{}
	for _, tt := range f.Tests {
		for _, a := range tt.AlertRuleTest {
			fired[a.Alertname] = fired[a.Alertname] || len(a.ExpAlerts) > 0
		}
	}
	for _, name := range alertNames(t, rules) {
		if !fired[name] {
			t.Errorf("alert %s: testdata/kos.rules.test.yaml has no test where it fires", name)
		}
	}
}

// TestIntegrationAlertFires runs a real fault: the signer kos-pki without
// the RBAC it needs (as when its Role is missing) on the shared control
// plane, serving its metrics; a real Prometheus with the addon's
// configuration and rules scrapes it. The alert KOSPKINotRenewing must
// fire, as /api/v1/alerts says; once the Role is granted, the signer's next
// pass succeeds and the alert must resolve. The rules are the repository's
// with every "for" set to 0: the expressions are what is tested here (their
// "for"s are in TestIntegrationRulesPromtool).
func TestIntegrationAlertFires(t *testing.T) {
	env := testenv.Shared(t)
	ctx := context.Background()
	kube, err := kubernetes.NewForConfig(env.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "kos-monitoring-alert-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kube.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{}) })
	user := "system:serviceaccount:" + ns.Name + ":kos-pki"
	_, cfg, err := env.NewUserKubeconfig(user)
	if err != nil {
		t.Fatal(err)
	}
	leaves, err := pki.SetEtcd.Leaves(ns.Name)
	if err != nil {
		t.Fatal(err)
	}
	ensure, err := pki.EnsureConfig{REST: cfg, Namespace: ns.Name, Leaves: leaves}.Complete().New()
	if err != nil {
		t.Fatal(err)
	}
	signer := &pki.Signer{Run: ensure, Interval: time.Minute, Metrics: pki.NewSignerMetrics()}
	run(t, "kos-pki", signer.Loop)
	targets := []target{{job: "kos", address: serve(t, signer.Handler()), name: "kos-pki", port: "metrics", node: "node-a"}}

	objs := manifestObjects(t)
	files := localFiles{rules: writeFile(t, "kos.rules.yaml", rulesWithoutFor(t))}
	base := startPrometheus(t, prometheusConfig(t, configMapData(t, objs, "prometheus-config")["prometheus.yml"], targets, files, true))

	began := time.Now()
	poll.Until(t, time.Minute, "KOSPKINotRenewing fires", func(context.Context) error {
		return alertState(base, "KOSPKINotRenewing", "kos-pki-0", "firing")
	})
	t.Logf("KOSPKINotRenewing fired %s after Prometheus started", time.Since(began).Round(100*time.Millisecond))

	// Fixed: the signer gets its Role and its next pass (a failed pass is
	// retried after 5 s) succeeds.
	namespaced, _, err := pki.Rules(pki.SetEtcd, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kube.RbacV1().Roles(ns.Name).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "kos-pki"}, Rules: namespaced}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.RbacV1().RoleBindings(ns.Name).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "kos-pki"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "kos-pki"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	fixed := time.Now()
	poll.Until(t, time.Minute, "KOSPKINotRenewing resolves", func(context.Context) error {
		return alertState(base, "KOSPKINotRenewing", "kos-pki-0", "")
	})
	t.Logf("KOSPKINotRenewing resolved %s after the Role was granted", time.Since(fixed).Round(100*time.Millisecond))
}

// alertState returns nil when the alert of that pod is in state (firing,
// pending), or absent when state is "", as Prometheus's /api/v1/alerts
// says.
func alertState(base, name, pod, state string) error {
	data, err := promGet(base, "/api/v1/alerts", nil)
	if err != nil {
		return err
	}
	var r struct {
		Alerts []struct {
			Labels map[string]string `json:"labels"`
			State  string            `json:"state"`
		} `json:"alerts"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return err
	}
	var states []string
	for _, a := range r.Alerts {
		if a.Labels["alertname"] == name && a.Labels["pod"] == pod {
			states = append(states, a.State)
		}
	}
	if (state == "" && len(states) == 0) || slices.Contains(states, state) {
		return nil
	}
	return fmt.Errorf("alert %s of %s: states %v, want %q; all alerts: %s", name, pod, states, state, data)
}

// TestIntegrationEtcdAlertsFire runs two more faults past a real
// Prometheus with the addon's configuration and the repository's rules
// (every "for" 0): an etcd member that does not answer, beside a real
// etcd member that does, fires KOSEtcdMemberDown for that member only; and
// the components with no target at all (here all but etcd) fire
// KOSComponentAbsent, which KOSComponentDown cannot (it needs a target),
// while etcd's does not.
func TestIntegrationEtcdAlertsFire(t *testing.T) {
	env := testenv.Shared(t)
	etcdURL, err := env.StartEtcd(context.Background(), fmt.Sprintf("alerts-%d", time.Now().UnixNano()%100000))
	if err != nil {
		t.Fatal(err)
	}
	// A member whose process is gone: its port refuses connections.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := l.Addr().String()
	l.Close()
	targets := []target{
		{job: "kos", address: strings.TrimPrefix(etcdURL, "http://"), name: "kos-etcd", pod: "kos-etcd-0", port: "metrics", node: "node-a"},
		{job: "kos", address: down, name: "kos-etcd", pod: "kos-etcd-1", port: "metrics", node: "node-b"},
	}
	objs := manifestObjects(t)
	files := localFiles{rules: writeFile(t, "kos.rules.yaml", rulesWithoutFor(t))}
	base := startPrometheus(t, prometheusConfig(t, configMapData(t, objs, "prometheus-config")["prometheus.yml"], targets, files, true))

	began := time.Now()
	poll.Until(t, time.Minute, "KOSEtcdMemberDown fires for kos-etcd-1", func(context.Context) error {
		return alertState(base, "KOSEtcdMemberDown", "kos-etcd-1", "firing")
	})
	t.Logf("KOSEtcdMemberDown fired %s after Prometheus started", time.Since(began).Round(100*time.Millisecond))
	if err := alertState(base, "KOSEtcdMemberDown", "kos-etcd-0", ""); err != nil {
		t.Errorf("the member that answers: %v", err)
	}
	if err := alertState(base, "KOSComponentDown", "kos-etcd-1", ""); err != nil {
		t.Errorf("KOSComponentDown leaves etcd to KOSEtcdMemberDown: %v", err)
	}
	poll.Until(t, time.Minute, "KOSComponentAbsent fires for every component without a target", func(context.Context) error {
		jobs, err := firingJobs(base, "KOSComponentAbsent")
		if err != nil {
			return err
		}
		if diff := cmp.Diff(jobs, []string{"kos-agent", "kos-apiserver", "kos-controller-manager", "kos-pki"}); diff != "" {
			return fmt.Errorf("KOSComponentAbsent firing for jobs (-got +want):\n%s", diff)
		}
		return nil
	})
}

// rulesWithoutFor returns the repository's rules with every "for" set to
// 0: the expressions are what is tested (their "for"s are in
// TestIntegrationRulesPromtool).
func rulesWithoutFor(t *testing.T) []byte {
	t.Helper()
	var rules map[string]any
	if err := yaml.Unmarshal([]byte(rulesFile(t)), &rules); err != nil {
		t.Fatal(err)
	}
	for _, g := range rules["groups"].([]any) {
		for _, r := range g.(map[string]any)["rules"].([]any) {
			r.(map[string]any)["for"] = "0s"
		}
	}
	data, err := yaml.Marshal(rules)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// firingJobs returns the job labels of the firing alerts of that name,
// sorted.
func firingJobs(base, name string) ([]string, error) {
	data, err := promGet(base, "/api/v1/alerts", nil)
	if err != nil {
		return nil, err
	}
	var r struct {
		Alerts []struct {
			Labels map[string]string `json:"labels"`
			State  string            `json:"state"`
		} `json:"alerts"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, err
	}
	var jobs []string
	for _, a := range r.Alerts {
		if a.Labels["alertname"] == name && a.State == "firing" {
			jobs = append(jobs, a.Labels["job"])
		}
	}
	slices.Sort(jobs)
	return jobs, nil
}
