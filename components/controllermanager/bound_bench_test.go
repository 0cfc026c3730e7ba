package controllermanager_test

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/controllermanager"
	"github.com/kos-sdn/kos/components/controllers/ipam"
	"github.com/kos-sdn/kos/components/generated/clientset/versioned"
	"github.com/kos-sdn/kos/tools/poll"
	"github.com/kos-sdn/kos/tools/spawner"
	"github.com/kos-sdn/kos/tools/testenv"
)

// boundClients is how many clients write at once in BenchmarkIPAMBound, as
// in the apiserver's BenchmarkAttachmentCreate.
const boundClients = 8

// boundRounds is how many times BenchmarkIPAMBound measures the raw rate
// and then the addressing rate, boundCount attachments each: alternating
// short phases share the machine's changing load more evenly than two long
// ones.
const (
	boundRounds = 3
	boundCount  = 1000
)

// BenchmarkIPAMBound measures how close the IPAM controller comes to what
// kos-apiserver and its etcd can write, as a ratio taken in one run, so that
// a busy machine slows both sides alike. Run it with -benchtime=1x.
//
// Each round first measures the raw rate, with no controller running:
// boundClients clients address attachments themselves, each creating an
// attachment, creating its IPLock and writing its address in the status,
// the very writes an addressed attachment costs (raw-addr/s; raw-writes/s
// counts the writes). Then one in-process manager with the product's client
// settings starts, and the same clients create attachments in a closed loop
// (createClosed): as fast as they go while fewer than 2×workers+16 wait for
// an address, so that creation runs at the rate the controller addresses.
// The addressing rate (addressed/s) is taken from the server's write times
// of the addresses, over their middle 80%. The manager stops before the
// next round. The ratio is the mean addressing rate over the mean raw rate;
// ratio-vs-writes/2 divides by the bound instead, half the raw
// write rate (two KOS writes per address, the attachment's creation not
// counted). Last, attachments are created paced at 0.5, 0.8 and 1 times the
// mean addressing rate and the p50 and p99 latency from creation to
// address, by server times, are reported, with a breakdown of where it went
// (see breakdown). Each phase logs the CPU time per address of every
// process.
func BenchmarkIPAMBound(b *testing.B) {
	for _, workers := range []int{2, 8, 16, 32} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			kos := startKOS(b)
			clients := boundWriters(b, kos, boundClients)
			vni := uint32(1900 + workers*10)
			var rawRate, rawWrites, rate float64
			var stop func()
			var m *controllermanager.Manager
			for round := range boundRounds {
				// The raw rate, no controller running: the subnet is
				// marked validated by hand.
				ns := newNamespace(b)
				subnet := createSubnet(b, clients[0], newSubnet(ns, "raw", "10.128.0.0/16", vni+uint32(round)))
				subnet.Status.Validated = true
				subnet, err := clients[0].NetworkV1alpha1().Subnets(ns).UpdateStatus(context.Background(), subnet, metav1.UpdateOptions{})
				if err != nil {
					b.Fatalf("validating subnet %s/%s: %v", ns, subnet.Name, err)
				}
				cpu := takeCPU(b)
				r, w := rawAddressing(b, clients, subnet, boundCount)
				b.Logf("round %d raw: %.0f addresses/s (%.0f writes/s); CPU ms per address: %s", round, r, w, cpu.since(b, boundCount))

				// The controller, with the product's client settings.
				// It finds the raw attachments addressed and leaves
				// them be.
				m, stop = startBoundManager(b, kos, workers)
				ns2 := newNamespace(b)
				s2 := createSubnet(b, clients[0], newSubnet(ns2, "bench", "10.129.0.0/16", vni+5+uint32(round)))
				waitValidated(b, clients[0], s2)
				cpu = takeCPU(b)
				began := time.Now()
				createClosed(b, clients, ns2, s2.Name, boundCount, 2*workers+16, controllermanager.AddressCounter(m))
				createRate := float64(boundCount) / time.Since(began).Seconds()
				addressed := waitAddressed(b, clients[0], ns2, boundCount)
				used := cpu.since(b, boundCount)
				if err := (&snapshot{attachments: addressed}).uniqueAddresses(); err != nil {
					b.Fatal(err)
				}
				a := steadyRate(addressed)
				lat := latencies(addressed)
				b.Logf("round %d controller: created %.0f/s, addressed %.0f/s (ratio %.2f); p50 %s, p99 %s with %d outstanding; CPU ms per address: %s",
					round, createRate, a, a/r, lat[len(lat)/2], lat[len(lat)*99/100], 2*workers+16, used)
				rawRate += r / boundRounds
				rawWrites += w / boundRounds
				rate += a / boundRounds
				if round < boundRounds-1 {
					stop()
				}
			}
			defer stop()

			b.Logf("mean raw %.0f addresses/s, mean addressed %.0f/s: ratio %.2f (%.2f of writes/2)",
				rawRate, rate, rate/rawRate, rate/(rawWrites/2))
			b.ReportMetric(rawRate, "raw-addr/s")
			b.ReportMetric(rawWrites, "raw-writes/s")
			b.ReportMetric(rate, "addressed/s")
			b.ReportMetric(rate/rawRate, "ratio")
			b.ReportMetric(rate/(rawWrites/2), "ratio-vs-writes/2")

			// Paced at fractions of the mean addressing rate.
			for i, f := range []float64{0.5, 0.8, 1} {
				ns3 := newNamespace(b)
				s3 := createSubnet(b, clients[0], newSubnet(ns3, "paced", fmt.Sprintf("10.%d.0.0/16", 130+i), vni+8+uint32(i)))
				waitValidated(b, clients[0], s3)
				offered := f * rate
				n := max(500, int(offered*5))
				before := takeQueue(m)
				start := time.Now()
				createPaced(b, clients[0], ns3, s3.Name, n, offered)
				pacedRate := float64(n) / time.Since(start).Seconds()
				atts := waitAddressed(b, clients[0], ns3, n)
				paced := latencies(atts)
				b.Logf("paced at %gx = %.0f/s (created %.0f/s): p50 %s, p99 %s; %s",
					f, offered, pacedRate, paced[len(paced)/2], paced[len(paced)*99/100], breakdown(b, clients[0], ns3, atts, before, takeQueue(m)))
				b.ReportMetric(float64(paced[len(paced)/2].Microseconds())/1000, fmt.Sprintf("%gx-p50-ms", f))
				b.ReportMetric(float64(paced[len(paced)*99/100].Microseconds())/1000, fmt.Sprintf("%gx-p99-ms", f))
			}
		})
	}
}

// boundWriters returns n clients of kos-apiserver, each with a connection of
// its own and no client-side rate limit, as in the apiserver's benchmarks.
func boundWriters(b *testing.B, kos *testenv.KOS, n int) []versioned.Interface {
	b.Helper()
	out := make([]versioned.Interface, n)
	for i := range out {
		cfg := rest.CopyConfig(kos.DirectConfig)
		cfg.QPS = -1
		// A dialer of its own keeps client-go from sharing one transport.
		dialer := &net.Dialer{Timeout: 30 * time.Second}
		cfg.Dial = dialer.DialContext
		c, err := versioned.NewForConfig(cfg)
		if err != nil {
			b.Fatalf("creating a KOS client: %v", err)
		}
		out[i] = c
	}
	return out
}

// rawAddressing addresses n attachments of subnet the way the controller
// does, by clients: create the attachment, lock an address, write it in the
// status. It returns the attachments so addressed per second and the writes
// per second.
func rawAddressing(b *testing.B, clients []versioned.Interface, subnet *v1alpha1.Subnet, n int) (float64, float64) {
	b.Helper()
	ns := subnet.Namespace
	first := netip.MustParsePrefix(subnet.Spec.IPv4).Addr().As4()
	base := uint32(first[0])<<24 | uint32(first[1])<<16 | uint32(first[2])<<8 | uint32(first[3])
	work := numbered(n)
	var failed atomic.Int64
	var wg sync.WaitGroup
	began := time.Now()
	for _, c := range clients {
		wg.Go(func() {
			ctx := context.Background()
			for i := range work {
				err := func() error {
					att, err := c.NetworkV1alpha1().NetworkAttachments(ns).Create(ctx, newAttachment(ns, fmt.Sprintf("raw-%d", i), subnet.Name), metav1.CreateOptions{})
					if err != nil {
						return err
					}
					n := base + 2 + uint32(i)
					addr := netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
					lock, err := c.NetworkV1alpha1().IPLocks(ns).Create(ctx, &v1alpha1.IPLock{
						ObjectMeta: metav1.ObjectMeta{
							Namespace: ns,
							Name:      ipam.LockName(subnet.Spec.VNI, addr),
							OwnerReferences: []metav1.OwnerReference{{
								APIVersion: v1alpha1.SchemeGroupVersion.String(),
								Kind:       "NetworkAttachment",
								Name:       att.Name,
								UID:        att.UID,
								Controller: new(true),
							}},
						},
						Spec: v1alpha1.IPLockSpec{SubnetName: subnet.Name},
					}, metav1.CreateOptions{})
					if err != nil {
						return err
					}
					att.Status.IPv4 = addr.String()
					att.Status.AddressVNI = subnet.Spec.VNI
					att.Status.LockUID = string(lock.UID)
					att.Status.SubnetCreationTime = &subnet.CreationTimestamp
					_, err = c.NetworkV1alpha1().NetworkAttachments(ns).UpdateStatus(ctx, att, metav1.UpdateOptions{})
					return err
				}()
				if err != nil && failed.Add(1) == 1 {
					b.Errorf("addressing attachment raw-%d by hand: %v", i, err)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(began).Seconds()
	if failed.Load() > 0 {
		b.FailNow()
	}
	return float64(n) / elapsed, float64(3*n) / elapsed
}

// numbered returns a closed channel holding 0 to n-1, the work that clients
// share out by receiving from it.
func numbered(n int) <-chan int {
	work := make(chan int, n)
	for i := range n {
		work <- i
	}
	close(work)
	return work
}

// startBoundManager runs an in-process controller manager with the client
// settings kos-controller-manager has by default, without leader election,
// and returns once its IPAM queue took a key for every attachment and is
// idle.
func startBoundManager(b *testing.B, kos *testenv.KOS, workers int) (_ *controllermanager.Manager, stop func()) {
	b.Helper()
	env := testenv.Shared(b)
	opts := controllermanager.NewOptions()
	kubeCfg := rest.CopyConfig(env.RESTConfig)
	kosCfg := rest.CopyConfig(kos.DirectConfig)
	kubeCfg.QPS, kubeCfg.Burst = opts.QPS, opts.Burst
	kosCfg.QPS, kosCfg.Burst = opts.KOSQPS, opts.KOSBurst
	m, err := controllermanager.Config{
		Kube:                   kubeCfg,
		KOS:                    kosCfg,
		SubnetValidatorWorkers: 2,
		IPAMWorkers:            workers,
	}.Complete().New()
	if err != nil {
		b.Fatalf("creating the manager: %v", err)
	}
	// The queue metrics outlive a manager: count from here.
	before := max(0, queueMetric(scrape(m), "workqueue_adds_total"))
	list, err := versioned.NewForConfigOrDie(kos.DirectConfig).NetworkV1alpha1().NetworkAttachments("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		b.Fatalf("counting the attachments: %v", err)
	}
	existing := float64(len(list.Items))
	ctx, cancel := context.WithCancel(context.Background())
	ctx = klog.NewContext(ctx, klog.Background().WithName("bound"))
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				b.Errorf("manager: %v", err)
			}
		})
	}
	b.Cleanup(stop)
	poll.Until(b, time.Minute, "the manager ready and idle", func(context.Context) error {
		rec := httptest.NewRecorder()
		m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		if rec.Code != http.StatusOK {
			return fmt.Errorf("/readyz: %d %s", rec.Code, rec.Body)
		}
		metrics := scrape(m)
		depth := queueMetric(metrics, "workqueue_depth")
		adds := queueMetric(metrics, "workqueue_adds_total") - before
		busy := queueMetric(metrics, "workqueue_longest_running_processor_seconds")
		if depth != 0 || busy != 0 || adds < existing {
			return fmt.Errorf("IPAM queue: depth %v, %v keys added of %v, busy for %vs", depth, adds, existing, busy)
		}
		return nil
	})
	return m, stop
}

// cpuSample is the CPU time, user and system, that the environment's
// processes and this one (the clients and the controller) had used.
type cpuSample map[string]time.Duration

func takeCPU(b *testing.B) cpuSample {
	b.Helper()
	out := cpuSample{"benchmark+controller": processCPU(b, "self")}
	for _, p := range testenv.Shared(b).Processes() {
		if p.Running {
			out[p.Name] = processCPU(b, strconv.Itoa(p.PID))
		}
	}
	return out
}

// since returns the CPU milliseconds per address each process used since
// the sample, the busiest first.
func (s cpuSample) since(b *testing.B, addresses int) string {
	b.Helper()
	now := takeCPU(b)
	type use struct {
		name string
		ms   float64
	}
	var uses []use
	total := 0.0
	for name, t := range now {
		ms := float64(t-s[name]) / float64(time.Millisecond) / float64(addresses)
		total += ms
		uses = append(uses, use{name, ms})
	}
	slices.SortFunc(uses, func(a, b use) int { return cmp.Compare(b.ms, a.ms) })
	parts := []string{fmt.Sprintf("total %.2f", total)}
	for _, u := range uses {
		if u.ms >= 0.01 {
			parts = append(parts, fmt.Sprintf("%s %.2f", u.name, u.ms))
		}
	}
	return strings.Join(parts, ", ")
}

// processCPU returns the user and system time of process pid ("self" for
// this one).
func processCPU(b *testing.B, pid string) time.Duration {
	b.Helper()
	d, err := spawner.CPUTime(pid)
	if err != nil {
		b.Fatal(err)
	}
	return d
}

// scrape returns the manager's metrics in Prometheus' text format.
func scrape(m *controllermanager.Manager) string {
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	return rec.Body.String()
}

// queueMetric returns the value of the IPAM queue's sample of a metric in
// Prometheus' text format, or -1.
func queueMetric(text, name string) float64 {
	prefix := name + `{name="` + ipam.QueueName + `"} `
	for line := range strings.SplitSeq(text, "\n") {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

// createClosed creates n attachments of subnet, spread over the clients, as
// fast as they go while fewer than window of them wait for an address
// (addressed counts the addresses written): a closed loop, in which
// attachments are created at the very rate the controller addresses them
// once the window is full, so that the rate measured is what the controller
// sustains while creation runs at that rate. (Created as fast as the clients
// go, creation takes the server's CPU from the controller until it ends, and
// the controller then addresses the backlog alone, faster: neither is the
// steady state.) The window is enough to keep every worker busy.
func createClosed(b *testing.B, clients []versioned.Interface, ns, subnet string, n, window int, addressed func() uint64) {
	b.Helper()
	// A token per attachment that may be created; one poller hands out a
	// token for every address written, so the clients do not poll.
	tokens := make(chan struct{}, n)
	for range min(window, n) {
		tokens <- struct{}{}
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		base, given := addressed(), min(window, n)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for given < n {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			for got := int(addressed() - base); given < n && given < got+window; given++ {
				tokens <- struct{}{}
			}
		}
	}()
	work := numbered(n)
	var failed atomic.Int64
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Go(func() {
			for i := range work {
				<-tokens
				_, err := c.NetworkV1alpha1().NetworkAttachments(ns).Create(context.Background(), newAttachment(ns, fmt.Sprintf("att-%d", i), subnet), metav1.CreateOptions{})
				if err != nil {
					// Nothing to address: the token goes back.
					tokens <- struct{}{}
					if failed.Add(1) == 1 {
						b.Errorf("creating attachment att-%d: %v", i, err)
					}
				}
			}
		})
	}
	wg.Wait()
	if failed.Load() > 0 {
		b.FailNow()
	}
}

// queueSample is what the IPAM queue's metrics and this process's garbage
// collector had counted at one time.
type queueSample struct {
	adds, retries      float64
	waitSum, waitCount float64
	workSum, workCount float64
	gcs                uint32
	gcPause            time.Duration
}

func takeQueue(m *controllermanager.Manager) queueSample {
	text := scrape(m)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return queueSample{
		adds:      queueMetric(text, "workqueue_adds_total"),
		retries:   queueMetric(text, "workqueue_retries_total"),
		waitSum:   queueMetric(text, "workqueue_queue_duration_seconds_sum"),
		waitCount: queueMetric(text, "workqueue_queue_duration_seconds_count"),
		workSum:   queueMetric(text, "workqueue_work_duration_seconds_sum"),
		workCount: queueMetric(text, "workqueue_work_duration_seconds_count"),
		gcs:       ms.NumGC,
		gcPause:   time.Duration(ms.PauseTotalNs),
	}
}

// breakdown says where the create-to-address latency of atts went: from
// the attachment's creation to the creation of its IP lock (the watch
// delivering the attachment to the controller, the wait in its queue, the
// lock's request) and from the lock to the address (the status write), by
// the server's write times; how the latency changed from the first tenth
// of the attachments created to the last (growth means a queue that grows);
// and, from the IPAM queue's metrics between before and after, the keys
// queued and retried per attachment, the mean wait in the queue and the
// mean processing time of a key; and this process's garbage collections.
func breakdown(b *testing.B, c versioned.Interface, ns string, atts []v1alpha1.NetworkAttachment, before, after queueSample) string {
	b.Helper()
	locks, err := c.NetworkV1alpha1().IPLocks(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		b.Fatalf("listing the IP locks of %s: %v", ns, err)
	}
	locked := map[string]time.Time{}
	for _, l := range locks.Items {
		if t, ok := l.ExtendedMetadata.Writes.Time(v1alpha1.SectionSpec); ok && len(l.OwnerReferences) > 0 {
			locked[l.OwnerReferences[0].Name] = t.Time
		}
	}
	type item struct {
		created             time.Time
		toLock, toAddr, all time.Duration
	}
	var items []item
	for _, a := range atts {
		created, ok1 := a.ExtendedMetadata.Writes.Time(v1alpha1.SectionSpec)
		addressed, ok2 := a.ExtendedMetadata.Writes.Time(v1alpha1.SectionAddress)
		lock, ok3 := locked[a.Name]
		if ok1 && ok2 && ok3 {
			items = append(items, item{created.Time, lock.Sub(created.Time), addressed.Sub(lock), addressed.Sub(created.Time)})
		}
	}
	if len(items) < 10 {
		return "no breakdown"
	}
	slices.SortFunc(items, func(a, b item) int { return a.created.Compare(b.created) })
	pct := func(of func(item) time.Duration, from, to int) (time.Duration, time.Duration) {
		var d []time.Duration
		for _, it := range items[from:to] {
			d = append(d, of(it))
		}
		slices.Sort(d)
		return d[len(d)/2], d[len(d)*99/100]
	}
	n := len(items)
	l50, l99 := pct(func(it item) time.Duration { return it.toLock }, 0, n)
	a50, a99 := pct(func(it item) time.Duration { return it.toAddr }, 0, n)
	first, _ := pct(func(it item) time.Duration { return it.all }, 0, n/10)
	last, _ := pct(func(it item) time.Duration { return it.all }, n-n/10, n)
	per := float64(len(atts))
	mean := func(sum, count float64) time.Duration {
		if count <= 0 {
			return 0
		}
		return time.Duration(sum / count * float64(time.Second)).Round(10 * time.Microsecond)
	}
	return fmt.Sprintf("create->lock p50 %s p99 %s, lock->address p50 %s p99 %s; p50 of the first tenth created %s, of the last %s; "+
		"per attachment %.2f keys queued, %.3f retried; mean queue wait %s, mean processing %s; %d GCs, %s paused",
		l50, l99, a50, a99, first, last,
		(after.adds-before.adds)/per, (after.retries-before.retries)/per,
		mean(after.waitSum-before.waitSum, after.waitCount-before.waitCount),
		mean(after.workSum-before.workSum, after.workCount-before.workCount),
		after.gcs-before.gcs, after.gcPause-before.gcPause)
}
