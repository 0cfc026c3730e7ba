package controllermanager_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/generated/clientset/versioned"
	"github.com/kos-sdn/kos/tools/poll"
)

// BenchmarkIPAM measures the IPAM controller of one in-process manager,
// with kos-controller-manager's default client limits, against a real
// kos-apiserver, with 2 and with 8 workers. First it finds
// the steady-state rate: attachments created as fast as 16 clients can,
// and the rate at which their addresses were written over the middle 80%
// (addressed/s). Then it offers 1x, 2x and 4x that rate, paced, and reports
// the p50 and p99 latency from each attachment's creation to the write of
// its address, both by the server's write times. Each experiment is fixed
// in size: run it with -benchtime=1x.
func BenchmarkIPAM(b *testing.B) {
	for _, workers := range []int{2, 8} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			c := kosClient(b)
			_, stop := startBoundManager(b, startKOS(b), workers)
			defer stop()

			var rate float64
			b.Run("steady", func(b *testing.B) {
				ns, subnet := benchSubnet(b, c, uint32(170+workers), 0)
				start := time.Now()
				atts := createPaced(b, c, ns, subnet, 600, 0)
				addressed := waitAddressed(b, c, ns, len(atts))
				rate = steadyRate(addressed)
				b.Logf("saturation: %d attachments addressed in %s; steady %.1f/s", len(addressed), time.Since(start).Round(time.Millisecond), rate)
				b.ReportMetric(rate, "addressed/s")
			})
			if rate == 0 {
				b.Fatal("no steady rate measured")
			}

			for i, mult := range []int{1, 2, 4} {
				b.Run(fmt.Sprintf("rate=%dx", mult), func(b *testing.B) {
					offered := rate * float64(mult)
					n := max(200, int(offered*5))
					ns, subnet := benchSubnet(b, c, uint32(170+workers), i+1)
					began := time.Now()
					created := createPaced(b, c, ns, subnet, n, offered)
					createdIn := time.Since(began)
					addressed := waitAddressed(b, c, ns, len(created))
					lat := latencies(addressed)
					b.Logf("offered %.1f/s, created %d in %s (%.1f/s); p50 %s, p99 %s", offered, n, createdIn.Round(time.Millisecond),
						float64(n)/createdIn.Seconds(), lat[len(lat)/2], lat[len(lat)*99/100])
					b.ReportMetric(offered, "offered/s")
					b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
					b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
				})
			}
		})
	}
}

// benchSubnet creates a namespace with a /16 subnet, validated.
func benchSubnet(b *testing.B, c versioned.Interface, vni uint32, i int) (string, string) {
	ns := newNamespace(b)
	s := createSubnet(b, c, newSubnet(ns, "bench", fmt.Sprintf("10.%d.0.0/16", 200+i*10+int(vni%10)), vni*10+uint32(i)))
	waitValidated(b, c, s)
	return ns, s.Name
}

// createPaced creates n attachments on subnet, starting one every 1/rate
// seconds (at once when rate is 0) with at most 64 creates in flight, and
// returns their names.
func createPaced(b *testing.B, c versioned.Interface, ns, subnet string, n int, rate float64) []string {
	b.Helper()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	if rate == 0 {
		sem = make(chan struct{}, 16)
	}
	errs := make(chan error, n)
	names := make([]string, n)
	began := time.Now()
	for i := range n {
		if rate > 0 {
			if d := time.Until(began.Add(time.Duration(float64(i) / rate * float64(time.Second)))); d > 0 {
				time.Sleep(d)
			}
		}
		names[i] = fmt.Sprintf("att-%d", i)
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			_, err := c.NetworkV1alpha1().NetworkAttachments(ns).Create(context.Background(), newAttachment(ns, names[i], subnet), metav1.CreateOptions{})
			if err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatalf("creating attachments: %v", err)
	}
	return names
}

// waitAddressed waits until n attachments of ns have addresses and returns
// them.
func waitAddressed(b *testing.B, c versioned.Interface, ns string, n int) []v1alpha1.NetworkAttachment {
	b.Helper()
	var atts []v1alpha1.NetworkAttachment
	poll.Until(b, 5*time.Minute, fmt.Sprintf("%d attachments addressed", n), func(ctx context.Context) error {
		list, err := c.NetworkV1alpha1().NetworkAttachments(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		done := 0
		for _, a := range list.Items {
			if a.Status.IPv4 != "" {
				done++
			}
		}
		if done < n {
			return fmt.Errorf("%d of %d addressed", done, n)
		}
		atts = list.Items
		return nil
	})
	return atts
}

// steadyRate is the rate of address writes, by server time, between the
// 10th and the 90th percentile of them.
func steadyRate(atts []v1alpha1.NetworkAttachment) float64 {
	var times []time.Time
	for _, a := range atts {
		if t, ok := a.ExtendedMetadata.Writes.Time(v1alpha1.SectionAddress); ok {
			times = append(times, t.Time)
		}
	}
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	lo, hi := len(times)/10, len(times)*9/10
	if hi <= lo || !times[hi].After(times[lo]) {
		return 0
	}
	return float64(hi-lo) / times[hi].Sub(times[lo]).Seconds()
}

// latencies returns the sorted create-to-address latencies, by server time.
func latencies(atts []v1alpha1.NetworkAttachment) []time.Duration {
	var out []time.Duration
	for _, a := range atts {
		created, ok1 := a.ExtendedMetadata.Writes.Time(v1alpha1.SectionSpec)
		addressed, ok2 := a.ExtendedMetadata.Writes.Time(v1alpha1.SectionAddress)
		if ok1 && ok2 {
			out = append(out, addressed.Sub(created.Time))
		}
	}
	slices.Sort(out)
	return out
}
