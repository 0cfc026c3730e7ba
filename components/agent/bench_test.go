package agent_test

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/kos-sdn/kos/components/agent"
	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/fabric"
	"github.com/kos-sdn/kos/components/fabric/logging"
	kosclient "github.com/kos-sdn/kos/components/generated/clientset/versioned"
	kosscheme "github.com/kos-sdn/kos/components/generated/clientset/versioned/scheme"
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

// uniqueAddresses returns an error naming the first address held by two
// attachments of one network.
func uniqueAddresses(atts map[string]*v1alpha1.NetworkAttachment) error {
	holders := map[string]string{}
	for _, a := range atts {
		key := fmt.Sprintf("%d/%s", a.Status.AddressVNI, a.Status.IPv4)
		if other, ok := holders[key]; ok {
			return fmt.Errorf("attachments %s and %s both hold address %s", other, a.Name, key)
		}
		holders[key] = a.Name
	}
	return nil
}

// startBenchAgent runs an agent for node as kos-agent does with its
// default settings, but for the logging fabric fab: its workers, its
// client limits, a connection of its own to kos-apiserver and to the main
// cluster (unless -agent.shared-connection), and an Event recorder that
// sends to the main cluster. It authenticates to both with token, or as
// the admin when token is "". It runs until the benchmark ends.
func startBenchAgent(b *testing.B, node, hostIP string, fab fabric.Interface, token string) *runningAgent {
	b.Helper()
	opts := agent.NewOptions()
	cfg := agentConfig(b, node, hostIP, fab)
	cfg.FlowCheckPeriod, cfg.ReconcilePeriod, cfg.ExecTimeout = opts.FlowCheckPeriod, opts.ReconcilePeriod, opts.ExecTimeout
	kosCfg, kubeCfg := directConfig(b), rest.CopyConfig(testenv.Shared(b).RESTConfig)
	if token != "" {
		kosCfg, kubeCfg = withToken(kosCfg, token), withToken(kubeCfg, token)
	}
	for _, c := range []*rest.Config{kosCfg, kubeCfg} {
		c.QPS, c.Burst, c.UserAgent = opts.QPS, opts.Burst, "kos-agent/"+node
		if !*benchShared {
			// A Proxy function keeps client-go from sharing the
			// transport of equal configurations.
			c.Proxy = func(*http.Request) (*url.URL, error) { return nil, nil }
		}
	}
	var err error
	if cfg.Client, err = kosclient.NewForConfig(kosCfg); err != nil {
		b.Fatal(err)
	}
	kube, err := kubernetes.NewForConfig(kubeCfg)
	if err != nil {
		b.Fatal(err)
	}
	broadcaster := record.NewBroadcaster()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	b.Cleanup(broadcaster.Shutdown)
	cfg.Recorder = broadcaster.NewRecorder(kosscheme.Scheme, corev1.EventSource{Component: "kos-agent", Host: node})
	cfg.Registerer = prometheus.NewRegistry()
	a, err := agent.New(cfg)
	if err != nil {
		b.Fatalf("creating the agent of %s: %v", node, err)
	}
	// The zero logger discards: five hundred agents' logs would drown
	// the figures.
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), klog.Logger{}))
	r := &runningAgent{agent: a, registry: cfg.Registerer.(*prometheus.Registry), cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- a.Run(ctx, opts.Workers) }()
	b.Cleanup(func() { r.stop(b) })
	return r
}

// startManagerProcess runs the kos-controller-manager program with its
// default settings, straight to kos-apiserver, until the benchmark ends,
// with kubeconfig's identity, and returns its process id once it is ready
// (it holds the Lease).
func startManagerProcess(b *testing.B, kubeconfig string) string {
	b.Helper()
	kos := kosAPI(b)
	metrics := freeAddress(b)
	log := filepath.Join(b.TempDir(), "kos-controller-manager.log")
	logFile, err := os.Create(log)
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(testenv.Build(b, "cmd/kos-controller-manager"), "--kubeconfig="+kubeconfig,
		"--kos-api-server="+kos.URL, "--kos-api-ca-file="+kos.CACertFile, "--metrics-bind-address="+metrics)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		b.Fatalf("starting kos-controller-manager: %v", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(done)
	}()
	b.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			b.Errorf("kos-controller-manager did not stop within 30s of SIGTERM; its log is %s", log)
		}
	})
	p := &agentProcess{cmd: cmd, metrics: metrics, log: log, done: done}
	poll.Until(b, time.Minute, "kos-controller-manager is ready", func(context.Context) error {
		select {
		case <-done:
			data, _ := os.ReadFile(log)
			return fmt.Errorf("kos-controller-manager exited:\n%s", data)
		default:
		}
		code, body, err := p.get("/readyz")
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("/readyz: %d %s", code, body)
		}
		return err
	})
	return strconv.Itoa(cmd.Process.Pid)
}

// benchRoles are the processes whose CPU BenchmarkAgents reports, by
// role: "agents" is this process.
var benchRoles = []string{"kos-apiserver", "kos-etcd", "controller-manager", "agents", "kube-apiserver", "kube-etcd"}

// benchPIDs are the process ids of benchRoles ("self" for this process).
type benchPIDs map[string]string

// benchProcesses returns the process ids of the package's kos-apiserver,
// its etcd, the main cluster's kube-apiserver and its etcd, the controller
// manager (manager) and this process.
func benchProcesses(b *testing.B, manager string) benchPIDs {
	kos := kosAPI(b)
	pids := benchPIDs{"controller-manager": manager, "agents": "self"}
	for _, p := range testenv.Shared(b).Processes() {
		role := map[string]string{
			"kos-apiserver-" + kos.Name: "kos-apiserver",
			"etcd-kos-" + kos.Name:      "kos-etcd",
			"kube-apiserver":            "kube-apiserver",
			"etcd":                      "kube-etcd",
		}[p.Name]
		if role != "" && p.Running {
			pids[role] = strconv.Itoa(p.PID)
		}
	}
	for _, role := range benchRoles {
		if pids[role] == "" {
			b.Fatalf("no %s runs", role)
		}
	}
	return pids
}

// cpuTimes are the CPU times (user and system) of benchRoles.
type cpuTimes map[string]time.Duration

func (p benchPIDs) cpu(b *testing.B) cpuTimes {
	out := cpuTimes{}
	for role, pid := range p {
		out[role] = processCPU(b, pid)
	}
	return out
}

func (c cpuTimes) since(before cpuTimes) cpuTimes {
	out := cpuTimes{}
	for role, t := range c {
		out[role] = t - before[role]
	}
	return out
}

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
