package agent_test

// This file holds the agents' benchmarks of many agents against one
// kos-apiserver (BenchmarkAgents) and of one agent process's memory
// (BenchmarkAgentMemory), with their flags. The processes they start and
// measure are in bench_processes_test.go; the attachments they spread over
// the nodes and the fabric that times them in bench_network_test.go; the
// request counts and the figures they report in bench_figures_test.go.

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/fabric"
	"github.com/kos-sdn/kos/components/fabric/logging"
	kosclient "github.com/kos-sdn/kos/components/generated/clientset/versioned"
	kosinformers "github.com/kos-sdn/kos/components/generated/informers/externalversions/network/v1alpha1"
	"github.com/kos-sdn/kos/tools/poll"
	"github.com/kos-sdn/kos/tools/testenv"
)

// benchSpread is how many consecutive nodes each network of BenchmarkAgents
// spans; network j starts at node 2j, so that each node is in a few
// networks only (benchSpread/2 on average).
const benchSpread = 5

var (
	benchRate     = flag.Float64("agent.rate", 20, "attachments BenchmarkAgents creates per second")
	benchAgents   = flag.Int("agent.agents", 50, "agents (nodes) BenchmarkAgents runs; it makes half as many networks")
	benchAtts     = flag.Int("agent.attachments", 500, "attachments each iteration of BenchmarkAgents creates (run it with -benchtime=1x)")
	benchShared   = flag.Bool("agent.shared-connection", false, "BenchmarkAgents: all agents share one HTTP/2 connection to kos-apiserver (client-go's default within one process) instead of one each, as separate processes have")
	benchRelevant = flag.Int("agent.relevant", 1000, "remote attachments relevant to the one kos-agent process of BenchmarkAgentMemory")
	benchProfile  = flag.String("agent.server-cpuprofile", "", "BenchmarkAgents: write a CPU profile of kos-apiserver, taken while the attachments are created, to this file")
	benchAdmin    = flag.Bool("agent.as-admin", false, "BenchmarkAgents: the agents and the controller manager authenticate with the admin's client certificate instead of their ServiceAccounts' tokens")
)

// BenchmarkAgents runs KOS as shipped, but for the switch: the
// kos-controller-manager program with its default settings (16 IPAM
// workers, its client limits, leader election, no Event per address), and
// -agent.agents agents with logging fabrics as goroutines, each as kos-agent
// runs one (its workers, its client limits, a connection of its own to
// kos-apiserver and to the main cluster, an Event on every attachment made
// ready), against one kos-apiserver and its etcd. It creates
// -agent.attachments attachments per iteration at a steady rate
// (-agent.rate) and reports:
//
//   - the rate offered (atts/s) and the rate reached: attachments per
//     second from the first create until every one is ready (ready-atts/s);
//   - from the server's write times, the p50 and p99 latency from an
//     attachment's creation to its address (IPAM's status write) and to its
//     readiness (the agent's status write);
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
//   - the CPU time per attachment, read from /proc before and after, of
//     kos-apiserver, its etcd, the controller manager, this process (the
//     agents, and the benchmark's creates and its one watch), the main
//     cluster's kube-apiserver and its etcd; the same processes' CPU time
//     per second over an idle window as long as the run's creates, just
//     before them (ROLE-idle-cpu-ms/s); and kos-apiserver's RSS at the end;
//   - the requests the main cluster's kube-apiserver served meanwhile
//     (its apiserver_request_total, non-resource requests such as this
//     benchmark's scrapes left out), per attachment, in all and for Events
//     (kube-req/att, kube-events-req/att); the log has them by verb and
//     resource, and the same counts over an idle window of the same
//     length before the run, which is what KOS costs kube-apiserver when
//     nothing changes plus kube-apiserver's own work.
//
// It fails when two attachments of a network hold one address, or an
// attachment created is never ready or never reaches its network's other
// nodes, never on a time.
//
// -agent.server-cpuprofile writes a CPU profile of kos-apiserver taken
// while the attachments are created; go test's -cpuprofile profiles the
// agents. -agent.shared-connection gives all agents one connection to each
// server instead of one each, as separate processes have. Run it as
//
//	go test ./components/agent/ -run '^$' -bench 'BenchmarkAgents$' -benchtime 1x
//	go test ./components/agent/ -run '^$' -bench 'BenchmarkAgents$' -benchtime 1x -agent.agents 500 -agent.attachments 3000 -agent.rate 100 -timeout 60m
func BenchmarkAgents(b *testing.B) {
	nAgents := *benchAgents
	nNetworks := max(1, nAgents/2)
	k := newAPI(b)
	nodes := make([]string, nAgents)
	for i := range nodes {
		nodes[i] = benchNode(k, i)
	}
	// As shipped: each agent presents a token of the kos-agent
	// ServiceAccount bound to its pod on its node, the controller
	// manager one of its own ServiceAccount.
	tokens, managerKubeconfig := map[string]string{}, testenv.Shared(b).Kubeconfig
	if !*benchAdmin {
		var managerToken string
		tokens, managerToken = benchIdentities(b, nodes)
		managerKubeconfig = tokenKubeconfig(b, managerToken)
	}
	manager := startManagerProcess(b, managerKubeconfig)
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
		agents[i] = startBenchAgent(b, nodes[i], benchHost(i), fabrics[i], tokens[nodes[i]])
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
	// Uncompressed, as the controller manager watches: kos-apiserver
	// would gzip every event of a streamed watch for this measurement.
	allCfg := directConfig(b)
	allCfg.DisableCompression = true
	allClient, err := kosclient.NewForConfig(allCfg)
	if err != nil {
		b.Fatal(err)
	}
	allInformer := kosinformers.NewNetworkAttachmentInformer(allClient, k.ns, 0, cache.Indexers{})
	count := func(any) { all.Add(1) }
	if _, err := allInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: count, UpdateFunc: func(_, o any) { count(o) }, DeleteFunc: count,
	}); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go allInformer.RunWithContext(ctx)
	procs := benchProcesses(b, manager)
	kube := kubeRequests(b)

	var seq int
	b.Run(fmt.Sprintf("agents=%d", nAgents), func(b *testing.B) {
		k := &api{t: b, ctx: k.ctx, client: k.client, ns: k.ns}
		total := b.N * *benchAtts
		window := time.Duration(float64(total) / *benchRate * float64(time.Second))
		// What kube-apiserver serves while nothing is created, over as
		// long as the creates will take.
		idleBefore, idleCPUBefore := kube.take(b), procs.cpu(b)
		time.Sleep(window)
		idle, idleCPU := kube.take(b).since(idleBefore), procs.cpu(b).since(idleCPUBefore)

		before := make([]float64, len(agents))
		for i, a := range agents {
			before[i] = a.counter(b, "kos_agent_attachment_notifications_total", nil)
		}
		allBefore := all.Load()
		cpuBefore := procs.cpu(b)
		requestsBefore := kube.take(b)
		waitBefore := flowControlWait(b)
		kosRequests := kubeMetrics{client: kosClient(b).RESTClient(), codes: true}
		kosBefore := kosRequests.take(b)
		names := make([]string, 0, total)
		first := seq
		b.ResetTimer()
		start := time.Now()
		profiled := profileServer(b, *benchProfile, window)
		// Each create runs on its own goroutine (at most 64 at once), so
		// that the rate holds however long one takes.
		ticker := time.NewTicker(time.Duration(float64(time.Second) / *benchRate))
		var creates sync.WaitGroup
		var failed atomic.Int64
		inFlight := make(chan struct{}, 64)
		atts := k.client.NetworkV1alpha1().NetworkAttachments(k.ns)
		for range total {
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
		offered := float64(total) / time.Since(start).Seconds()
		creates.Wait()
		if failed.Load() > 0 {
			b.FailNow()
		}
		// The all informer tells when every attachment is ready: listing
		// them over and over would load kos-apiserver and this process
		// with work that is not the agents'. An attachment that is never
		// ready is lost.
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
		reached := float64(total) / time.Since(start).Seconds()
		if err := uniqueAddresses(byName); err != nil {
			b.Fatal(err)
		}
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
		// The agents send their Events in the background: wait for them
		// (client-go's recorder may drop some under load, so not
		// forever), so that their cost is counted.
		waitEvents(b, kube, requestsBefore, total)
		b.StopTimer()
		if err := <-profiled; err != nil {
			b.Errorf("profiling kos-apiserver: %v", err)
		}
		cpu := procs.cpu(b).since(cpuBefore)
		figure(b, "kos-apiserver priority and fairness, queue wait by priority level: %s", flowControlWait(b).since(waitBefore))
		figure(b, "kos-apiserver requests by response code: %s", kosRequests.take(b).since(kosBefore))
		requests := kube.take(b).since(requestsBefore)

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
		n := float64(total)
		b.ReportMetric(offered, "atts/s")
		b.ReportMetric(reached, "ready-atts/s")
		b.ReportMetric(msec(percentile(addressing, 0.50)), "p50-address-ms")
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
		var kosCPU time.Duration
		for _, role := range benchRoles {
			b.ReportMetric(msec(cpu[role])/n, role+"-cpu-ms/att")
			if !strings.HasPrefix(role, "kube-") {
				kosCPU += cpu[role]
			}
		}
		b.ReportMetric(msec(kosCPU)/n, "kos-cpu-ms/att")
		// What the same processes spend while nothing changes (watches'
		// bookmarks, Leases, resyncs), per second: part of the figures per
		// attachment above, in proportion to the run's length.
		for _, role := range benchRoles {
			b.ReportMetric(msec(idleCPU[role])/window.Seconds(), role+"-idle-cpu-ms/s")
		}
		b.ReportMetric(requests.total()/n, "kube-req/att")
		b.ReportMetric(requests.of("events")/n, "kube-events-req/att")
		b.ReportMetric(rssMiB(b, procs["kos-apiserver"]), "server-rss-MiB")
		b.ReportMetric(n, "atts")
		figure(b, "kube-apiserver requests while creating %d attachments in %s: %s", total, time.Since(start).Round(time.Second), requests)
		figure(b, "kube-apiserver requests over an idle %s before: %s", window.Round(time.Second), idle)
		figure(b, "load average %s", loadAverage())
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
