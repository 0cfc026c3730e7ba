package agent_test

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
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
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/fabric"
	"github.com/kos-sdn/kos/components/fabric/logging"
	kosclient "github.com/kos-sdn/kos/components/generated/clientset/versioned"
	kosinformers "github.com/kos-sdn/kos/components/generated/informers/externalversions/network/v1alpha1"
	"github.com/kos-sdn/kos/tools/poll"
	"github.com/kos-sdn/kos/tools/spawner"
	"github.com/kos-sdn/kos/tools/testenv"
)

// benchSpread is how many consecutive nodes each network of BenchmarkAgents
// spans; network j starts at node 2j, so that each node is in a few
// networks only (benchSpread/2 on average).
const benchSpread = 5

var (
	benchRate     = flag.Float64("agent.rate", 20, "attachments BenchmarkAgents creates per second")
	benchAgents   = flag.Int("agent.agents", 50, "agents (nodes) BenchmarkAgents runs; it makes half as many networks")
	benchShared   = flag.Bool("agent.shared-connection", false, "BenchmarkAgents: all agents share one HTTP/2 connection to kos-apiserver (client-go's default within one process) instead of one each, as separate processes have")
	benchRelevant = flag.Int("agent.relevant", 1000, "remote attachments relevant to the one kos-agent process of BenchmarkAgentMemory")
	benchProfile  = flag.String("agent.server-cpuprofile", "", "BenchmarkAgents: write a CPU profile of kos-apiserver, taken while the attachments are created, to this file")
)

// BenchmarkAgents runs -agent.agents agents with logging fabrics as
// goroutines against one KOS control plane (kos-apiserver, its etcd and the
// real controllers), creates b.N attachments at a steady rate
// (-agent.rate), and reports:
//
//   - the rate offered (atts/s) and the rate reached: attachments per
//     second from the first create until every one is ready (ready-atts/s);
//   - from the server's write times, the p50 and p99 latency from an
//     attachment's creation to its readiness (the agent's status write),
//     and the p99 from its creation to its address (IPAM's status write);
//   - the p50 and p99 dissemination latency, from the server's write of an
//     attachment's address to its remote flows being in the switch of each
//     other node of its network (timed by a wrapper of each agent's
//     fabric), for the attachments addressed after that node's first
//     attachment in the network was ready (the node watched the network);
//   - per agent, the notifications received and the attachments relevant to
//     it (this run's attachments in the networks it has attachments in),
//     and their ratio; all-notifications is what one watch on every
//     attachment received meanwhile, what each agent would get without the
//     1+R informers;
//   - the CPU time of kos-apiserver and of its etcd per attachment, and of
//     this process (agents, controllers, clients), and kos-apiserver's RSS
//     at the end.
//
// -agent.server-cpuprofile writes a CPU profile of kos-apiserver taken
// while the attachments are created (b.N / -agent.rate seconds); go test's
// -cpuprofile profiles the agents and controllers.
//
// Each agent has a connection of its own to kos-apiserver, as agents in
// separate processes do (-agent.shared-connection shares one). Run it as
//
//	go test ./components/agent/ -run '^$' -bench Agents -benchtime 1000x
//	go test ./components/agent/ -run '^$' -bench Agents -benchtime 5000x -agent.agents 500 -agent.rate 100 -timeout 60m
func BenchmarkAgents(b *testing.B) {
	nAgents := *benchAgents
	nNetworks := max(1, nAgents/2)
	k := newAPI(b)
	startControllers(b)
	for j := range nNetworks {
		k.subnet(fmt.Sprintf("s%d", j), fmt.Sprintf("10.%d.%d.0/20", 100+j/16, j%16*16), uint32(1001+j))
	}
	poll.Until(b, 2*time.Minute, "the subnets are validated", func(context.Context) error {
		list, err := k.client.NetworkV1alpha1().Subnets(k.ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, s := range list.Items {
			if !s.Status.Validated {
				return fmt.Errorf("subnet %s is not validated", s.Name)
			}
		}
		return nil
	})
	agents := make([]*runningAgent, nAgents)
	fabrics := make([]*timedFabric, nAgents)
	for i := range agents {
		fabrics[i] = &timedFabric{Interface: logging.New(), programmed: map[fabric.RemoteAttachment]time.Time{}}
		cfg := agentConfig(b, benchNode(k, i), benchHost(i), fabrics[i])
		// The agents check and reconcile their fabrics as often as by
		// default, not as often as the tests need.
		cfg.FlowCheckPeriod, cfg.ReconcilePeriod = 0, 0
		if !*benchShared {
			cfg.Client = ownConnection(b)
		}
		agents[i] = startAgent(b, cfg)
	}
	poll.Until(b, 5*time.Minute, "every agent is healthy", func(context.Context) error {
		for i, a := range agents {
			if err := a.agent.Healthy(); err != nil {
				return fmt.Errorf("agent %d: %w", i, err)
			}
		}
		return nil
	})
	// all watches every attachment of the namespace, as an agent without
	// relevance filtering would.
	var all atomic.Int64
	allInformer := kosinformers.NewNetworkAttachmentInformer(kosClient(b), k.ns, 0, cache.Indexers{})
	count := func(any) { all.Add(1) }
	if _, err := allInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: count, UpdateFunc: func(_, o any) { count(o) }, DeleteFunc: count,
	}); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go allInformer.RunWithContext(ctx)
	server, etcd := kosProcesses(b)

	var seq int
	b.Run(fmt.Sprintf("agents=%d", nAgents), func(b *testing.B) {
		k := &api{t: b, ctx: k.ctx, client: k.client, ns: k.ns}
		before := make([]float64, len(agents))
		for i, a := range agents {
			before[i] = a.counter(b, "kos_agent_attachment_notifications_total", nil)
		}
		allBefore := all.Load()
		serverCPU, etcdCPU, selfCPU := processCPU(b, server), processCPU(b, etcd), processCPU(b, "self")
		names := make([]string, 0, b.N)
		first := seq
		b.ResetTimer()
		start := time.Now()
		profiled := profileServer(b, *benchProfile, time.Duration(float64(b.N) / *benchRate * float64(time.Second)))
		// Each create runs on its own goroutine (at most 64 at once), so
		// that the rate holds however long one takes.
		ticker := time.NewTicker(time.Duration(float64(time.Second) / *benchRate))
		var creates sync.WaitGroup
		var failed atomic.Int64
		inFlight := make(chan struct{}, 64)
		atts := k.client.NetworkV1alpha1().NetworkAttachments(k.ns)
		for range b.N {
			<-ticker.C
			att := &v1alpha1.NetworkAttachment{
				ObjectMeta: metav1.ObjectMeta{Name: benchName(seq)},
				Spec:       v1alpha1.NetworkAttachmentSpec{Node: benchNode(k, benchNodeOf(seq, nAgents)), Subnet: fmt.Sprintf("s%d", seq%nNetworks)},
			}
			inFlight <- struct{}{}
			creates.Go(func() {
				defer func() { <-inFlight }()
				if _, err := atts.Create(k.ctx, att, metav1.CreateOptions{}); err != nil {
					b.Errorf("creating attachment %s: %v", att.Name, err)
					failed.Add(1)
				}
			})
			names = append(names, benchName(seq))
			seq++
		}
		ticker.Stop()
		offered := float64(b.N) / time.Since(start).Seconds()
		creates.Wait()
		if failed.Load() > 0 {
			b.FailNow()
		}
		// The all informer tells when every attachment is ready: listing
		// them over and over would load kos-apiserver and this process
		// with work that is not the agents'.
		byName := map[string]*v1alpha1.NetworkAttachment{}
		poll.Until(b, 10*time.Minute, "every attachment is ready", func(context.Context) error {
			ready := 0
			for s := first; s < seq; s++ {
				obj, ok, _ := allInformer.GetStore().GetByKey(k.ns + "/" + benchName(s))
				if !ok {
					continue
				}
				a := obj.(*v1alpha1.NetworkAttachment)
				byName[a.Name] = a
				if a.Status.HostIP != "" {
					ready++
				}
			}
			if ready < seq-first {
				return fmt.Errorf("%d of %d ready", ready, seq-first)
			}
			return nil
		})
		reached := float64(b.N) / time.Since(start).Seconds()
		// Every agent has programmed this run's attachments of the networks
		// it has attachments in.
		nodesOf := make([]sets.Set[int], nNetworks)
		for j := range nodesOf {
			nodesOf[j] = sets.New[int]()
		}
		for s := range seq {
			nodesOf[s%nNetworks].Insert(benchNodeOf(s, nAgents))
		}
		poll.Until(b, 5*time.Minute, "every remote attachment is disseminated", func(context.Context) error {
			missing := 0
			for s := first; s < seq; s++ {
				addr := remoteOf(byName[benchName(s)])
				for i := range nodesOf[s%nNetworks] {
					if i != benchNodeOf(s, nAgents) && !fabrics[i].has(addr) {
						missing++
					}
				}
			}
			if missing > 0 {
				return fmt.Errorf("%d remote attachments not yet programmed", missing)
			}
			return nil
		})
		b.StopTimer()
		if err := <-profiled; err != nil {
			b.Errorf("profiling kos-apiserver: %v", err)
		}
		serverCPU, etcdCPU, selfCPU = processCPU(b, server)-serverCPU, processCPU(b, etcd)-etcdCPU, processCPU(b, "self")-selfCPU

		var latencies, addressing []time.Duration
		for _, name := range names {
			a := byName[name]
			created, ok1 := a.ExtendedMetadata.Writes.Time(v1alpha1.SectionSpec)
			ready, ok2 := a.ExtendedMetadata.Writes.Time(v1alpha1.SectionImpl)
			if ok1 && ok2 {
				latencies = append(latencies, ready.Sub(created.Time))
			}
			if addressed, ok := a.ExtendedMetadata.Writes.Time(v1alpha1.SectionAddress); ok1 && ok {
				addressing = append(addressing, addressed.Sub(created.Time))
			}
		}
		slices.Sort(latencies)
		slices.Sort(addressing)

		// watchedSince[i][j] is when node i's first attachment of this run
		// in network j was ready: node i watched network j from then on.
		watchedSince := make([]map[int]time.Time, nAgents)
		relevantNets := make([]sets.Set[int], nAgents)
		for i := range nAgents {
			watchedSince[i], relevantNets[i] = map[int]time.Time{}, sets.New[int]()
		}
		for s := first; s < seq; s++ {
			i, j := benchNodeOf(s, nAgents), s%nNetworks
			relevantNets[i].Insert(j)
			ready, _ := byName[benchName(s)].ExtendedMetadata.Writes.Time(v1alpha1.SectionImpl)
			if t, ok := watchedSince[i][j]; !ok || ready.Time.Before(t) {
				watchedSince[i][j] = ready.Time
			}
		}
		var disseminations []time.Duration
		for s := first; s < seq; s++ {
			att := byName[benchName(s)]
			written, ok := att.ExtendedMetadata.Writes.Time(v1alpha1.SectionAddress)
			if !ok {
				continue
			}
			for i := range nodesOf[s%nNetworks] {
				since, watched := watchedSince[i][s%nNetworks]
				if i == benchNodeOf(s, nAgents) || !watched || written.Time.Before(since) {
					continue
				}
				if at, ok := fabrics[i].at(remoteOf(att)); ok {
					disseminations = append(disseminations, max(0, at.Sub(written.Time)))
				}
			}
		}
		slices.Sort(disseminations)

		var notified, relevant float64
		for i, a := range agents {
			notified += a.counter(b, "kos_agent_attachment_notifications_total", nil) - before[i]
			for s := first; s < seq; s++ {
				if relevantNets[i].Has(s % nNetworks) {
					relevant++
				}
			}
		}
		n := float64(b.N)
		b.ReportMetric(offered, "atts/s")
		b.ReportMetric(reached, "ready-atts/s")
		b.ReportMetric(msec(percentile(addressing, 0.99)), "p99-address-ms")
		b.ReportMetric(msec(percentile(latencies, 0.50)), "p50-ready-ms")
		b.ReportMetric(msec(percentile(latencies, 0.99)), "p99-ready-ms")
		b.ReportMetric(msec(percentile(disseminations, 0.50)), "p50-dissem-ms")
		b.ReportMetric(msec(percentile(disseminations, 0.99)), "p99-dissem-ms")
		b.ReportMetric(float64(len(disseminations)), "disseminations")
		b.ReportMetric(notified/float64(nAgents), "notifications/agent")
		b.ReportMetric(relevant/float64(nAgents), "relevant-atts/agent")
		b.ReportMetric(notified/relevant, "notifications/relevant-att")
		b.ReportMetric(float64(all.Load()-allBefore), "all-notifications")
		b.ReportMetric(msec(serverCPU)/n, "server-cpu-ms/att")
		b.ReportMetric(msec(etcdCPU)/n, "etcd-cpu-ms/att")
		b.ReportMetric(msec(selfCPU)/n, "agents+controllers-cpu-ms/att")
		b.ReportMetric(rssMiB(b, server), "server-rss-MiB")
		b.ReportMetric(n, "atts")
		b.Logf("load average %s", loadAverage())
	})
}

// BenchmarkAgentMemory runs one kos-agent process (the real binary, logging
// fabric, straight to kos-apiserver) with one local attachment, gives its
// network -agent.relevant remote attachments, and reports the process's
// resident memory (VmRSS and its anonymous part, RssAnon, from /proc) and
// its Go heap in use (from its /metrics) once it holds them all, before
// them (with the one local attachment) for comparison. Run it as
//
//	go test ./components/agent/ -run '^$' -bench AgentMemory -benchtime 1x
func BenchmarkAgentMemory(b *testing.B) {
	env := testenv.Shared(b)
	kos := kosAPI(b)
	k := newAPI(b)
	const vni = 1901
	k.subnet("s1", "10.190.0.0/16", vni)
	k.attachment("a0", k.node("a"), "s1")
	k.address("a0", "10.190.0.1", vni)
	p := startAgentProcess(b, testenv.Build(b, "cmd/kos-agent"), "--fabric=logging", "--kubeconfig="+env.Kubeconfig,
		"--node-name="+k.node("a"), "--host-ip="+hostA, "--kos-api-server="+kos.URL, "--kos-api-ca-file="+kos.CACertFile)
	poll.Until(b, settle, "a0 is ready", k.ready("a0", hostA))
	time.Sleep(5 * time.Second)
	rssBefore, anonBefore := processMemory(b, p.cmd.Process.Pid)
	heapBefore := p.metric(b, "go_memstats_heap_inuse_bytes")

	n := *benchRelevant
	b.ResetTimer()
	for range b.N {
		// Eight writers, each creating, addressing and giving a host to
		// its share, as IPAM and the attachments' agents would.
		var wg sync.WaitGroup
		var failed atomic.Int64
		for w := range 8 {
			wg.Go(func() {
				atts := k.client.NetworkV1alpha1().NetworkAttachments(k.ns)
				for s := w; s < n; s += 8 {
					if err := createRemote(k.ctx, atts, fmt.Sprintf("r%d", s), k.node(fmt.Sprintf("r%d", s%100)),
						netip.AddrFrom4([4]byte{10, 190, byte(1 + s/250), byte(1 + s%250)}), vni, benchHost(1+s%100)); err != nil {
						b.Errorf("remote attachment %d: %v", s, err)
						failed.Add(1)
						return
					}
				}
			})
		}
		wg.Wait()
		if failed.Load() > 0 {
			b.FailNow()
		}
		poll.Until(b, 5*time.Minute, "the agent holds every remote attachment", func(context.Context) error {
			if got := p.metric(b, "kos_agent_remote_attachments"); got != float64(n) {
				return fmt.Errorf("the agent holds %g remote attachments, want %d", got, n)
			}
			return nil
		})
	}
	b.StopTimer()
	// Let a periodic reconcile and the garbage collector run, as they do in
	// a long-lived agent, before reading its memory.
	time.Sleep(10 * time.Second)
	rss, anon := processMemory(b, p.cmd.Process.Pid)
	b.ReportMetric(float64(n), "relevant-atts")
	b.ReportMetric(rss, "rss-MiB")
	b.ReportMetric(anon, "rss-anon-MiB")
	b.ReportMetric(p.metric(b, "go_memstats_heap_inuse_bytes")/(1<<20), "heap-inuse-MiB")
	b.ReportMetric(rssBefore, "rss-before-MiB")
	b.ReportMetric(anonBefore, "rss-anon-before-MiB")
	b.ReportMetric(heapBefore/(1<<20), "heap-inuse-before-MiB")
	b.Logf("load average %s", loadAverage())
}

// createRemote creates an attachment on another node and writes its address
// and its host into its status.
func createRemote(ctx context.Context, atts interface {
	Create(context.Context, *v1alpha1.NetworkAttachment, metav1.CreateOptions) (*v1alpha1.NetworkAttachment, error)
	UpdateStatus(context.Context, *v1alpha1.NetworkAttachment, metav1.UpdateOptions) (*v1alpha1.NetworkAttachment, error)
}, name, node string, ip netip.Addr, vni uint32, host string) error {
	att, err := atts.Create(ctx, &v1alpha1.NetworkAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1alpha1.NetworkAttachmentSpec{Node: node, Subnet: "s1"},
	}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	att.Status.IPv4, att.Status.AddressVNI, att.Status.LockUID = ip.String(), vni, "bench-lock-"+name
	if att, err = atts.UpdateStatus(ctx, att, metav1.UpdateOptions{}); err != nil {
		return err
	}
	att.Status.HostIP = host
	_, err = atts.UpdateStatus(ctx, att, metav1.UpdateOptions{})
	return err
}

// timedFabric is a fabric that remembers when each remote attachment was
// first programmed on it.
type timedFabric struct {
	fabric.Interface

	mu         sync.Mutex
	programmed map[fabric.RemoteAttachment]time.Time
}

func (f *timedFabric) CreateRemote(ctx context.Context, atts ...fabric.RemoteAttachment) error {
	err := f.Interface.CreateRemote(ctx, atts...)
	if err == nil {
		now := time.Now()
		f.mu.Lock()
		for _, a := range atts {
			if _, ok := f.programmed[a]; !ok {
				f.programmed[a] = now
			}
		}
		f.mu.Unlock()
	}
	return err
}

func (f *timedFabric) at(a fabric.RemoteAttachment) (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.programmed[a]
	return t, ok
}

func (f *timedFabric) has(a fabric.RemoteAttachment) bool {
	_, ok := f.at(a)
	return ok
}

// remoteOf returns the remote attachment the other nodes of its network
// program for att.
func remoteOf(att *v1alpha1.NetworkAttachment) fabric.RemoteAttachment {
	ip, _ := netip.ParseAddr(att.Status.IPv4)
	host, _ := netip.ParseAddr(att.Status.HostIP)
	return fabric.RemoteAttachment{VNI: att.Status.AddressVNI, IP: ip, HostIP: host}
}

// ownConnection returns a KOS client with a connection of its own: a Proxy
// function keeps client-go from sharing the transport of equal
// configurations.
func ownConnection(b *testing.B) kosclient.Interface {
	cfg := directConfig(b)
	cfg.Proxy = func(*http.Request) (*url.URL, error) { return nil, nil }
	c, err := kosclient.NewForConfig(rest.CopyConfig(cfg))
	if err != nil {
		b.Fatal(err)
	}
	return c
}

func benchName(s int) string { return fmt.Sprintf("a%d", s) }

// benchNodeOf returns the agent index of the s-th attachment: the
// attachments of network j land in turn on the benchSpread consecutive
// nodes starting at node 2j.
func benchNodeOf(s, agents int) int {
	networks := max(1, agents/2)
	j := s % networks
	return (2*j + (s/networks)%benchSpread) % agents
}

func benchNode(k *api, i int) string { return k.node(fmt.Sprintf("n%03d", i)) }

// benchHost returns the underlay address of node i: 192.168.x.y.
func benchHost(i int) string { return fmt.Sprintf("192.168.%d.%d", 1+i/250, 1+i%250) }

// kosProcesses returns the process ids of the package's kos-apiserver and
// of its etcd.
func kosProcesses(b *testing.B) (server, etcd string) {
	kos := kosAPI(b)
	for _, p := range testenv.Shared(b).Processes() {
		switch {
		case !p.Running:
		case p.Name == "kos-apiserver-"+kos.Name:
			server = strconv.Itoa(p.PID)
		case p.Name == "etcd-kos-"+kos.Name:
			etcd = strconv.Itoa(p.PID)
		}
	}
	if server == "" || etcd == "" {
		b.Fatalf("kos-apiserver %s or its etcd does not run (pids %q, %q)", kos.Name, server, etcd)
	}
	return server, etcd
}

// profileServer writes a CPU profile of kos-apiserver over the next d (at
// least a second) to file, and sends the outcome on the channel it returns;
// with no file it sends nil at once.
func profileServer(b *testing.B, file string, d time.Duration) <-chan error {
	done := make(chan error, 1)
	if file == "" {
		done <- nil
		return done
	}
	cfg := directConfig(b)
	cfg.Timeout = d + time.Minute
	c, err := kosclient.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	go func() {
		data, err := c.RESTClient().Get().AbsPath("/debug/pprof/profile").
			Param("seconds", strconv.Itoa(max(1, int(d.Seconds())))).DoRaw(context.Background())
		if err == nil {
			err = os.WriteFile(file, data, 0o644)
		}
		done <- err
	}()
	return done
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

// rssMiB returns the resident memory of process pid.
func rssMiB(b *testing.B, pid string) float64 {
	n, _ := strconv.Atoi(pid)
	rss, _ := processMemory(b, n)
	return rss
}

// processMemory returns the resident memory of process pid and its
// anonymous part (heap and stacks, not the binary's pages), in MiB.
func processMemory(b *testing.B, pid int) (rss, anon float64) {
	b.Helper()
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		b.Fatalf("reading the memory of process %d: %v", pid, err)
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		name, value, _ := strings.Cut(line, ":")
		kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 64)
		switch {
		case name != "VmRSS" && name != "RssAnon":
		case err != nil:
			b.Fatalf("parsing %q: %v", line, err)
		case name == "VmRSS":
			rss = kb / 1024
		default:
			anon = kb / 1024
		}
	}
	return rss, anon
}

// metric returns the value of an unlabelled metric of the agent process.
func (p *agentProcess) metric(b *testing.B, name string) float64 {
	b.Helper()
	_, body, err := p.get("/metrics")
	if err != nil {
		b.Fatalf("scraping the agent: %v", err)
	}
	for line := range strings.SplitSeq(body, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatalf("parsing %q: %v", line, err)
			}
			return f
		}
	}
	b.Fatalf("the agent has no metric %s", name)
	return 0
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
