package e2e

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/kos-sdn/kos/addons"
	"github.com/kos-sdn/kos/channels/cli"
	"github.com/kos-sdn/kos/components/agent"
	"github.com/kos-sdn/kos/release"
	"github.com/kos-sdn/kos/release/api"
	"github.com/kos-sdn/kos/tools/figures"
	"github.com/kos-sdn/kos/tools/kosimages/catalog"
	"github.com/kos-sdn/kos/tools/kosinstall"
	"github.com/kos-sdn/kos/tools/poll"
)

// The monitoring test (TestIntegrationMonitoring) on the shared cluster.
const (
	// monitoringNamespace is kos-monitoring's, which the addon makes.
	monitoringNamespace = "kos-monitoring"
	// upstreamPrometheus is the image kos-monitoring names for Prometheus,
	// which a release configuration's images may replace.
	upstreamPrometheus = "quay.io/prometheus/prometheus"
	// monitoringRetention is the release configuration's
	// monitoring.retention, not the shipped 2d: the running Prometheus
	// must say it (testReach).
	monitoringRetention = "3d"
	// monitoringManifest is the release's kos-monitoring, relative to the
	// addons folder.
	monitoringManifest = "kos-monitoring/" + release.Version + ".yaml"
	// goneNode names the node whose agent's heartbeat Lease the fault
	// leaves behind: no node of the cluster has that name.
	goneNode = "kos-e2e-gone-node"
	// heartbeatAlert is the alert the fault fires.
	heartbeatAlert = "KOSAgentNotHeartbeating"
)

// monitoring is what the steps of TestIntegrationMonitoring share.
type monitoring struct {
	*standard
	// before is the cluster's addon objects before the install
	// (objectVersions), which the uninstall must leave as they were.
	before map[string]string
	// tree is the release rendered for the cluster (kos-release).
	tree string
	// installed says kos-monitoring is installed and not yet uninstalled.
	installed bool
	// prometheus is Prometheus's HTTP API, through a port-forward.
	prometheus promAPI
	// faultAt is when the Lease of the gone node was made.
	faultAt time.Time
}

// testRender pushes the Prometheus image (the Prometheus tools/prometheus
// builds, as tools/kosimages packs it) to the cluster's registry, and
// renders the release with kos-release and a configuration that names it
// in place of quay.io's, which the cluster cannot reach, with Grafana
// scaled to 0: Debian has no Grafana to pack, and its upstream image is not
// pulled here.
func (m *monitoring) testRender(t *testing.T) {
	ctx := t.Context()
	repo := m.env.Registry + "/" + registryPrefix
	began := time.Now()
	pinned, err := catalog.PushPrometheus(ctx, repo, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pushed %s in %s", pinned, since(began))
	figures.Duration(t, "monitoring-prometheus-image-pushed", time.Since(began))

	// The tree outlives this step: the install reads it.
	m.tree = filepath.Join(m.t.TempDir(), "release")
	manifest, err := renderMonitoring(ctx, m.tree, repo, pinned)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(manifest), "image: "+pinned+"\n") {
		t.Errorf("the rendered kos-monitoring does not name %s", pinned)
	}
}

// renderMonitoring writes the release into out with kos-release, for the
// registry repo, with the image prometheus (a full reference) in place of
// quay.io's, the retention monitoringRetention and Grafana at 0 replicas, and returns kos-monitoring's
// manifest. Everything else is the shipped release
// (TestMonitoringReleaseIsShipped).
func renderMonitoring(ctx context.Context, out, repo, prometheus string) ([]byte, error) {
	cfg := &api.ReleaseConfig{
		APIVersion: api.APIVersion,
		Kind:       api.Kind,
		Registry:   repo,
		Images:     map[string]string{upstreamPrometheus: prometheus},
		Monitoring: api.Monitoring{Retention: monitoringRetention},
		Patches: []api.Patch{{Patch: `apiVersion: apps/v1
kind: Deployment
metadata: {name: grafana, namespace: kos-monitoring}
spec: {replicas: 0}
`}},
	}
	if errs := api.Validate(cfg); len(errs) > 0 {
		return nil, fmt.Errorf("the test's release configuration: %w", errs.ToAggregate())
	}
	modules, err := release.KOSModules()
	if err != nil {
		return nil, err
	}
	if _, err := release.WriteTree(ctx, release.TreeOptions{Source: addons.FS, Out: out, Config: cfg, Modules: modules}); err != nil {
		return nil, fmt.Errorf("rendering the release: %w", err)
	}
	return os.ReadFile(filepath.Join(out, "addons", monitoringManifest))
}

// testInstall applies the rendered monitoring channel with channels, as
// docs/install.md says (the KOS addons are installed already), and waits
// for it to be ready; the uninstall runs when the test ends if no step did.
func (m *monitoring) testInstall(t *testing.T) {
	m.before = m.objectVersions(t)
	m.t.Cleanup(func() {
		if m.installed {
			m.uninstall(m.t)
		}
	})
	m.installed = true
	began := time.Now()
	out := m.channelsCLI(t, "apply", "channel", filepath.Join(m.tree, "addons", "monitoring-channel.yaml"), "--yes")
	if !strings.Contains(out, "kos-monitoring: Installed ") {
		t.Errorf("the install says nothing of installing kos-monitoring:\n%s", out)
	}
	figures.Duration(t, "monitoring-install-to-ready", time.Since(began))
}

// testReach forwards a local port to Prometheus's Service as the addon's
// manifest says (kubectl port-forward), and waits until it answers.
func (m *monitoring) testReach(t *testing.T) {
	// The forward lasts as long as the whole test.
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, "kubectl", "--kubeconfig", m.env.Kubeconfig, "-n", monitoringNamespace, "port-forward", "svc/prometheus", ":9090")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stop := func() {
		cancel()
		_ = cmd.Wait() // killed: its error says so
	}
	m.t.Cleanup(func() {
		stop()
		if m.t.Failed() {
			m.t.Logf("kubectl port-forward's standard error:\n%s", stderr.String())
		}
	})
	// kubectl says "Forwarding from 127.0.0.1:PORT -> 9090", then once per
	// connection "Handling connection for PORT".
	forwarding := regexp.MustCompile(`^Forwarding from 127\.0\.0\.1:([0-9]+) -> 9090`)
	ports := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if match := forwarding.FindStringSubmatch(sc.Text()); match != nil {
				select {
				case ports <- match[1]:
				default:
				}
			}
		}
	}()
	var port string
	select {
	case port = <-ports:
	case <-time.After(time.Minute):
		stop()
		t.Fatalf("kubectl port-forward svc/prometheus said no local port in a minute: %s", stderr.String())
	}
	m.prometheus = promAPI{base: "http://127.0.0.1:" + port}
	poll.Until(t, time.Minute, "Prometheus to answer", func(ctx context.Context) error {
		version, err := m.prometheus.version(ctx)
		if err == nil {
			t.Logf("Prometheus %s answers through port %s", version, port)
		}
		return err
	})
	// The configuration's monitoring.retention, read back from the
	// Prometheus that runs (issue 34: every key read back live).
	flags, err := m.prometheus.flags(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got := flags["storage.tsdb.retention.time"]; got != monitoringRetention {
		t.Errorf("Prometheus runs with --storage.tsdb.retention.time=%q, want the configuration's monitoring.retention %q", got, monitoringRetention)
	}
}

// testGoneNode leaves the heartbeat Lease of a node gone for good, as its
// agent left it (agents do not delete their Lease when they stop): named
// after the node, held by it, for the agents' duration, renewed once.
// The attachment liveness controller judges the node silent once the
// duration and its grace pass; the alert's own wait follows. The steps
// after this one run meanwhile.
func (m *monitoring) testGoneNode(t *testing.T) {
	now := metav1.NewMicroTime(time.Now())
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: kosinstall.AgentNamespace, Name: goneNode},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(goneNode),
			LeaseDurationSeconds: ptr.To(int32(agent.DefaultHeartbeatDuration / time.Second)),
			AcquireTime:          &now,
			RenewTime:            &now,
		},
	}
	leases := m.kube.CoordinationV1().Leases(kosinstall.AgentNamespace)
	if _, err := leases.Create(t.Context(), lease, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	m.faultAt = time.Now()
	m.t.Cleanup(func() { m.deleteGoneNode(m.t) })
}

// deleteGoneNode deletes the gone node's Lease, as the runbook's fix says.
func (m *monitoring) deleteGoneNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := m.kube.CoordinationV1().Leases(kosinstall.AgentNamespace).Delete(ctx, goneNode, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("deleting the Lease of %s: %v", goneNode, err)
	}
}

// testTargets checks that Prometheus scrapes every KOS pod, each as the
// job its component names and up: both kos-apiservers, the three etcd
// members, kos-pki, both controller managers and every node's agent, and
// nothing else.
func (m *monitoring) testTargets(t *testing.T) {
	want := map[string]string{} // pod → job
	for _, p := range m.kosPods(t) {
		want[p.Name] = p.Labels["app.kubernetes.io/name"]
	}
	jobs := map[string]int{}
	for _, job := range want {
		jobs[job]++
	}
	wantJobs := map[string]int{"kos-apiserver": 2, "kos-etcd": 3, "kos-pki": 1, "kos-controller-manager": 2, "kos-agent": standardNodes}
	if diff := cmp.Diff(wantJobs, jobs); diff != "" {
		t.Fatalf("the KOS pods by component (-want +got):\n%s", diff)
	}
	poll.Until(t, 2*time.Minute, "every KOS pod to be a target, up", func(ctx context.Context) error {
		targets, err := m.prometheus.targets(ctx)
		if err != nil {
			return err
		}
		got := map[string]string{}
		var down []string
		for _, tg := range targets {
			pod := tg.Labels["pod"]
			got[pod] = tg.Labels["job"]
			if tg.Health != "up" {
				down = append(down, fmt.Sprintf("%s %s (%s): %s %s", tg.Labels["job"], pod, tg.ScrapeURL, tg.Health, tg.LastError))
			}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			return fmt.Errorf("targets by pod, with their job (-want +got):\n%s", diff)
		}
		if len(down) > 0 {
			return fmt.Errorf("targets not up: %s", strings.Join(down, "; "))
		}
		return nil
	})
	// up is what the alerts read: one series per target, each 1.
	got := map[string]int{}
	samples, err := m.prometheus.query(t.Context(), `count by (job) (up{job=~"kos-.*"} == 1)`)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range samples {
		got[s.Metric["job"]] = int(s.Value)
	}
	if diff := cmp.Diff(wantJobs, got); diff != "" {
		t.Errorf("targets with up == 1 by job (-want +got):\n%s", diff)
	}
}

// testRules checks that Prometheus loaded every alert of the shipped rules
// file (addons/kos-monitoring/rules), each healthy once evaluated.
func (m *monitoring) testRules(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(m.root, "addons", "kos-monitoring", "rules", "kos.rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Rules []struct {
				Alert string `json:"alert"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			want = append(want, r.Alert)
		}
	}
	slices.Sort(want)
	poll.Until(t, time.Minute, "every shipped alert to be loaded and evaluated", func(ctx context.Context) error {
		rules, err := m.prometheus.rules(ctx)
		if err != nil {
			return err
		}
		var got, unhealthy []string
		for _, r := range rules {
			if r.Type != "alerting" {
				continue
			}
			got = append(got, r.Name)
			if r.Health != "ok" {
				unhealthy = append(unhealthy, fmt.Sprintf("%s: %s %s", r.Name, r.Health, r.LastError))
			}
		}
		slices.Sort(got)
		if diff := cmp.Diff(want, got); diff != "" {
			return fmt.Errorf("alerting rules (-want +got):\n%s", diff)
		}
		if len(unhealthy) > 0 {
			return fmt.Errorf("rules not evaluated well: %s", strings.Join(unhealthy, "; "))
		}
		return nil
	})
}

// testAlertFires waits for the gone node's alert: kos-controller-manager's
// gauge of silent nodes at 1, the alert pending, then firing once its
// for: of 2 minutes has passed. No other alert may fire meanwhile: the
// cluster is healthy (only the alerts with a for: under the test's few
// minutes could).
func (m *monitoring) testAlertFires(t *testing.T) {
	// The Lease's duration and the controller's grace, a scrape, an
	// evaluation, the rule's for: and another evaluation: about 3
	// minutes.
	var pendingAfter time.Duration
	poll.Until(t, 6*time.Minute, heartbeatAlert+" to fire", func(ctx context.Context) error {
		state, err := m.alertState(ctx, heartbeatAlert)
		if err != nil {
			return err
		}
		if state == "pending" && pendingAfter == 0 {
			pendingAfter = time.Since(m.faultAt)
			t.Logf("%s pending %s after the Lease was left", heartbeatAlert, pendingAfter.Round(time.Second))
		}
		if state != "firing" {
			return fmt.Errorf("%s is %q", heartbeatAlert, state)
		}
		return nil
	})
	firedAfter := time.Since(m.faultAt)
	t.Logf("%s firing %s after the Lease was left", heartbeatAlert, firedAfter.Round(time.Second))
	figures.Duration(t, "monitoring-alert-pending", pendingAfter)
	figures.Duration(t, "monitoring-alert-firing", firedAfter)

	samples, err := m.prometheus.query(t.Context(), `kos_nodes_not_heartbeating{job="kos-controller-manager"}`)
	if err != nil {
		t.Fatal(err)
	}
	var silent []float64
	for _, s := range samples {
		silent = append(silent, s.Value)
	}
	// The leader counts one silent node, the other replica none.
	if slices.Max(append(silent, 0)) != 1 {
		t.Errorf("kos_nodes_not_heartbeating of the controller managers: %v, want 1 on the leader", silent)
	}
	alerts, err := m.prometheus.alerts(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range alerts {
		name := a.Labels["alertname"]
		switch {
		case name == heartbeatAlert:
		case a.State == "firing":
			t.Errorf("alert %s fires on the healthy cluster: %v", name, a.Labels)
		default:
			t.Logf("alert %s is %s: %v", name, a.State, a.Labels)
		}
	}
}

// testAlertResolves deletes the gone node's Lease, as the runbook says,
// and waits until the alert is gone.
func (m *monitoring) testAlertResolves(t *testing.T) {
	m.deleteGoneNode(t)
	began := time.Now()
	poll.Until(t, 2*time.Minute, heartbeatAlert+" to resolve", func(ctx context.Context) error {
		state, err := m.alertState(ctx, heartbeatAlert)
		if err != nil {
			return err
		}
		if state != "" {
			return fmt.Errorf("%s is %q", heartbeatAlert, state)
		}
		return nil
	})
	figures.Duration(t, "monitoring-alert-resolved", time.Since(began))
}

// alertState returns the state of the alert named name, "" when it is
// neither pending nor firing.
func (m *monitoring) alertState(ctx context.Context, name string) (string, error) {
	alerts, err := m.prometheus.alerts(ctx)
	if err != nil {
		return "", err
	}
	for _, a := range alerts {
		if a.Labels["alertname"] == name {
			return a.State, nil
		}
	}
	return "", nil
}

// testUninstall deletes kos-monitoring with its namespace as docs/install.md
// says of any addon, and checks that the cluster's addon objects are as
// they were before the install and that no record of it is left.
func (m *monitoring) testUninstall(t *testing.T) {
	m.uninstall(t)
	if t.Failed() {
		return
	}
	if diff := cmp.Diff(m.before, m.objectVersions(t)); diff != "" {
		t.Errorf("the cluster's addon objects after the uninstall (-before +after):\n%s", diff)
	}
	ns, err := m.kube.CoreV1().Namespaces().Get(t.Context(), "kube-system", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range slices.Sorted(maps.Keys(ns.Annotations)) {
		if strings.Contains(key, monitoringNamespace) {
			t.Errorf("kube-system keeps the annotation %s after the uninstall", key)
		}
	}
}

// uninstall deletes kos-monitoring and waits until its namespace is gone.
// It runs from a cleanup too, after t's context has ended: it has a
// context of its own.
func (m *monitoring) uninstall(t *testing.T) {
	m.installed = false
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	args := []string{"delete", "addon", "kos-monitoring", "--include-namespaces", "--yes", "--kubeconfig", m.env.Kubeconfig}
	var stdout, stderr strings.Builder
	code := cli.Main(ctx, args, &stdout, &stderr)
	t.Logf("channels %s:\n%s%s", strings.Join(args, " "), stdout.String(), stderr.String())
	if code != 0 {
		t.Errorf("channels %s: exit code %d", strings.Join(args, " "), code)
		return
	}
	for {
		_, err := m.kube.CoreV1().Namespaces().Get(ctx, monitoringNamespace, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return
		}
		if ctx.Err() != nil {
			t.Errorf("namespace %s still there after the uninstall: %v", monitoringNamespace, err)
			return
		}
		time.Sleep(time.Second)
	}
}
