package bench

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/kos-sdn/kos/channels"
	"github.com/kos-sdn/kos/tools/spawner"
	"github.com/kos-sdn/kos/tools/testenv"
)

// objects is the size of the addon the benchmarks apply; dropped is how many
// of them the upgrade leaves out, so that they are pruned.
const (
	objects = 200
	dropped = 50
)

// counter numbers the addons' namespaces.
var counter atomic.Int64

// channelsBinary returns cmd/channels, built once per run
// ($KOS_CHANNELS_BIN, when set, names a binary already built), so that
// channels and kubectl are both timed as the processes a person runs.
func channelsBinary(b *testing.B) string {
	b.Helper()
	if p := os.Getenv("KOS_CHANNELS_BIN"); p != "" {
		return p
	}
	return testenv.Build(b, "cmd/channels")
}

// set is one addon's files: its manifests and a channel listing them.
type set struct {
	ns      string
	dir     string
	full    string // manifest with every object
	smaller string // manifest without the last `dropped` objects
}

func newSet(b *testing.B, kind string) *set {
	b.Helper()
	s := &set{ns: fmt.Sprintf("bench-%s-%d", kind, counter.Add(1)), dir: b.TempDir()}
	s.full = filepath.Join(s.dir, "full.yaml")
	s.smaller = filepath.Join(s.dir, "smaller.yaml")
	write(b, s.full, Manifest(s.ns, objects, objects))
	write(b, s.smaller, Manifest(s.ns, objects, objects-dropped))
	return s
}

// channel writes a channel offering the addon at the given version, its
// manifest being full or smaller, and returns its path.
func (s *set) channel(b *testing.B, version, manifest string) string {
	b.Helper()
	p := filepath.Join(s.dir, "channel-"+version+".yaml")
	write(b, p, []byte(channelYAML(s.ns, []string{s.ns}, version, filepath.Base(manifest))))
	return p
}

// channelYAML lists one release of each named addon, all sharing one manifest.
func channelYAML(selectorValue string, names []string, version, manifest string) string {
	var sb strings.Builder
	sb.WriteString("kind: Addons\nmetadata:\n  name: bench\nspec:\n  addons:\n")
	for _, n := range names {
		fmt.Fprintf(&sb, "  - name: %s\n    version: %s\n    manifest: %s\n    selector:\n      %s: %s\n", n, version, manifest, SelectorKey, selectorValue)
	}
	return sb.String()
}

func write(b *testing.B, path string, data []byte) {
	b.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		b.Fatal(err)
	}
}

func run(b *testing.B, name string, args ...string) {
	b.Helper()
	runOn(b, testenv.Shared(b).Kubeconfig, name, args...)
}

func runOn(b *testing.B, kubeconfig, name string, args ...string) {
	b.Helper()
	cmd := exec.Command(name, append(args, "--kubeconfig", kubeconfig)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// tool is one way of applying the benchmark's objects.
type tool struct {
	name    string
	install func(b *testing.B, s *set)
	upgrade func(b *testing.B, s *set) // nil when the tool cannot prune
}

func tools(b *testing.B) []tool {
	bin := channelsBinary(b)
	allow := []string{}
	for _, k := range PruneAllowlist {
		allow = append(allow, "--prune-allowlist="+k)
	}
	return []tool{{
		name: "channels",
		// kubectl apply does not wait either; BenchmarkReadyInstall times
		// the wait.
		install: func(b *testing.B, s *set) {
			run(b, bin, "apply", "channel", s.channel(b, "1.0.0", s.full), "--yes", "--wait=false")
		},
		upgrade: func(b *testing.B, s *set) {
			run(b, bin, "apply", "channel", s.channel(b, "1.1.0", s.smaller), "--yes", "--wait=false")
		},
	}, {
		name:    "kubectl-client-side",
		install: func(b *testing.B, s *set) { run(b, "kubectl", "apply", "-f", s.full) },
		upgrade: func(b *testing.B, s *set) {
			run(b, "kubectl", append([]string{"apply", "-f", s.smaller, "--prune", "-l", SelectorKey + "=" + s.ns}, allow...)...)
		},
	}, {
		name:    "kubectl-server-side",
		install: func(b *testing.B, s *set) { run(b, "kubectl", "apply", "--server-side", "-f", s.full) },
		// No upgrade: kubectl refuses --prune with --server-side ("--prune is
		// in alpha and doesn't currently work on objects created by
		// server-side apply").
	}}
}

// BenchmarkColdInstall applies 200 objects of mixed kinds that do not exist yet.
func BenchmarkColdInstall(b *testing.B) {
	for _, t := range tools(b) {
		b.Run(t.name, func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				s := newSet(b, "cold")
				b.StartTimer()
				t.install(b, s)
			}
		})
	}
}

// BenchmarkNoOp applies the same 200 objects again.
func BenchmarkNoOp(b *testing.B) {
	for _, t := range tools(b) {
		b.Run(t.name, func(b *testing.B) {
			s := newSet(b, "noop")
			t.install(b, s)
			for b.Loop() {
				t.install(b, s)
			}
		})
	}
}

// BenchmarkUpgradePrune applies a release that drops 50 of the 200 objects,
// pruning them.
func BenchmarkUpgradePrune(b *testing.B) {
	for _, t := range tools(b) {
		if t.upgrade == nil {
			continue
		}
		b.Run(t.name, func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				s := newSet(b, "upgrade")
				t.install(b, s)
				b.StartTimer()
				t.upgrade(b, s)
			}
		})
	}
}

// BenchmarkReadyInstall installs 200 objects and waits until they are ready,
// on a control plane with kube-controller-manager: the manifest's 28
// Deployments have no replicas, so the controller rolls them out without a
// node. channels waits by default (kstatus); kubectl applies server-side and
// then waits with kubectl wait for every Deployment to be Available.
func BenchmarkReadyInstall(b *testing.B) {
	env, err := testenv.Start(context.Background(), testenv.Options{Components: []string{testenv.KubeControllerManager}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = env.Stop() })
	bin := channelsBinary(b)
	newReadySet := func(b *testing.B) *set {
		s := &set{ns: fmt.Sprintf("bench-ready-%d", counter.Add(1)), dir: b.TempDir()}
		s.full = filepath.Join(s.dir, "full.yaml")
		write(b, s.full, ManifestWithReplicas(s.ns, objects, objects, 0))
		return s
	}
	for _, t := range []tool{{
		name: "channels",
		install: func(b *testing.B, s *set) {
			runOn(b, env.Kubeconfig, bin, "apply", "channel", s.channel(b, "1.0.0", s.full), "--yes", "--timeout=5m")
		},
	}, {
		name: "kubectl-server-side+wait",
		install: func(b *testing.B, s *set) {
			runOn(b, env.Kubeconfig, "kubectl", "apply", "--server-side", "-f", s.full)
			runOn(b, env.Kubeconfig, "kubectl", "wait", "--for=condition=Available", "deployment", "--all", "-n", s.ns, "--timeout=5m")
		},
	}} {
		b.Run(t.name, func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				s := newReadySet(b)
				b.StartTimer()
				t.install(b, s)
			}
		})
	}
}

// countingTransport counts the requests a client makes, and the writes
// among them.
type countingTransport struct {
	next            http.RoundTripper
	requests, write atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.requests.Add(1)
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		c.write.Add(1)
	}
	return c.next.RoundTrip(r)
}

// BenchmarkNoOpRequests re-runs a channel of ten addons that are all
// installed, through the library as the CLI does, and reports the API
// requests it makes. Nothing is to be written, and the count must not grow
// with the number of objects or addons beyond one read per record namespace.
func BenchmarkNoOpRequests(b *testing.B) {
	env := testenv.Shared(b)
	ctx := context.Background()
	dir := b.TempDir()
	ns := fmt.Sprintf("bench-requests-%d", counter.Add(1))
	write(b, filepath.Join(dir, "manifest.yaml"), Manifest(ns, 20, 20))
	var names []string
	for i := range 10 {
		names = append(names, fmt.Sprintf("%s-addon-%d", ns, i))
	}
	loc := filepath.Join(dir, "channel.yaml")
	write(b, loc, []byte(channelYAML(ns, names, "1.0.0", "manifest.yaml")))

	runOnce := func(cfg *rest.Config) *channels.Plan {
		client, err := channels.NewClient(cfg)
		if err != nil {
			b.Fatal(err)
		}
		releases, err := channels.Load(ctx, channels.NewFetcher(), loc)
		if err != nil {
			b.Fatal(err)
		}
		plan, err := client.Plan(ctx, releases)
		if err != nil {
			b.Fatal(err)
		}
		if len(plan.Pending()) > 0 {
			if err := client.Apply(ctx, plan, channels.ApplyOptions{}); err != nil {
				b.Fatal(err)
			}
		}
		return plan
	}
	runOnce(env.RESTConfig)

	for b.Loop() {
		counting := &countingTransport{}
		cfg := rest.CopyConfig(env.RESTConfig)
		cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { counting.next = rt; return counting })
		plan := runOnce(cfg)
		if n := len(plan.Pending()); n != 0 {
			b.Fatalf("re-run plans %d updates, want none", n)
		}
		if w := counting.write.Load(); w != 0 {
			b.Fatalf("re-run wrote %d times, want none", w)
		}
		b.ReportMetric(float64(counting.requests.Load()), "requests/op")
		b.ReportMetric(float64(counting.write.Load()), "writes/op")
	}
}

// BenchmarkVersusKubectl times channels and kubectl apply --server-side
// side by side, as the processes a person runs, on the same control plane
// and the same 200 objects, one tool right after the other in every
// iteration so that both see the same load: a cold install, a no-op re-run
// of it, and an upgrade that drops 50 objects and prunes them (kubectl
// prunes server-side applied objects only with an ApplySet, so its
// upgrade's objects were installed with one). It reports each tool's mean
// time, kubectl's over channels' (the ratio), and the 1-minute load average
// around each iteration. For the cold install it also reports the CPU each
// tool's process used (cold-*-cpu-s) and what kube-apiserver and etcd used
// meanwhile (cold-*-server-cpu-s): on a machine of two cores a run cannot
// take less than the sum of these over two, however little it waits.
//
// With $KOS_CHANNELS_BASELINE naming another channels binary (an older
// build), every iteration also times its cold install of the same objects,
// before or after the binary under test in turn, and reports it as
// cold-baseline-s and cold-baseline-ratio: a before and after at one load.
func BenchmarkVersusKubectl(b *testing.B) {
	bin := channelsBinary(b)
	baseline := os.Getenv("KOS_CHANNELS_BASELINE")
	plane := testenv.Shared(b)
	kubeconfig := plane.Kubeconfig
	var servers []string
	for _, p := range plane.Processes() {
		if p.Name == "kube-apiserver" || p.Name == "etcd" {
			servers = append(servers, strconv.Itoa(p.PID))
		}
	}
	if len(servers) != 2 {
		b.Fatalf("found the processes %v of kube-apiserver and etcd, want two", servers)
	}
	serverCPU := func(b *testing.B) time.Duration {
		var sum time.Duration
		for _, pid := range servers {
			d, err := spawner.CPUTime(pid)
			if err != nil {
				b.Fatal(err)
			}
			sum += d
		}
		return sum
	}
	// cpu is what a timed run used: its process, and the servers meanwhile.
	type cpu struct{ client, server time.Duration }
	var last cpu
	timed := func(b *testing.B, env []string, name string, args ...string) time.Duration {
		b.Helper()
		cmd := exec.Command(name, append(args, "--kubeconfig", kubeconfig)...)
		cmd.Env = append(os.Environ(), env...)
		server := serverCPU(b)
		start := time.Now()
		out, err := cmd.CombinedOutput()
		took := time.Since(start)
		if err != nil {
			b.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		last = cpu{client: cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(), server: serverCPU(b) - server}
		return took
	}
	applySet := []string{"KUBECTL_APPLYSET=true"}
	kubectlSet := func(b *testing.B, s *set, manifest string) time.Duration {
		return timed(b, applySet, "kubectl", "apply", "--server-side", "--prune", "--applyset=bench", "-n", s.ns, "-f", manifest)
	}
	var sum struct{ cold, noop, upgrade [2]time.Duration }
	var coldCPU [2]cpu
	var baselineCold time.Duration
	var load float64
	iteration := 0
	for b.Loop() {
		before := loadAverage(b)
		coldBaseline := func() {
			if baseline != "" {
				s := newSet(b, "versus-baseline")
				baselineCold += timed(b, nil, baseline, "apply", "channel", s.channel(b, "1.0.0", s.full), "--yes", "--wait=false")
			}
		}
		iteration++
		if iteration%2 == 1 {
			coldBaseline()
		}
		// channels: install, re-run, upgrade with prune.
		c := newSet(b, "versus-channels")
		sum.cold[0] += timed(b, nil, bin, "apply", "channel", c.channel(b, "1.0.0", c.full), "--yes", "--wait=false")
		coldCPU[0].client += last.client
		coldCPU[0].server += last.server
		if iteration%2 == 0 {
			coldBaseline()
		}
		sum.noop[0] += timed(b, nil, bin, "apply", "channel", c.channel(b, "1.0.0", c.full), "--yes", "--wait=false")
		sum.upgrade[0] += timed(b, nil, bin, "apply", "channel", c.channel(b, "1.1.0", c.smaller), "--yes", "--wait=false")
		// kubectl: install and re-run plainly; install in an ApplySet
		// (its namespace made first, as the ApplySet lives in it), then
		// upgrade with prune.
		k := newSet(b, "versus-kubectl")
		sum.cold[1] += timed(b, nil, "kubectl", "apply", "--server-side", "-f", k.full)
		coldCPU[1].client += last.client
		coldCPU[1].server += last.server
		sum.noop[1] += timed(b, nil, "kubectl", "apply", "--server-side", "-f", k.full)
		p := newSet(b, "versus-kubectl-prune")
		timed(b, nil, "kubectl", "create", "namespace", p.ns)
		kubectlSet(b, p, p.full)
		sum.upgrade[1] += kubectlSet(b, p, p.smaller)
		load += (before + loadAverage(b)) / 2
	}
	n := float64(b.N)
	for _, m := range []struct {
		name string
		d    [2]time.Duration
	}{{"cold", sum.cold}, {"noop", sum.noop}, {"upgrade", sum.upgrade}} {
		b.ReportMetric(m.d[0].Seconds()/n, m.name+"-channels-s")
		b.ReportMetric(m.d[1].Seconds()/n, m.name+"-kubectl-s")
		b.ReportMetric(float64(m.d[1])/float64(m.d[0]), m.name+"-ratio")
	}
	for i, tool := range []string{"channels", "kubectl"} {
		b.ReportMetric(coldCPU[i].client.Seconds()/n, "cold-"+tool+"-cpu-s")
		b.ReportMetric(coldCPU[i].server.Seconds()/n, "cold-"+tool+"-server-cpu-s")
	}
	if baseline != "" {
		b.ReportMetric(baselineCold.Seconds()/n, "cold-baseline-s")
		b.ReportMetric(float64(sum.cold[1])/float64(baselineCold), "cold-baseline-ratio")
	}
	b.ReportMetric(load/n, "load")
}

// loadAverage returns the host's 1-minute load average.
func loadAverage(b *testing.B) float64 {
	b.Helper()
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		b.Fatal(err)
	}
	var load float64
	if _, err := fmt.Sscan(string(data), &load); err != nil {
		b.Fatalf("reading /proc/loadavg: %v", err)
	}
	return load
}
