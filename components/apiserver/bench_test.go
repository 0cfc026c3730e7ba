package apiserver_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	kosclient "github.com/kos-sdn/kos/components/generated/clientset/versioned"
	"github.com/kos-sdn/kos/tools/testenv"
)

// benchClients is how many clients create at once, as the issue asks.
const benchClients = 8

// The benchmarks run against a real kos-apiserver with its own etcd, through
// the direct endpoint the controllers and agents use. Run them as
//
//	go test ./components/apiserver/ -run '^$' -bench . -benchtime 2000x
//
// so that BenchmarkAttachmentCreate creates 2,000 attachments.

// BenchmarkAttachmentCreate creates b.N attachments with benchClients
// parallel clients, each with a connection of its own, and reports creates
// per second, the p50 and p99 latency of one create and the server's resident
// memory afterwards.
func BenchmarkAttachmentCreate(b *testing.B) {
	f := newBenchFixture(b)
	var seq atomic.Int64
	b.Run(fmt.Sprintf("clients=%d", benchClients), func(b *testing.B) {
		clients := f.clients(b, benchClients)
		work := make(chan int, b.N)
		for i := range b.N {
			work <- i
		}
		close(work)
		latencies := make([][]time.Duration, len(clients))
		var failed atomic.Int64
		var wg sync.WaitGroup
		b.ResetTimer()
		began := time.Now()
		for w, c := range clients {
			wg.Go(func() {
				for range work {
					n := seq.Add(1)
					a := newAttachment(f.ns, "a"+strconv.FormatInt(n, 10), fmt.Sprintf("node-%d", n%100), "s1")
					start := time.Now()
					if _, err := c.NetworkV1alpha1().NetworkAttachments(f.ns).Create(context.Background(), a, metav1.CreateOptions{}); err != nil {
						if failed.Add(1) == 1 {
							b.Errorf("creating %s: %v", a.Name, err)
						}
						continue
					}
					latencies[w] = append(latencies[w], time.Since(start))
				}
			})
		}
		wg.Wait()
		elapsed := time.Since(began)
		b.StopTimer()
		all := slices.Concat(latencies...)
		slices.Sort(all)
		b.ReportMetric(float64(len(all))/elapsed.Seconds(), "creates/s")
		b.ReportMetric(msec(percentile(all, 0.50)), "p50-ms")
		b.ReportMetric(msec(percentile(all, 0.99)), "p99-ms")
		b.ReportMetric(f.rssMiB(b), "server-rss-MiB")
	})
}

// BenchmarkAttachmentList lists attachments with the selectors the node
// agents use, spec.node and status.addressVNI, as the number of attachments
// grows. The attachments are spread over 100 nodes and 20 VNIs, so one list
// returns 1% or 5% of them; items/op says how many.
func BenchmarkAttachmentList(b *testing.B) {
	f := newBenchFixture(b)
	const nodes, vnis = 100, 20
	for _, size := range []int{1000, 2000, 4000} {
		f.grow(b, size, nodes, vnis)
		rss := f.rssMiB(b)
		for _, selector := range []string{"spec.node=node-7", "status.addressVNI=7"} {
			b.Run(fmt.Sprintf("objects=%d/%s", size, strings.SplitN(selector, "=", 2)[0]), func(b *testing.B) {
				c := f.clients(b, 1)[0]
				var items int
				b.ResetTimer()
				for range b.N {
					list, err := c.NetworkV1alpha1().NetworkAttachments(f.ns).List(context.Background(), metav1.ListOptions{FieldSelector: selector})
					if err != nil {
						b.Fatalf("listing with %s: %v", selector, err)
					}
					items = len(list.Items)
				}
				b.StopTimer()
				if want := size / nodes; strings.HasPrefix(selector, "spec.node") && items != want {
					b.Errorf("listing with %s returned %d attachments, want %d", selector, items, want)
				}
				if want := size / vnis; strings.HasPrefix(selector, "status.addressVNI") && items != want {
					b.Errorf("listing with %s returned %d attachments, want %d", selector, items, want)
				}
				b.ReportMetric(float64(items), "items/op")
				b.ReportMetric(rss, "server-rss-MiB")
			})
		}
	}
}

// benchFixture is a kos-apiserver with its own etcd and a namespace to fill.
type benchFixture struct {
	kos *testenv.KOS
	ns  string
	// count is how many attachments grow made so far.
	count int
}

func newBenchFixture(b *testing.B) *benchFixture {
	b.Helper()
	kos := startKOS(b, testenv.KOSOptions{Name: "bench", DirectOnly: true, ExtraArgs: []string{"--v=0"}})
	ns := newNamespace(b)
	f := &benchFixture{kos: kos, ns: ns}
	mustCreateSubnet(b, f.clients(b, 1)[0], newSubnet(ns, "s1", "10.0.0.0/8", 1))
	return f
}

// clients returns n clients of the direct endpoint, each with a connection
// of its own and no client-side rate limit.
func (f *benchFixture) clients(b *testing.B, n int) []*kosclient.Clientset {
	b.Helper()
	out := make([]*kosclient.Clientset, n)
	for i := range out {
		cfg := rest.CopyConfig(f.kos.DirectConfig)
		cfg.QPS = -1
		// A custom dialer keeps client-go from sharing one transport.
		dialer := &net.Dialer{Timeout: 30 * time.Second}
		cfg.Dial = dialer.DialContext
		out[i] = kosClient(b, cfg)
	}
	return out
}

// grow creates attachments until there are size, each on node-<i%nodes> with
// an address on VNI i%vnis, benchClients at a time.
func (f *benchFixture) grow(b *testing.B, size, nodes, vnis int) {
	b.Helper()
	work := make(chan int, size)
	for i := f.count; i < size; i++ {
		work <- i
	}
	close(work)
	f.count = size
	var wg sync.WaitGroup
	var failed atomic.Int64
	for _, c := range f.clients(b, benchClients) {
		wg.Go(func() {
			ctx := context.Background()
			atts := c.NetworkV1alpha1().NetworkAttachments(f.ns)
			for i := range work {
				a, err := atts.Create(ctx, newAttachment(f.ns, fmt.Sprintf("g%d", i), fmt.Sprintf("node-%d", i%nodes), "s1"), metav1.CreateOptions{})
				if err == nil {
					a.Status.IPv4 = fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
					a.Status.AddressVNI = uint32(i % vnis)
					_, err = atts.UpdateStatus(ctx, a, metav1.UpdateOptions{})
				}
				if err != nil && failed.Add(1) == 1 {
					b.Errorf("growing to %d attachments: %v", size, err)
				}
			}
		})
	}
	wg.Wait()
	if failed.Load() > 0 {
		b.FailNow()
	}
}

// rssMiB returns the resident memory of the kos-apiserver process.
func (f *benchFixture) rssMiB(b *testing.B) float64 {
	b.Helper()
	env := testenv.Shared(b)
	pid := 0
	for _, p := range env.Processes() {
		if p.Name == "kos-apiserver-"+f.kos.Name && p.Running {
			pid = p.PID
		}
	}
	if pid == 0 {
		b.Fatalf("kos-apiserver %s does not run", f.kos.Name)
	}
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		b.Fatalf("reading the server's memory: %v", err)
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			if err != nil {
				b.Fatalf("parsing %q: %v", line, err)
			}
			return kb / 1024
		}
	}
	b.Fatal("no VmRSS in the server's /proc status")
	return 0
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(float64(len(sorted))*p))]
}

func msec(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
