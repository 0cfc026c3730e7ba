package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kos-sdn/kos/channels/daemon"
	"github.com/kos-sdn/kos/tools/testenv"
)

// BenchmarkDriftPass times one pass of the channels daemon over an
// installed addon of 200 objects, against what kubectl would do to repair
// drift: apply every object again with kubectl apply --server-side.
//
//   - drift: one ConfigMap edited and one Secret deleted by hand before each
//     pass; the pass lists the objects' metadata (one list per kind) and
//     re-applies the two;
//   - no-drift: nothing changed; the pass lists the metadata and applies
//     nothing;
//   - full: the pass every --full-check-every (10 by default) that
//     re-applies all 200 objects;
//   - kubectl-server-side: kubectl apply --server-side of the 200 objects.
func BenchmarkDriftPass(b *testing.B) {
	env := testenv.Shared(b)
	ctx := context.Background()
	k, err := kubernetes.NewForConfig(env.RESTConfig)
	if err != nil {
		b.Fatal(err)
	}
	s := newSet(b, "drift")
	loc := s.channel(b, "1.0.0", s.full)

	newDaemon := func(b *testing.B, cfg *rest.Config, fullEvery int) *daemon.Daemon {
		d, err := daemon.New(cfg, daemon.Options{
			Locations: []string{loc}, Interval: time.Second, FullCheckEvery: fullEvery,
			Drift: daemon.DriftRepair, // the benchmark times repairs
		})
		if err != nil {
			b.Fatal(err)
		}
		return d
	}
	// Install, and learn the objects.
	d := newDaemon(b, env.RESTConfig, 1000)
	if res := d.Pass(ctx); res.Err != nil {
		b.Fatal(res.Err)
	}

	b.Run("drift", func(b *testing.B) {
		counting := &countingTransport{}
		cfg := rest.CopyConfig(env.RESTConfig)
		cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { counting.next = rt; return counting })
		d := newDaemon(b, cfg, 1000)
		if res := d.Pass(ctx); res.Err != nil {
			b.Fatal(res.Err)
		}
		i := 0
		for b.Loop() {
			b.StopTimer()
			i++
			patch := fmt.Appendf(nil, `{"data":{"key":"edited-%d"}}`, i)
			if _, err := k.CoreV1().ConfigMaps(s.ns).Patch(ctx, "obj-007", types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "kubectl-edit"}); err != nil {
				b.Fatal(err)
			}
			if err := k.CoreV1().Secrets(s.ns).Delete(ctx, "obj-008", metav1.DeleteOptions{}); err != nil {
				b.Fatal(err)
			}
			counting.requests.Store(0)
			counting.write.Store(0)
			b.StartTimer()
			res := d.Pass(ctx)
			if res.Err != nil {
				b.Fatal(res.Err)
			}
			if res.Drift.Changed != 1 || res.Drift.Deleted != 1 {
				b.Fatalf("pass repaired %d changed and %d deleted objects, want 1 and 1", res.Drift.Changed, res.Drift.Deleted)
			}
		}
		b.ReportMetric(float64(counting.requests.Load()), "requests/op")
		b.ReportMetric(float64(counting.write.Load()), "writes/op")
	})

	b.Run("no-drift", func(b *testing.B) {
		counting := &countingTransport{}
		cfg := rest.CopyConfig(env.RESTConfig)
		cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { counting.next = rt; return counting })
		d := newDaemon(b, cfg, 1000)
		if res := d.Pass(ctx); res.Err != nil {
			b.Fatal(res.Err)
		}
		for b.Loop() {
			counting.requests.Store(0)
			counting.write.Store(0)
			if res := d.Pass(ctx); res.Err != nil || res.Drift.Changed+res.Drift.Deleted != 0 {
				b.Fatalf("pass: %v, drift %+v", res.Err, res.Drift)
			}
		}
		b.ReportMetric(float64(counting.requests.Load()), "requests/op")
		b.ReportMetric(float64(counting.write.Load()), "writes/op")
	})

	b.Run("full", func(b *testing.B) {
		d := newDaemon(b, env.RESTConfig, 1)
		for b.Loop() {
			if res := d.Pass(ctx); res.Err != nil {
				b.Fatal(res.Err)
			}
		}
	})

	b.Run("kubectl-server-side", func(b *testing.B) {
		for b.Loop() {
			run(b, "kubectl", "apply", "--server-side", "--force-conflicts", "-f", s.full)
		}
	})
}

// BenchmarkDaemonRSS runs the channels binary as a daemon (--interval 1s)
// over the 200-object addon and reports its resident memory, and the
// anonymous part of it (heap and stacks, without the binary's pages),
// after the first 10 passes and after the last. The issue asks for 600 passes
// ($KOS_BENCH_DAEMON_PASSES sets another number). Run it with -benchtime 1x.
func BenchmarkDaemonRSS(b *testing.B) {
	env := testenv.Shared(b)
	passes := 600
	if v := os.Getenv("KOS_BENCH_DAEMON_PASSES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 20 {
			b.Fatalf("KOS_BENCH_DAEMON_PASSES=%q: want a number of passes, 20 or more", v)
		}
		passes = n
	}
	s := newSet(b, "rss")
	loc := s.channel(b, "1.0.0", s.full)
	bin := channelsBinary(b)
	for b.Loop() {
		cmd := exec.Command(bin, "apply", "channel", loc, "--yes", "--wait=false", "--interval=1s",
			"--metrics-bind-address=127.0.0.1:0", "--health-bind-address=", "--kubeconfig", env.Kubeconfig)
		out, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		addr := make(chan string, 1)
		go func() {
			re := regexp.MustCompile(`metrics on (\S+)`)
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if m := re.FindStringSubmatch(sc.Text()); m != nil {
					addr <- m[1]
				}
			}
		}()
		var base string
		select {
		case a := <-addr:
			base = "http://" + a
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			b.Fatal("the daemon did not serve metrics within 30s")
		}
		waitPasses := func(n int) {
			for {
				if passesOf(b, base) >= float64(n) {
					return
				}
				time.Sleep(200 * time.Millisecond)
			}
		}
		waitPasses(10)
		early, earlyAnon := rssOf(b, cmd.Process.Pid)
		waitPasses(passes)
		late, lateAnon := rssOf(b, cmd.Process.Pid)
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		b.ReportMetric(early/(1<<20), "RSS-MiB-after-10-passes")
		b.ReportMetric(late/(1<<20), fmt.Sprintf("RSS-MiB-after-%d-passes", passes))
		b.ReportMetric(earlyAnon/(1<<20), "anon-MiB-after-10-passes")
		b.ReportMetric(lateAnon/(1<<20), fmt.Sprintf("anon-MiB-after-%d-passes", passes))
	}
}

// passesOf reads the daemon's count of successful passes.
func passesOf(b *testing.B, base string) float64 {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if rest, ok := strings.CutPrefix(line, `channels_passes_total{result="success"} `); ok {
			v, _ := strconv.ParseFloat(rest, 64)
			return v
		}
	}
	return 0
}

// rssOf reads a process's resident memory and the anonymous part of it
// (the heap and stacks; the rest is the binary's pages), in bytes.
func rssOf(b *testing.B, pid int) (rss, anon float64) {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		b.Fatal(err)
	}
	kB := func(rest string) float64 {
		v, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
		if err != nil {
			b.Fatal(err)
		}
		return v * 1024
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			rss = kB(rest)
		}
		if rest, ok := strings.CutPrefix(line, "RssAnon:"); ok {
			anon = kB(rest)
		}
	}
	if rss == 0 || anon == 0 {
		b.Fatal("no VmRSS or RssAnon in /proc status")
	}
	return rss, anon
}
