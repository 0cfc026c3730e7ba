package driver_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/kos-sdn/kos/components/agent"
	"github.com/kos-sdn/kos/components/controllermanager"
	"github.com/kos-sdn/kos/components/driver"
	"github.com/kos-sdn/kos/components/fabric/logging"
	kosclient "github.com/kos-sdn/kos/components/generated/clientset/versioned"
	"github.com/kos-sdn/kos/tools/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var (
	kosOnce   sync.Once
	kosServer *testenv.KOS
	kosErr    error
)

// kosConfig returns an admin configuration straight to the package's
// kos-apiserver, starting it on first use.
func kosConfig(t testing.TB) *rest.Config {
	t.Helper()
	env := testenv.Shared(t)
	kosOnce.Do(func() { kosServer, kosErr = env.StartKOS(context.Background(), testenv.KOSOptions{}) })
	if kosErr != nil {
		t.Fatalf("starting kos-apiserver: %v", kosErr)
	}
	cfg := rest.CopyConfig(kosServer.DirectConfig)
	cfg.QPS, cfg.Burst = 1000, 2000
	return cfg
}

func testLogger(t testing.TB, component string) context.Context {
	logger := klog.LoggerWithValues(ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(1))), "component", component)
	return klog.NewContext(context.Background(), logger)
}

// cluster is what a driver run needs: KOS's controllers, and agents with
// logging fabrics (no switch, so no ping tests) on Node objects made for
// the test in the main cluster, labelled Label=true.
type cluster struct {
	Kube, KOS *rest.Config
	Label     string
	Nodes     []string
	// Registries hold the metrics of the controllers and of each agent.
	Controllers *controllermanager.Manager
	Agents      []*prometheus.Registry
}

// startCluster starts the controllers and an agent per node, in this
// process, until the test ends.
func startCluster(t *testing.T, nodes int) *cluster {
	t.Helper()
	env := testenv.Shared(t)
	c := &cluster{Kube: env.RESTConfig, KOS: kosConfig(t), Label: fmt.Sprintf("kos-driver-test-%d", time.Now().UnixNano()%1000000)}
	kube, err := kubernetes.NewForConfig(c.Kube)
	if err != nil {
		t.Fatal(err)
	}
	m, err := controllermanager.Config{Kube: c.Kube, KOS: c.KOS, IPAMWorkers: 4, SubnetValidatorWorkers: 2}.Complete().New()
	if err != nil {
		t.Fatalf("creating the controller manager: %v", err)
	}
	c.Controllers = m
	run(t, "controllers", m.Run)
	client, err := kosclient.NewForConfig(c.KOS)
	if err != nil {
		t.Fatal(err)
	}
	for i := range nodes {
		name := fmt.Sprintf("%s-n%d", c.Label, i)
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{c.Label: "true"}}}
		if _, err := kube.CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating node %s: %v", name, err)
		}
		t.Cleanup(func() { _ = kube.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
		c.Nodes = append(c.Nodes, name)
		reg := prometheus.NewRegistry()
		a, err := agent.New(agent.Config{
			NodeName: name, HostIP: netip.AddrFrom4([4]byte{192, 168, 100, byte(i + 1)}),
			Client: client, Fabric: logging.New(), Registerer: reg,
			FlowCheckPeriod: time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		c.Agents = append(c.Agents, reg)
		run(t, "agent-"+name, func(ctx context.Context) error { return a.Run(ctx, 2) })
	}
	return c
}

// run runs fn until the test ends.
func run(t *testing.T, name string, fn func(context.Context) error) {
	ctx, cancel := context.WithCancel(testLogger(t, name))
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s: %v", name, err)
		}
	})
}

// config returns a short driver run on c's nodes.
func (c *cluster) config(vniBase uint32, out *bytes.Buffer, csvOut io.Writer, reg prometheus.Registerer) driver.Config {
	sizes, err := driver.ParseSizes("uniform:2-5")
	if err != nil {
		panic(err)
	}
	return driver.Config{
		Kube: c.Kube, KOS: c.KOS, Networks: 3, Sizes: sizes, VNIBase: vniBase,
		NodeSelector: c.Label + "=true", Rate: 20, Arrivals: driver.ArrivalsPoisson, Threads: 4,
		Cruise: 2 * time.Second, ReadyTimeout: 30 * time.Second, Progress: time.Second,
		Out: out, CSV: csvOut, Registerer: reg,
	}
}

// checkCleanedUp checks that nothing of the run is left.
func checkCleanedUp(t *testing.T, c *cluster, res *driver.Result) {
	t.Helper()
	client, err := kosclient.NewForConfig(c.KOS)
	if err != nil {
		t.Fatal(err)
	}
	sel := metav1.ListOptions{LabelSelector: driver.RunLabel + "=" + res.RunID}
	atts, err := client.NetworkV1alpha1().NetworkAttachments(res.Namespace).List(context.Background(), sel)
	if err != nil || len(atts.Items) > 0 {
		t.Errorf("attachments left: %v, %v", err, atts)
	}
	subnets, err := client.NetworkV1alpha1().Subnets(res.Namespace).List(context.Background(), sel)
	if err != nil || len(subnets.Items) > 0 {
		t.Errorf("subnets left: %v, %v", err, subnets)
	}
	kube, err := kubernetes.NewForConfig(c.Kube)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := kube.CoreV1().Namespaces().Get(context.Background(), res.Namespace, metav1.GetOptions{})
	if err == nil && ns.DeletionTimestamp == nil {
		t.Errorf("namespace %s is left", res.Namespace)
	}
}

// TestIntegrationDriver runs a short load (warm-up, cruise, cool-down)
// against the real KOS API, controllers and two agents, and checks the
// summary, the CSV, the metrics and the cleanup.
func TestIntegrationDriver(t *testing.T) {
	c := startCluster(t, 2)
	var out, csvOut bytes.Buffer
	reg := prometheus.NewRegistry()
	d, err := driver.New(c.config(7100, &out, &csvOut, reg))
	if err != nil {
		t.Fatal(err)
	}
	res, err := d.Run(testLogger(t, "driver"))
	t.Logf("driver output:\n%s", out.String())
	if err != nil {
		t.Fatalf("driver: %v", err)
	}
	if n := res.TotalErrors(); n != 0 {
		t.Errorf("%d errors: %v", n, res.Errors)
	}
	var phases []string
	for _, p := range res.Phases {
		phases = append(phases, p.Name)
	}
	if got := strings.Join(phases, ","); got != "warm-up,cruise,cool-down" {
		t.Errorf("phases %s", got)
	}
	if res.Phases[1].Creates == 0 || res.Phases[1].Creates != res.Phases[1].Deletes {
		t.Errorf("cruise made %d creates and %d deletes, want as many of each and some", res.Phases[1].Creates, res.Phases[1].Deletes)
	}
	for _, want := range []string{"warm-up", "cruise", "cool-down", "create→ready", "p99", "errors: 0"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the output lacks %q", want)
		}
	}
	rows, err := csv.NewReader(&csvOut).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != res.Records+1 || strings.Join(rows[0], ",") != strings.Join(driver.CSVHeader, ",") {
		t.Fatalf("CSV has %d rows (header %v), want a header and %d", len(rows), rows[0], res.Records)
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	// Every attachment was created and deleted; those deleted in the
	// cruise before they were ready (when none was) lack later times.
	ready := 0
	for _, row := range rows[1:] {
		for _, h := range []string{"create_s", "delete_s"} {
			if row[col[h]] == "" {
				t.Errorf("attachment %s has no %s", row[col["name"]], h)
			}
		}
		if row[col["create_to_ready_s"]] != "" {
			ready++
			if row[col["create_to_address_s"]] == "" || row[col["ipv4"]] == "" {
				t.Errorf("attachment %s is ready without an address: %v", row[col["name"]], row)
			}
		}
	}
	if n := len(res.Latencies[driver.LatencyReady]); n != ready || ready < res.Records*8/10 {
		t.Errorf("%d create→ready latencies, %d in the CSV, of %d attachments", n, ready, res.Records)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var count uint64
	for _, f := range families {
		if f.GetName() == "kos_driver_create_to_ready_seconds" {
			for _, m := range f.GetMetric() {
				count += m.GetHistogram().GetSampleCount()
			}
		}
	}
	if count != uint64(ready) {
		t.Errorf("kos_driver_create_to_ready_seconds has %d samples, want %d", count, ready)
	}
	checkCleanedUp(t, c, res)
}

// TestIntegrationDriverInterrupted interrupts a run in its cruise: the
// driver still deletes what it made.
func TestIntegrationDriverInterrupted(t *testing.T) {
	c := startCluster(t, 1)
	var out bytes.Buffer
	cfg := c.config(7200, &out, nil, nil)
	cfg.Cruise = time.Hour
	d, err := driver.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(testLogger(t, "driver"), 4*time.Second)
	defer cancel()
	res, err := d.Run(ctx)
	t.Logf("driver output:\n%s", out.String())
	if err == nil || !strings.Contains(err.Error(), "interrupted") {
		t.Errorf("driver: %v, want an interruption", err)
	}
	if res.Records == 0 {
		t.Errorf("the driver made nothing before the interruption")
	}
	checkCleanedUp(t, c, res)
}
