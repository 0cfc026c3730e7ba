package bench

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/kos-sdn/kos/channels"
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
