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

// boundClients is how many clients write at once in the raw phase of
// BenchmarkIPAMBound: twice the most workers it measures, so that the raw
// rate is what kos-apiserver and its etcd take at saturation, a ceiling for
// every worker count. The first boundCreators of them create the
// attachments beforehand.
const (
	boundClients  = 32
	boundCreators = 8
)

// boundRounds is how many times BenchmarkIPAMBound measures the raw rate
// and then the addressing rate, boundCount addresses each: alternating
// short phases share the machine's changing load more evenly than two long
// ones.
const (
	boundRounds = 5
	boundCount  = 1000
)

var (
	boundOnce sync.Once
	boundKOS  *testenv.KOS
	boundErr  error
)

// startBoundKOS returns the kos-apiserver of BenchmarkIPAMBound, starting
// it on first use: one of its own, reached directly, whose etcd syncs its
// writes to disk as a released kos-etcd does (test etcds run without
// fsync, which would flatter the storage's write rate).
func startBoundKOS(b *testing.B) *testenv.KOS {
	b.Helper()
	boundOnce.Do(func() {
		boundKOS, boundErr = testenv.Shared(b).StartKOS(context.Background(), testenv.KOSOptions{Name: "bound", DirectOnly: true, EtcdFsync: true})
	})
	if boundErr != nil {
		b.Fatalf("starting kos-apiserver with fsync: %v", boundErr)
	}
	return boundKOS
}

// BenchmarkIPAMBound measures how close the IPAM controller comes to the
// bound that kos-apiserver and its etcd set: each address costs two writes
// (its IPLock's creation and the attachment's status), so addressing can go
// no faster than half the writes per second the storage takes. Both sides
// are measured in one run, on one kos-apiserver whose etcd syncs to disk as
// shipped, in alternating rounds so that a busy machine slows them alike,
// and both the same way: boundCount attachments are created first (not
// timed), then addressed, and the rate is the address writes per second
// between the 10th and the 90th percentile of their server write times.
//
// The raw side, with no controller running: boundClients clients write
// the two writes of each address themselves, as fast as the server
// answers (raw-writes/s; bound-addr/s is half of it). The controller side:
// an in-process manager with the product's client settings and the
// given IPAM workers starts on the backlog and addresses it (addressed/s).
// ratio-to-bound is the mean addressing rate over the mean bound, and
// ratio-min, -median and -max are the rounds' own ratios: on a shared
// machine single rounds swing by more than the differences between worker
// counts. cpu-ratio is the CPU time of every process per address on the
// raw side over the controller side's (its start included): the ratio the
// rates would have where CPU bounds both, as it does on two cores. Last,
// with the last round's manager, attachments are created paced at 0.5, 0.8
// and 1 times the addressing rate and the p50 and p99 latency from
// creation to address, by server times, are reported, with a breakdown of
// where it went (see breakdown). Each phase logs the CPU time per address
// of every process.
//
// It fails when two attachments of a VNI hold one address or an attachment
// is not addressed, never on a time. Run it with -benchtime=1x.
func BenchmarkIPAMBound(b *testing.B) {
	kos := startBoundKOS(b)
	clients := boundWriters(b, kos, boundClients)
	for _, workers := range []int{2, 8, 16} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			// Each worker count takes VNIs vni to vni+2*boundRounds+2.
			vni := uint32(1900 + workers*20)
			var bound, rate, rawCPU, cpu float64
			ratios := make([]float64, 0, boundRounds)
			var stop func()
			var m *controllermanager.Manager
			// toClear are the namespaces to clear once the manager
			// stopped.
			var toClear []string
			for round := range boundRounds {
				// The raw rate, no controller running: the subnet is
				// marked validated by hand.
				subnet := validatedSubnet(b, clients[0], "raw", "10.128.0.0/16", vni+uint32(round))
				atts := createBacklog(b, clients[:boundCreators], subnet, boundCount)
				sample := takeCPU(b)
				rawAddressing(b, clients, subnet, atts)
				rc, used := sample.since(b, boundCount)
				raw := addressedOnce(b, clients[0], subnet.Namespace, boundCount)
				r := steadyRate(raw)
				figure(b, "round %d raw: %.0f addresses/s (%.0f writes/s); CPU ms per address: %s", round, r, 2*r, used)

				// The controller, with the product's client settings,
				// on a backlog of the same size. It finds the raw
				// attachments addressed and leaves them be.
				s2 := validatedSubnet(b, clients[0], "bench", "10.129.0.0/16", vni+boundRounds+uint32(round))
				createBacklog(b, clients[:boundCreators], s2, boundCount)
				sample = takeCPU(b)
				m, stop = startBoundManager(b, kos, workers)
				c, used := sample.since(b, boundCount)
				addressed := addressedOnce(b, clients[0], s2.Namespace, boundCount)
				a := steadyRate(addressed)
				figure(b, "round %d controller: %.0f addresses/s (%.2f of the bound); CPU ms per address, the manager's start included: %s",
					round, a, a/r, used)
				bound += r / boundRounds
				rate += a / boundRounds
				ratios = append(ratios, a/r)
				rawCPU += rc / boundRounds
				cpu += c / boundRounds
				toClear = append(toClear, subnet.Namespace, s2.Namespace)
				if round < boundRounds-1 {
					stop()
					// The next manager lists only what this round
					// left.
					clearNamespaces(b, clients[0], toClear)
					toClear = nil
				}
			}
			defer func() {
				stop()
				clearNamespaces(b, clients[0], toClear)
			}()

			slices.Sort(ratios)
			figure(b, "mean bound %.0f addresses/s (%.0f raw writes/s), mean addressed %.0f/s: %.2f of the bound (rounds, sorted: %.2f); CPU ms per address %.2f raw, %.2f addressed",
				bound, 2*bound, rate, rate/bound, ratios, rawCPU, cpu)
			b.ReportMetric(2*bound, "raw-writes/s")
			b.ReportMetric(bound, "bound-addr/s")
			b.ReportMetric(rate, "addressed/s")
			b.ReportMetric(rate/bound, "ratio-to-bound")
			b.ReportMetric(ratios[0], "ratio-min")
			b.ReportMetric(ratios[len(ratios)/2], "ratio-median")
			b.ReportMetric(ratios[len(ratios)-1], "ratio-max")
			// What the ratio would be where CPU, shared alike, bounds
			// both sides: the raw writes' CPU per address over the
			// controller's (all processes, its start included).
			b.ReportMetric(rawCPU, "raw-cpu-ms/addr")
			b.ReportMetric(cpu, "cpu-ms/addr")
			b.ReportMetric(rawCPU/cpu, "cpu-ratio")

			// Paced at fractions of the mean addressing rate.
			for i, f := range []float64{0.5, 0.8, 1} {
				// The manager's subnet validator validates it.
				ns3 := newNamespace(b)
				toClear = append(toClear, ns3)
				s3 := createSubnet(b, clients[0], newSubnet(ns3, "paced", fmt.Sprintf("10.%d.0.0/16", 130+i), vni+2*boundRounds+uint32(i)))
				waitValidated(b, clients[0], s3)
				offered := f * rate
				n := max(500, int(offered*5))
				before := takeQueue(m)
				start := time.Now()
				createPaced(b, clients[0], ns3, s3.Name, n, offered)
				pacedRate := float64(n) / time.Since(start).Seconds()
				atts := waitAddressed(b, clients[0], ns3, n)
				if err := (&snapshot{attachments: atts}).uniqueAddresses(); err != nil {
					b.Fatal(err)
				}
				paced := latencies(atts)
				figure(b, "paced at %gx = %.0f/s (created %.0f/s): p50 %s, p99 %s; %s",
					f, offered, pacedRate, paced[len(paced)/2], paced[len(paced)*99/100], breakdown(b, clients[0], ns3, atts, before, takeQueue(m)))
				b.ReportMetric(float64(paced[len(paced)/2].Microseconds())/1000, fmt.Sprintf("%gx-p50-ms", f))
				b.ReportMetric(float64(paced[len(paced)*99/100].Microseconds())/1000, fmt.Sprintf("%gx-p99-ms", f))
			}
		})
	}
}

// clearNamespaces deletes the attachments and the IP locks of the
// namespaces: no garbage collector runs here to delete the locks of
// deleted attachments.
func clearNamespaces(b *testing.B, c versioned.Interface, namespaces []string) {
	b.Helper()
	ctx := context.Background()
	for _, ns := range namespaces {
		if err := c.NetworkV1alpha1().NetworkAttachments(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			b.Fatalf("deleting the attachments of %s: %v", ns, err)
		}
		if err := c.NetworkV1alpha1().IPLocks(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			b.Fatalf("deleting the IP locks of %s: %v", ns, err)
		}
	}
}

// figure prints a line of a benchmark's findings on the standard output,
// prefixed with the benchmark's name: go test keeps only the first ten
// lines of a benchmark's log.
func figure(b *testing.B, format string, args ...any) {
	fmt.Printf("%s: %s\n", b.Name(), fmt.Sprintf(format, args...))
}

// validatedSubnet creates a subnet in a new namespace and marks it
// validated by hand, as no subnet validator may run yet.
func validatedSubnet(b *testing.B, c versioned.Interface, name, cidr string, vni uint32) *v1alpha1.Subnet {
	b.Helper()
	subnet := createSubnet(b, c, newSubnet(newNamespace(b), name, cidr, vni))
	subnet.Status.Validated = true
	subnet, err := c.NetworkV1alpha1().Subnets(subnet.Namespace).UpdateStatus(context.Background(), subnet, metav1.UpdateOptions{})
	if err != nil {
		b.Fatalf("validating subnet %s/%s: %v", subnet.Namespace, name, err)
	}
	return subnet
}

// createBacklog creates n attachments of subnet, spread over the clients,
// and returns them.
func createBacklog(b *testing.B, clients []versioned.Interface, subnet *v1alpha1.Subnet, n int) []*v1alpha1.NetworkAttachment {
	b.Helper()
	out := make([]*v1alpha1.NetworkAttachment, n)
	work := numbered(n)
	var failed atomic.Int64
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Go(func() {
			for i := range work {
				att, err := c.NetworkV1alpha1().NetworkAttachments(subnet.Namespace).Create(context.Background(),
					newAttachment(subnet.Namespace, fmt.Sprintf("att-%d", i), subnet.Name), metav1.CreateOptions{})
				if err != nil && failed.Add(1) == 1 {
					b.Errorf("creating attachment att-%d: %v", i, err)
				}
				out[i] = att
			}
		})
	}
	wg.Wait()
	if failed.Load() > 0 {
		b.FailNow()
	}
	return out
}

// addressedOnce waits until n attachments of ns are addressed, and fails
// when two of a VNI hold one address or there are more than n.
func addressedOnce(b *testing.B, c versioned.Interface, ns string, n int) []v1alpha1.NetworkAttachment {
	b.Helper()
	atts := waitAddressed(b, c, ns, n)
	if len(atts) != n {
		b.Fatalf("namespace %s holds %d attachments, want %d", ns, len(atts), n)
	}
	if err := (&snapshot{attachments: atts}).uniqueAddresses(); err != nil {
		b.Fatal(err)
	}
	return atts
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

// rawAddressing addresses the attachments atts of subnet the way the
// controller does, by clients, as fast as the server answers: lock an
// address (the IPLock's creation), write it in the status.
func rawAddressing(b *testing.B, clients []versioned.Interface, subnet *v1alpha1.Subnet, atts []*v1alpha1.NetworkAttachment) {
	b.Helper()
	ns := subnet.Namespace
	first := netip.MustParsePrefix(subnet.Spec.IPv4).Addr().As4()
	base := uint32(first[0])<<24 | uint32(first[1])<<16 | uint32(first[2])<<8 | uint32(first[3])
	work := numbered(len(atts))
	var failed atomic.Int64
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Go(func() {
			ctx := context.Background()
			for i := range work {
				att := atts[i].DeepCopy()
				err := func() error {
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
					b.Errorf("addressing attachment %s by hand: %v", att.Name, err)
				}
			}
		})
	}
	wg.Wait()
	if failed.Load() > 0 {
		b.FailNow()
	}
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
	poll.Until(b, 10*time.Minute, "the manager ready and idle", func(context.Context) error {
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

// since returns the CPU milliseconds per address all processes used since
// the sample, and a line with each process's, the busiest first.
func (s cpuSample) since(b *testing.B, addresses int) (float64, string) {
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
	return total, strings.Join(parts, ", ")
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
