package monitoring

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"sigs.k8s.io/yaml"

	"github.com/kos-sdn/kos/components/agent"
	"github.com/kos-sdn/kos/components/controllermanager"
	"github.com/kos-sdn/kos/components/driver"
	"github.com/kos-sdn/kos/components/fabric/logging"
	kosclient "github.com/kos-sdn/kos/components/generated/clientset/versioned"
	"github.com/kos-sdn/kos/components/monitoring"
	"github.com/kos-sdn/kos/tools/poll"
	"github.com/kos-sdn/kos/tools/prombuild"
	"github.com/kos-sdn/kos/tools/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// serve serves h on a free loopback port until the test ends and returns
// the address.
func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	s, err := monitoring.Listen("127.0.0.1:0", h)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serving metrics: %v", err)
		}
	})
	return s.Addr()
}

// run runs fn until the test ends.
func run(t *testing.T, name string, fn func(context.Context) error) {
	logger := klog.LoggerWithValues(ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(0))), "component", name)
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s: %v", name, err)
		}
	})
}

// target is a static Prometheus target standing for a pod that the addon's
// pod discovery would find.
type target struct {
	job, address, name, port, node string
	// pod is the pod's name; "" means name-0.
	pod string
}

func (tg target) staticConfig() map[string]any {
	pod := tg.pod
	if pod == "" {
		pod = tg.name + "-0"
	}
	return map[string]any{
		"targets": []string{tg.address},
		"labels": map[string]string{
			"__meta_kubernetes_namespace":                           "example-com",
			"__meta_kubernetes_pod_name":                            pod,
			"__meta_kubernetes_pod_node_name":                       tg.node,
			"__meta_kubernetes_pod_label_app_kubernetes_io_name":    tg.name,
			"__meta_kubernetes_pod_label_app_kubernetes_io_part_of": "kos",
			"__meta_kubernetes_pod_container_port_name":             tg.port,
		},
	}
}

// localFiles are the files a test's Prometheus reads in place of those the
// addon's pod mounts.
type localFiles struct {
	// token is kos-apiserver's bearer token (the ServiceAccount's).
	token string
	// kosCA verifies kos-apiserver's certificate (ConfigMap kos-ca), and
	// serverName is the name the certificate holds.
	kosCA, serverName string
	// rules are the alert rules (ConfigMap prometheus-rules).
	rules string
}

// prometheusConfig returns the addon's Prometheus configuration with each
// job's pod discovery replaced by the static targets of that job, scraping
// and evaluating every second, and the files the pod mounts replaced by
// files. Every job must have a target unless onlyTargeted, which drops the
// jobs without one.
func prometheusConfig(t *testing.T, addonConfig string, targets []target, files localFiles, onlyTargeted bool) []byte {
	t.Helper()
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(addonConfig), &cfg); err != nil {
		t.Fatalf("the addon's prometheus.yml: %v", err)
	}
	cfg["global"] = map[string]any{"scrape_interval": "1s", "evaluation_interval": "1s"}
	if _, ok := cfg["rule_files"]; !ok {
		t.Fatal("the addon's prometheus.yml loads no rule file")
	}
	cfg["rule_files"] = []string{files.rules}
	jobs, _ := cfg["scrape_configs"].([]any)
	var kept []any
	for _, j := range jobs {
		job := j.(map[string]any)
		if _, ok := job["kubernetes_sd_configs"]; !ok {
			t.Fatalf("job %v discovers no pods", job["job_name"])
		}
		delete(job, "kubernetes_sd_configs")
		var statics []any
		for _, tg := range targets {
			if tg.job == job["job_name"] {
				statics = append(statics, tg.staticConfig())
			}
		}
		if len(statics) == 0 {
			if onlyTargeted {
				continue
			}
			t.Fatalf("no target for job %v", job["job_name"])
		}
		job["static_configs"] = statics
		if auth, ok := job["authorization"].(map[string]any); ok {
			auth["credentials_file"] = files.token
		}
		if tls, ok := job["tls_config"].(map[string]any); ok {
			if tls["ca_file"] == nil || tls["insecure_skip_verify"] == true {
				t.Fatalf("job %v: tls_config %v does not verify the server", job["job_name"], tls)
			}
			tls["ca_file"], tls["server_name"] = files.kosCA, files.serverName
		}
		kept = append(kept, job)
	}
	cfg["scrape_configs"] = kept
	data, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// writeFile writes data into a new file of the test's and returns its path.
func writeFile(t *testing.T, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// addonIdentity creates the addon's namespace, Prometheus's ServiceAccount
// and its RBAC from the manifest, and returns a token of that
// ServiceAccount.
func addonIdentity(t *testing.T, env *testenv.Env, objs []*unstructured.Unstructured) string {
	t.Helper()
	ctx := context.Background()
	dyn, err := dynamic.NewForConfig(env.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	resources := map[string]schema.GroupVersionResource{
		"Namespace":          {Version: "v1", Resource: "namespaces"},
		"ServiceAccount":     {Version: "v1", Resource: "serviceaccounts"},
		"ClusterRole":        {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"},
		"ClusterRoleBinding": {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"},
	}
	for _, u := range objs {
		gvr, ok := resources[u.GetKind()]
		if !ok {
			continue
		}
		var ri dynamic.ResourceInterface = dyn.Resource(gvr)
		if u.GetNamespace() != "" {
			ri = dyn.Resource(gvr).Namespace(u.GetNamespace())
		}
		if _, err := ri.Apply(ctx, u.GetName(), u, metav1.ApplyOptions{FieldManager: "monitoring-test", Force: true}); err != nil {
			t.Fatalf("applying %s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
	kube, err := kubernetes.NewForConfig(env.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := kube.CoreV1().ServiceAccounts("kos-monitoring").CreateToken(ctx, "prometheus", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("requesting a token of kos-monitoring/prometheus: %v", err)
	}
	return tr.Status.Token
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startPrometheus runs the Prometheus the manifest runs (prombuild) with config until the test ends,
// and returns its base URL.
func startPrometheus(t *testing.T, config []byte) string {
	t.Helper()
	bin, err := prombuild.Binary(t.Context(), "prometheus")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgFile, config, 0o600); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	log, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config.file="+cfgFile, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--storage.tsdb.retention.time=1h")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		log.Close()
		if t.Failed() {
			data, _ := os.ReadFile(log.Name())
			t.Logf("prometheus log:\n%s", data)
		}
	})
	base := "http://" + addr
	poll.Until(t, time.Minute, "prometheus is ready", func(ctx context.Context) error {
		resp, err := http.Get(base + "/-/ready")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	})
	return base
}

type apiResponse struct {
	Status string          `json:"status"`
	Error  string          `json:"error"`
	Data   json.RawMessage `json:"data"`
}

func promGet(base, path string, params url.Values) (json.RawMessage, error) {
	resp, err := http.Get(base + path + "?" + params.Encode())
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	var r apiResponse
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("%s: %s", resp.Status, body)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("%s", r.Error)
	}
	return r.Data, nil
}

// instantQuery runs an instant query and returns its vector's values.
func instantQuery(base, expr string) ([]float64, error) {
	data, err := promGet(base, "/api/v1/query", url.Values{"query": {expr}})
	if err != nil {
		return nil, err
	}
	var v struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Value [2]any `json:"value"`
		} `json:"result"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, err
	}
	var out []float64
	for _, r := range v.Result {
		s, _ := r.Value[1].(string)
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

// TestIntegrationDashboardsHaveData runs the KOS components on the shared
// control plane (kos-apiserver and its etcd as processes, the controllers and
// two agents with logging fabrics in this process, each serving its
// /metrics), Prometheus with the addon's configuration, and kos-driver for a
// short load; then every query of every dashboard panel must return at least
// one series with a number (not NaN), and every KOS metric scraped must be in
// docs/metrics.md.
func TestIntegrationDashboardsHaveData(t *testing.T) {
	env := testenv.Shared(t)
	ctx := context.Background()
	kosServer, err := env.StartKOS(ctx, testenv.KOSOptions{})
	if err != nil {
		t.Fatalf("starting kos-apiserver: %v", err)
	}
	kosCfg := rest.CopyConfig(kosServer.DirectConfig)
	kosCfg.QPS, kosCfg.Burst = 1000, 2000
	objs := manifestObjects(t)
	files := localFiles{
		token: writeFile(t, "token", []byte(addonIdentity(t, env, objs))),
		// The test's kos-apiserver has a self-signed certificate for
		// localhost; the addon's verifies the KOS CA's for its Service.
		kosCA: kosServer.CACertFile, serverName: "localhost",
		rules: writeFile(t, "kos.rules.yaml", []byte(rulesFile(t))),
	}

	label := fmt.Sprintf("kos-monitoring-test-%d", time.Now().UnixNano()%1000000)
	m, err := controllermanager.Config{Kube: env.RESTConfig, KOS: kosCfg, IPAMWorkers: 4, SubnetValidatorWorkers: 2}.Complete().New()
	if err != nil {
		t.Fatal(err)
	}
	run(t, "controllers", m.Run)
	targets := []target{
		{job: "kos-apiserver", address: strings.TrimPrefix(kosServer.URL, "https://"), name: "kos-apiserver", port: "https", node: label + "-n0"},
		{job: "kos", address: strings.TrimPrefix(kosServer.EtcdURL, "http://"), name: "kos-etcd", port: "metrics", node: label + "-n0"},
		{job: "kos", address: serve(t, m.Handler()), name: "kos-controller-manager", port: "metrics", node: label + "-n0"},
	}
	kube, err := kubernetes.NewForConfig(env.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	client, err := kosclient.NewForConfig(kosCfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		name := fmt.Sprintf("%s-n%d", label, i)
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{label: "true"}}}
		if _, err := kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = kube.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		a, err := agent.New(agent.Config{
			NodeName: name, HostIP: netip.AddrFrom4([4]byte{192, 168, 100, byte(i + 1)}),
			Client: client, Fabric: logging.New(), Registerer: reg, FlowCheckPeriod: time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		run(t, "agent-"+name, func(ctx context.Context) error { return a.Run(ctx, 2) })
		targets = append(targets, target{job: "kos", address: serve(t, monitoring.Handler(reg)), name: "kos-agent", port: "metrics", node: name})
	}
	config := prometheusConfig(t, configMapData(t, objs, "prometheus-config")["prometheus.yml"], targets, files, false)
	base := startPrometheus(t, config)
	poll.Until(t, time.Minute, "every target is up", func(context.Context) error {
		up, err := instantQuery(base, "up")
		if err != nil {
			return err
		}
		if len(up) != len(targets) || slices.Contains(up, 0) {
			data, _ := promGet(base, "/api/v1/targets", nil)
			return fmt.Errorf("up %v of %d targets: %s", up, len(targets), data)
		}
		return nil
	})

	// The shipped alert rules are loaded and evaluate without error.
	poll.Until(t, time.Minute, "every alert rule is loaded and evaluated", func(context.Context) error {
		return rulesHealthy(base, len(alertNames(t, rulesFile(t))))
	})

	// The dashboards' node variable offers both nodes.
	data, err := promGet(base, "/api/v1/label/node/values", url.Values{"match[]": {strings.TrimSuffix(strings.TrimPrefix(nodeVariable, "label_values("), ", node)")}})
	if err != nil {
		t.Fatal(err)
	}
	var nodes []string
	if err := json.Unmarshal(data, &nodes); err != nil {
		t.Fatal(err)
	}
	if want := []string{label + "-n0", label + "-n1"}; !slices.Equal(nodes, want) {
		t.Errorf("the node variable's values are %v, want %v", nodes, want)
	}

	// A short load: subnets, attachments on both nodes, churn.
	sizes, err := driver.ParseSizes("uniform:3-6")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	driverReg := prometheus.NewRegistry()
	d, err := driver.New(driver.Config{
		Kube: env.RESTConfig, KOS: kosCfg, Networks: 3, Sizes: sizes, VNIBase: 7300,
		NodeSelector: label + "=true", Rate: 20, Arrivals: driver.ArrivalsSteady, Threads: 4,
		Cruise: 8 * time.Second, ReadyTimeout: 30 * time.Second, Out: &out, Registerer: driverReg,
	})
	if err != nil {
		t.Fatal(err)
	}
	res, err := d.Run(klog.NewContext(ctx, klog.Background()))
	t.Logf("driver:\n%s", out.String())
	if err != nil || res.TotalErrors() > 0 {
		t.Fatalf("driver: %v, errors %v", err, res.Errors)
	}
	// Prometheus scrapes every second: the last scrapes of the load come
	// in shortly.
	// Every query has data with the node variable at "All" and at the
	// node that runs every component.
	var queries []query
	for _, q := range dashboardQueries(t) {
		for _, node := range []string{".*", regexp.QuoteMeta(label + "-n0")} {
			queries = append(queries, query{q.dashboard, q.panel, withNode(q.expr, node)})
		}
	}
	poll.Until(t, time.Minute, "every dashboard query has data", func(context.Context) error {
		var missing []string
		for _, q := range queries {
			values, err := instantQuery(base, q.expr)
			has := slices.ContainsFunc(values, func(v float64) bool { return !math.IsNaN(v) })
			if err != nil || !has {
				missing = append(missing, fmt.Sprintf("%s / %s: %s: values %v, error %v", q.dashboard, q.panel, q.expr, values, err))
			}
		}
		if len(missing) > 0 {
			slices.Sort(missing)
			return fmt.Errorf("no data for %d queries:\n%s", len(missing), strings.Join(missing, "\n"))
		}
		return nil
	})

	// Every KOS metric the components exposed, and the driver's, is in
	// docs/metrics.md.
	data, err = promGet(base, "/api/v1/label/__name__/values", nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	if err := json.Unmarshal(data, &names); err != nil {
		t.Fatal(err)
	}
	families, err := driverReg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		names = append(names, f.GetName())
	}
	checkDocumented(t, names)
}

// ownMetric matches the metrics KOS defines (as opposed to those of the
// libraries, documented by family): they must each be in docs/metrics.md.
var ownMetric = regexp.MustCompile(`^(kos_|workqueue_)`)

func checkDocumented(t *testing.T, names []string) {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_sum"), "_count")
		if ownMetric.MatchString(n) && !bytes.Contains(doc, []byte("`"+base+"`")) {
			t.Errorf("metric %s is not in docs/metrics.md", base)
		}
	}
}

// rulesHealthy returns nil when Prometheus has loaded want rules and
// evaluated each without error.
func rulesHealthy(base string, want int) error {
	data, err := promGet(base, "/api/v1/rules", nil)
	if err != nil {
		return err
	}
	var r struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Name      string `json:"name"`
				Health    string `json:"health"`
				LastError string `json:"lastError"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return err
	}
	n := 0
	var problems []string
	for _, g := range r.Groups {
		for _, rule := range g.Rules {
			n++
			if rule.Health != "ok" {
				problems = append(problems, fmt.Sprintf("%s/%s: health %q %s", g.Name, rule.Name, rule.Health, rule.LastError))
			}
		}
	}
	if n != want || len(problems) > 0 {
		return fmt.Errorf("%d rules loaded, want %d; %s", n, want, strings.Join(problems, "; "))
	}
	return nil
}
