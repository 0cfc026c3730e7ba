package agent_test

// This file holds what the agents' benchmarks read from the API servers and
// report: the requests kube-apiserver and kos-apiserver served, by verb and
// resource, kos-apiserver's priority-and-fairness queue wait, and the figure
// lines, percentiles and load average they print.

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kos-sdn/kos/tools/testenv"
)

// kubeMetrics reads an API server's /metrics: the main cluster's
// kube-apiserver's, or kos-apiserver's. With codes, request counts are
// told apart by response code too.
type kubeMetrics struct {
	client rest.Interface
	codes  bool
}

func kubeRequests(b *testing.B) kubeMetrics {
	kube, err := kubernetes.NewForConfig(testenv.Shared(b).RESTConfig)
	if err != nil {
		b.Fatal(err)
	}
	return kubeMetrics{client: kube.CoreV1().RESTClient()}
}

// requestCounts are apiserver_request_total's counts by "VERB resource"
// (group/resource/subresource, the group left out for the core group).
type requestCounts map[string]float64

// take returns kube-apiserver's request counts so far; non-resource
// requests (such as /metrics) are left out.
func (k kubeMetrics) take(b *testing.B) requestCounts {
	b.Helper()
	data, err := k.client.Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		b.Fatalf("scraping kube-apiserver: %v", err)
	}
	out := requestCounts{}
	for line := range strings.SplitSeq(string(data), "\n") {
		rest, ok := strings.CutPrefix(line, "apiserver_request_total{")
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			b.Fatalf("parsing %q: %v", line, err)
		}
		l := map[string]string{}
		for pair := range strings.SplitSeq(labels, ",") {
			name, quoted, _ := strings.Cut(pair, "=")
			l[name] = strings.Trim(quoted, `"`)
		}
		if l["resource"] == "" {
			continue
		}
		resource := strings.Trim(strings.Join([]string{l["group"], l["resource"], l["subresource"]}, "/"), "/")
		key := l["verb"] + " " + resource
		if k.codes {
			key += " " + l["code"]
		}
		out[key] += v
	}
	return out
}

func (c requestCounts) since(before requestCounts) requestCounts {
	out := requestCounts{}
	for k, v := range c {
		if d := v - before[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

func (c requestCounts) total() float64 {
	sum := 0.0
	for _, v := range c {
		sum += v
	}
	return sum
}

// of sums the counts of one resource, whatever the verb.
func (c requestCounts) of(resource string) float64 {
	sum := 0.0
	for k, v := range c {
		if _, r, _ := strings.Cut(k, " "); r == resource {
			sum += v
		}
	}
	return sum
}

// String lists the counts, the largest first.
func (c requestCounts) String() string {
	keys := slices.Collect(maps.Keys(c))
	slices.SortFunc(keys, func(a, b string) int { return cmp.Or(cmp.Compare(c[b], c[a]), strings.Compare(a, b)) })
	parts := []string{fmt.Sprintf("%.0f in all", c.total())}
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.0f", k, c[k]))
	}
	return strings.Join(parts, ", ")
}

// waitEvents waits, up to 30 seconds, until kube-apiserver has taken n
// Event writes (creates and patches) since before.
func waitEvents(b *testing.B, k kubeMetrics, before requestCounts, n int) {
	b.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := k.take(b).since(before)
		written := got["POST events"] + got["PATCH events"]
		if written >= float64(n) || time.Now().After(deadline) {
			if written < float64(n) {
				b.Logf("kube-apiserver took %.0f Event writes for %d attachments", written, n)
			}
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// figure prints a line of a benchmark's findings on the standard output,
// prefixed with the benchmark's name: go test keeps only the first ten
// lines of a benchmark's log.
func figure(b *testing.B, format string, args ...any) {
	fmt.Printf("%s: %s\n", b.Name(), fmt.Sprintf(format, args...))
}

func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(data))[:3], " ")
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(float64(len(sorted))*p))]
}

func msec(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// flowControlWait returns kos-apiserver's priority-and-fairness queue wait
// so far: its apiserver_flowcontrol_request_wait_duration_seconds, sum
// ("PL s") and count ("PL n") by priority level.
func flowControlWait(b *testing.B) requestCounts {
	b.Helper()
	data, err := kosClient(b).RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		b.Fatalf("scraping kos-apiserver: %v", err)
	}
	out := requestCounts{}
	for line := range strings.SplitSeq(string(data), "\n") {
		for suffix, unit := range map[string]string{"_sum{": "s", "_count{": "n"} {
			rest, ok := strings.CutPrefix(line, "apiserver_flowcontrol_request_wait_duration_seconds"+suffix)
			if !ok {
				continue
			}
			labels, value, _ := strings.Cut(rest, "} ")
			v, err := strconv.ParseFloat(value, 64)
			if err != nil {
				b.Fatalf("parsing %q: %v", line, err)
			}
			for pair := range strings.SplitSeq(labels, ",") {
				if level, ok := strings.CutPrefix(pair, "priority_level="); ok {
					out[strings.Trim(level, `"`)+" "+unit] += v
				}
			}
		}
	}
	return out
}
