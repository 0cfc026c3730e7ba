// Package driver is kos-driver, the attachment load driver: it creates
// virtual networks (a Subnet on a VNI of its own each) whose sizes follow a
// distribution, then attachments on them at a steady or Poisson rate over
// several threads, in three phases: warm-up (creating until every network
// has its size), cruise (each operation deletes a random attachment and
// creates a replacement in its network) and cool-down (waiting for the last
// attachments to become ready, then deleting them all at the same rate).
// Optionally each attachment pings earlier ones of its network through
// postCreateExec. It measures latencies from the server's write times
// (extendedMetadata.writes) as Prometheus histograms and in a CSV, checks
// that no two live attachments hold one address of one VNI, and deletes
// what it made, also when interrupted.
package driver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	networkapi "github.com/kos-sdn/kos/components/apis/network"
	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	kosclient "github.com/kos-sdn/kos/components/generated/clientset/versioned"
	kosinformers "github.com/kos-sdn/kos/components/generated/informers/externalversions"
)

// RunLabel is the label on every object of a run, whose value is the run's
// ID: cleanup deletes what carries it.
const RunLabel = "kos-driver.kos.example.com/run"

// Config is what a run needs.
type Config struct {
	// Kube reaches the main cluster: its Nodes and Namespaces.
	Kube *rest.Config
	// KOS reaches the KOS API.
	KOS *rest.Config
	// Namespace holds the run's objects; "" creates one, kos-driver-<run>,
	// deleted at the end.
	Namespace string
	// RunID labels the run's objects; "" picks a random one.
	RunID string
	// Networks is how many virtual networks to make, with sizes from Sizes.
	Networks int
	Sizes    Sizes
	// VNIBase is the first VNI; networks take VNIBase..VNIBase+Networks-1.
	// 0 picks a random range.
	VNIBase uint32
	// NodeSelector picks the main cluster's Nodes attachments go on (a
	// label selector; "" means every node).
	NodeSelector string
	// Rate is the operations per second; Arrivals is ArrivalsSteady or
	// ArrivalsPoisson; Threads is how many operations run at once.
	Rate     float64
	Arrivals string
	Threads  int
	// Cruise is how long the cruise phase lasts.
	Cruise time.Duration
	// ReadyTimeout bounds how long an attachment may take to become ready
	// (and tested); at cool-down the driver waits for the slow ones that
	// long at most, then counts the rest as timeouts.
	ReadyTimeout time.Duration
	// Ping gives every attachment a ping test of up to PingPeers ready
	// attachments of its network, run by Shell (see ExecAllowList).
	Ping      bool
	PingPeers int
	Shell     string
	// CSV, when set, receives a row per attachment at the end.
	CSV io.Writer
	// Out receives the progress lines and the summary.
	Out io.Writer
	// Progress is the period of progress lines; 0 prints none.
	Progress time.Duration
	// Registerer is where the driver's metrics go; nil means nowhere.
	Registerer prometheus.Registerer
	// Seed seeds the random choices; 0 picks one.
	Seed uint64
}

// network is one virtual network of the run.
type network struct {
	index  int
	subnet string
	vni    uint32
	prefix int
	size   int
	// live holds the names of its attachments not deleted, in creation
	// order.
	live []string
}

// record is what the driver knows of one attachment.
type record struct {
	name, node string
	network    *network
	phase      string
	created    time.Time // client time of the create call
	createDur  time.Duration
	// Latencies from the server's spec write, negative when not (yet) seen.
	addressed, ready, tested float64
	deleted                  bool
	deleteDur                time.Duration
	ipv4                     string
	// addrKey is the address (VNI/IP) it was last seen holding.
	addrKey string
	errs    []string
	// errKinds holds the kinds counted for it, each counted once.
	errKinds map[string]bool
}

func (r *record) hasErr(kind string) bool { return r.errKinds[kind] }

// Result is the outcome of a run, for tests and the summary.
type Result struct {
	RunID     string
	Namespace string
	Phases    []PhaseResult
	// Latencies in seconds, by name (create, create→addressed,
	// create→ready, create→tested, delete).
	Latencies map[string][]float64
	Errors    map[string]int
	Records   int
}

// PhaseResult says what one phase achieved.
type PhaseResult struct {
	Name             string
	Duration         time.Duration
	Creates, Deletes int
}

// Driver runs one load.
type Driver struct {
	cfg     Config
	kube    kubernetes.Interface
	kos     kosclient.Interface
	metrics *metrics
	rand    *rand.Rand
	randMu  sync.Mutex
	log     klog.Logger

	namespace        string
	createdNamespace bool
	nodes            []string
	networks         []*network

	mu      sync.Mutex
	records map[string]*record
	order   []*record
	// holders maps each address (VNI/IP) to the attachment seen holding
	// it, for the uniqueness check.
	holders  map[string]string
	seq      int
	phase    string
	creates  map[string]int
	deletes  map[string]int
	errCount map[string]int
	// phaseTimes are the phases done, in order.
	phaseTimes []phaseTime
}

// New checks cfg and returns a driver.
func New(cfg Config) (*Driver, error) {
	var errs []error
	if cfg.Networks < 1 {
		errs = append(errs, fmt.Errorf("want at least one network, got %d", cfg.Networks))
	}
	if cfg.Rate <= 0 {
		errs = append(errs, fmt.Errorf("want a positive rate, got %v", cfg.Rate))
	}
	if cfg.Threads < 1 {
		errs = append(errs, fmt.Errorf("want at least one thread, got %d", cfg.Threads))
	}
	if cfg.Arrivals != ArrivalsSteady && cfg.Arrivals != ArrivalsPoisson {
		errs = append(errs, fmt.Errorf("arrivals: want %s or %s, got %q", ArrivalsSteady, ArrivalsPoisson, cfg.Arrivals))
	}
	if cfg.VNIBase != 0 && (cfg.VNIBase < networkapi.MinVNI || uint64(cfg.VNIBase)+uint64(cfg.Networks)-1 > networkapi.MaxVNI) {
		errs = append(errs, fmt.Errorf("VNIs %d..%d are not all in [%d,%d]", cfg.VNIBase, uint64(cfg.VNIBase)+uint64(cfg.Networks)-1, networkapi.MinVNI, networkapi.MaxVNI))
	}
	if cfg.Ping && cfg.Shell == "" {
		errs = append(errs, errors.New("ping tests need a shell"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	if cfg.Seed == 0 {
		cfg.Seed = rand.Uint64()
	}
	if cfg.RunID == "" {
		cfg.RunID = fmt.Sprintf("%08x", rand.Uint32())
	}
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = time.Minute
	}
	reg := cfg.Registerer
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("registering the driver's metrics: %w", err)
	}
	kube, err := kubernetes.NewForConfig(cfg.Kube)
	if err != nil {
		return nil, err
	}
	kos, err := kosclient.NewForConfig(cfg.KOS)
	if err != nil {
		return nil, err
	}
	return &Driver{
		cfg: cfg, kube: kube, kos: kos, metrics: m,
		rand:     rand.New(rand.NewPCG(cfg.Seed, cfg.Seed>>1|1)),
		records:  map[string]*record{},
		holders:  map[string]string{},
		creates:  map[string]int{},
		deletes:  map[string]int{},
		errCount: map[string]int{},
	}, nil
}

func (d *Driver) intN(n int) int {
	d.randMu.Lock()
	defer d.randMu.Unlock()
	return d.rand.IntN(n)
}

// Run runs the load until its end or ctx's, then deletes what it made
// (with a context of its own, so that an interrupted run cleans up too),
// and returns the result. The summary goes to Config.Out either way.
func (d *Driver) Run(ctx context.Context) (*Result, error) {
	d.log = klog.FromContext(ctx).WithName("kos-driver")
	runErr := d.run(ctx)
	cleanupCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	cleanupErr := d.cleanup(cleanupCtx)
	res := d.result()
	writeSummary(d.cfg.Out, res)
	var csvErr error
	if d.cfg.CSV != nil {
		csvErr = d.writeCSV(d.cfg.CSV)
	}
	if runErr != nil && ctx.Err() != nil {
		runErr = fmt.Errorf("interrupted: %w", runErr)
	}
	return res, errors.Join(runErr, cleanupErr, csvErr)
}

func (d *Driver) run(ctx context.Context) error {
	if err := d.setUp(ctx); err != nil {
		return err
	}
	// The informer sees every attachment of the run: latencies, errors and
	// the uniqueness check come from it.
	factory := kosinformers.NewSharedInformerFactoryWithOptions(d.kos, 0,
		kosinformers.WithNamespace(d.namespace),
		kosinformers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = RunLabel + "=" + d.cfg.RunID }))
	inf := factory.Network().V1alpha1().NetworkAttachments().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { d.observe(obj.(*v1alpha1.NetworkAttachment)) },
		UpdateFunc: func(_, obj any) { d.observe(obj.(*v1alpha1.NetworkAttachment)) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if att, ok := obj.(*v1alpha1.NetworkAttachment); ok {
				d.forget(att)
			}
		},
	}); err != nil {
		return err
	}
	infCtx, stopInformer := context.WithCancel(ctx)
	factory.Start(infCtx.Done())
	defer func() {
		stopInformer()
		factory.Shutdown()
	}()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return ctx.Err()
	}

	progressCtx, stopProgress := context.WithCancel(ctx)
	progressDone := make(chan struct{})
	go func() { defer close(progressDone); d.progress(progressCtx) }()
	defer func() { stopProgress(); <-progressDone }()

	total := 0
	var plan []*network
	for _, n := range d.networks {
		total += n.size
		for range n.size {
			plan = append(plan, n)
		}
	}
	d.randMu.Lock()
	d.rand.Shuffle(len(plan), func(i, j int) { plan[i], plan[j] = plan[j], plan[i] })
	d.randMu.Unlock()

	// Warm-up: create every network's attachments.
	var next atomic.Int64
	if err := d.phaseRun(ctx, PhaseWarmUp, func() bool { return next.Load() >= int64(total) }, func(ctx context.Context) {
		if i := next.Add(1) - 1; i < int64(total) {
			d.create(ctx, plan[i])
		}
	}); err != nil {
		return err
	}
	// Cruise: churn.
	if d.cfg.Cruise > 0 {
		end := time.Now().Add(d.cfg.Cruise)
		if err := d.phaseRun(ctx, PhaseCruise, func() bool { return !time.Now().Before(end) }, func(ctx context.Context) {
			if name, n := d.pickVictim(); name != "" {
				d.delete(ctx, name)
				d.create(ctx, n)
			}
		}); err != nil {
			return err
		}
	}
	// Cool-down: wait for the slow, then delete everything at the rate.
	d.setPhase(PhaseCoolDown)
	if err := d.waitSettled(ctx); err != nil {
		return err
	}
	victims := d.liveNames()
	var nextVictim atomic.Int64
	if err := d.phaseRun(ctx, PhaseCoolDown, func() bool { return nextVictim.Load() >= int64(len(victims)) }, func(ctx context.Context) {
		if i := nextVictim.Add(1) - 1; i < int64(len(victims)) {
			d.delete(ctx, victims[i])
		}
	}); err != nil {
		return err
	}
	return nil
}

// phaseRun runs op on Threads workers at the configured rate until stop.
func (d *Driver) phaseRun(ctx context.Context, phase string, stop func() bool, op func(context.Context)) error {
	d.setPhase(phase)
	start := time.Now()
	ops := make(chan time.Time)
	go pace(ctx, d.cfg.Arrivals, d.cfg.Rate, d.cfg.Seed+uint64(len(phase)), ops, stop)
	var wg sync.WaitGroup
	for range d.cfg.Threads {
		wg.Go(func() {
			for range ops {
				op(ctx)
			}
		})
	}
	wg.Wait()
	d.mu.Lock()
	d.phaseTimes = append(d.phaseTimes, phaseTime{phase, time.Since(start)})
	d.mu.Unlock()
	d.log.Info("Phase done", "phase", phase, "duration", time.Since(start))
	return ctx.Err()
}

type phaseTime struct {
	name string
	dur  time.Duration
}

func (d *Driver) setPhase(p string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.phase = p
}

// setUp finds the nodes, makes the namespace and the subnets, and waits
// until the subnets are validated.
func (d *Driver) setUp(ctx context.Context) error {
	nodes, err := d.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: d.cfg.NodeSelector})
	if err != nil {
		return fmt.Errorf("listing the nodes: %w", err)
	}
	for _, n := range nodes.Items {
		d.nodes = append(d.nodes, n.Name)
	}
	if len(d.nodes) == 0 {
		return fmt.Errorf("no node matches %q", d.cfg.NodeSelector)
	}
	slices.Sort(d.nodes)

	d.namespace = d.cfg.Namespace
	if d.namespace == "" {
		d.namespace = "kos-driver-" + d.cfg.RunID
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: d.namespace, Labels: map[string]string{RunLabel: d.cfg.RunID}}}
		if _, err := d.kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating namespace %s: %w", d.namespace, err)
		}
		d.createdNamespace = true
	}

	base := d.cfg.VNIBase
	if base == 0 {
		base = networkapi.MinVNI + uint32(d.intN(int(networkapi.MaxVNI-networkapi.MinVNI+1)-d.cfg.Networks))
	}
	var cidrs cidrAllocator
	for i := range d.cfg.Networks {
		d.randMu.Lock()
		size := d.cfg.Sizes.Sample(d.rand)
		d.randMu.Unlock()
		prefix := prefixFor(size)
		n := &network{index: i, subnet: fmt.Sprintf("net-%d", i), vni: base + uint32(i), prefix: prefix, size: size}
		s := &v1alpha1.Subnet{
			ObjectMeta: metav1.ObjectMeta{Name: n.subnet, Labels: map[string]string{RunLabel: d.cfg.RunID}},
			Spec:       v1alpha1.SubnetSpec{IPv4: cidrs.next(prefix).String(), VNI: n.vni},
		}
		if _, err := d.kos.NetworkV1alpha1().Subnets(d.namespace).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating subnet %s: %w", n.subnet, err)
		}
		d.networks = append(d.networks, n)
	}
	fmt.Fprintf(d.cfg.Out, "kos-driver run %s: namespace %s, %d networks (VNIs %d-%d, sizes %s: %d attachments), %d nodes, %.1f ops/s %s over %d threads\n",
		d.cfg.RunID, d.namespace, len(d.networks), base, base+uint32(len(d.networks))-1, d.cfg.Sizes, d.totalSize(), len(d.nodes), d.cfg.Rate, d.cfg.Arrivals, d.cfg.Threads)
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, d.cfg.ReadyTimeout, true, func(ctx context.Context) (bool, error) {
		list, err := d.kos.NetworkV1alpha1().Subnets(d.namespace).List(ctx, metav1.ListOptions{LabelSelector: RunLabel + "=" + d.cfg.RunID})
		if err != nil {
			return false, nil
		}
		for _, s := range list.Items {
			if !s.Status.Validated {
				return false, nil
			}
		}
		return len(list.Items) == len(d.networks), nil
	})
}

func (d *Driver) totalSize() int {
	t := 0
	for _, n := range d.networks {
		t += n.size
	}
	return t
}

// prefixFor returns the prefix length of a subnet for size attachments,
// with room for churn (a deleted attachment's address is free only once
// its lock is gone) and the addresses IPAM does not give out.
func prefixFor(size int) int {
	p := 30
	for p > 8 && (1<<(32-p)) < 2*size+4 {
		p--
	}
	return p
}

// cidrAllocator hands out consecutive aligned blocks of 10.0.0.0/8,
// starting again at the beginning when it runs out (VNIs apart may
// overlap).
type cidrAllocator struct{ next32 uint64 }

func (c *cidrAllocator) next(prefix int) netip.Prefix {
	size := uint64(1) << (32 - prefix)
	start := (c.next32 + size - 1) / size * size
	if start+size > 1<<24 {
		start = 0
	}
	c.next32 = start + size
	v := uint32(10<<24) + uint32(start)
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), prefix)
}

// create creates an attachment on network n, on a random node.
func (d *Driver) create(ctx context.Context, n *network) {
	d.mu.Lock()
	d.seq++
	name := fmt.Sprintf("%s-a%d", n.subnet, d.seq)
	phase := d.phase
	var peers []string
	if d.cfg.Ping {
		// The latest ready attachments of the network.
		for i := len(n.live) - 1; i >= 0 && len(peers) < d.cfg.PingPeers; i-- {
			if r := d.records[n.live[i]]; r != nil && r.ready >= 0 && r.ipv4 != "" {
				peers = append(peers, r.ipv4)
			}
		}
	}
	r := &record{name: name, network: n, phase: phase, addressed: -1, ready: -1, tested: -1, errKinds: map[string]bool{}}
	r.node = d.nodes[d.intN(len(d.nodes))]
	d.records[name] = r
	d.order = append(d.order, r)
	n.live = append(n.live, name)
	d.mu.Unlock()

	att := &v1alpha1.NetworkAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{RunLabel: d.cfg.RunID}},
		Spec:       v1alpha1.NetworkAttachmentSpec{Node: r.node, Subnet: n.subnet},
	}
	if d.cfg.Ping {
		att.Spec.PostCreateExec = postCreateExec(d.cfg.Shell, n.prefix, peers)
		att.Spec.PostDeleteExec = postDeleteExec(d.cfg.Shell)
	}
	start := time.Now()
	_, err := d.kos.NetworkV1alpha1().NetworkAttachments(d.namespace).Create(ctx, att, metav1.CreateOptions{})
	dur := time.Since(start)
	d.metrics.operations.WithLabelValues("create", phase).Inc()
	d.mu.Lock()
	defer d.mu.Unlock()
	r.created, r.createDur = start, dur
	d.creates[phase]++
	if err != nil {
		d.errorLocked(r, ErrCreate, err.Error())
		r.deleted = true
		n.live = slices.DeleteFunc(n.live, func(s string) bool { return s == name })
		return
	}
	d.metrics.create.WithLabelValues(phase).Observe(dur.Seconds())
	d.metrics.live.Inc()
}

// pickVictim removes a random live attachment from its network and returns
// its name and network ("" when none is left). It picks among those done
// (ready, tested when tests run, or failed) when there are any, so that
// churn does not cut short the latencies it measures.
func (d *Driver) pickVictim() (string, *network) {
	d.mu.Lock()
	defer d.mu.Unlock()
	type victim struct {
		n *network
		i int
	}
	var done, any []victim
	for _, n := range d.networks {
		for i, name := range n.live {
			any = append(any, victim{n, i})
			if r := d.records[name]; r != nil && d.doneLocked(r) {
				done = append(done, victim{n, i})
			}
		}
	}
	if len(done) == 0 {
		done = any
	}
	if len(done) == 0 {
		return "", nil
	}
	v := done[d.intN(len(done))]
	name := v.n.live[v.i]
	v.n.live = slices.Delete(v.n.live, v.i, v.i+1)
	return name, v.n
}

// liveNames removes every live attachment from its network and returns
// their names.
func (d *Driver) liveNames() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var names []string
	for _, n := range d.networks {
		names = append(names, n.live...)
		n.live = nil
	}
	return names
}

// delete deletes attachment name, already out of its network's live list.
func (d *Driver) delete(ctx context.Context, name string) {
	d.mu.Lock()
	phase := d.phase
	r := d.records[name]
	d.mu.Unlock()
	start := time.Now()
	err := d.kos.NetworkV1alpha1().NetworkAttachments(d.namespace).Delete(ctx, name, metav1.DeleteOptions{})
	dur := time.Since(start)
	d.metrics.operations.WithLabelValues("delete", phase).Inc()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.deletes[phase]++
	if err != nil && !apierrors.IsNotFound(err) {
		d.errorLocked(r, ErrDelete, err.Error())
		return
	}
	r.deleted, r.deleteDur = true, dur
	d.metrics.delete.WithLabelValues(phase).Observe(dur.Seconds())
	d.metrics.live.Dec()
}

// errorLocked counts an error of a kind for r, once per kind.
func (d *Driver) errorLocked(r *record, kind, msg string) {
	if r.errKinds[kind] {
		return
	}
	r.errKinds[kind] = true
	r.errs = append(r.errs, kind+": "+msg)
	d.errCount[kind]++
	d.metrics.errors.WithLabelValues(kind).Inc()
	d.log.V(2).Info("Error", "attachment", r.name, "kind", kind, "message", msg)
}

// observe takes in what the informer says of an attachment.
func (d *Driver) observe(att *v1alpha1.NetworkAttachment) {
	d.mu.Lock()
	defer d.mu.Unlock()
	r := d.records[att.Name]
	if r == nil {
		return // created by an earlier driver of the same run ID, or its create call has not returned
	}
	writes := att.ExtendedMetadata.Writes
	spec, ok := writes.Time(v1alpha1.SectionSpec)
	if !ok {
		return
	}
	since := func(section string) (float64, bool) {
		t, ok := writes.Time(section)
		if !ok {
			return 0, false
		}
		return t.Sub(spec.Time).Seconds(), true
	}
	st := &att.Status
	if len(st.Errors.IPAM) > 0 {
		d.errorLocked(r, ErrAddress, st.Errors.IPAM[0])
	}
	if len(st.Errors.Host) > 0 {
		d.errorLocked(r, ErrHost, st.Errors.Host[0])
	}
	if st.IPv4 != "" && r.addressed < 0 {
		if s, ok := since(v1alpha1.SectionAddress); ok {
			r.addressed = s
			d.metrics.toAddress.WithLabelValues(r.phase).Observe(s)
		}
	}
	key := ""
	if st.IPv4 != "" {
		key = fmt.Sprintf("%d/%s", st.AddressVNI, st.IPv4)
	}
	r.ipv4 = st.IPv4
	if key != r.addrKey {
		d.releaseLocked(att.Name, r.addrKey)
		r.addrKey = key
		if key != "" {
			if holder, taken := d.holders[key]; taken && holder != att.Name {
				d.errorLocked(r, ErrDuplicate, fmt.Sprintf("address %s is also held by %s", key, holder))
				if h := d.records[holder]; h != nil {
					d.errorLocked(h, ErrDuplicate, fmt.Sprintf("address %s is also held by %s", key, att.Name))
				}
			} else {
				d.holders[key] = att.Name
			}
		}
	}
	if st.HostIP != "" && len(st.Errors.Host) == 0 && r.ready < 0 {
		if s, ok := since(v1alpha1.SectionImpl); ok {
			r.ready = s
			d.metrics.toReady.WithLabelValues(r.phase).Observe(s)
		}
	}
	if rep := st.PostCreateExecReport; rep != nil && r.tested < 0 && !r.hasErr(ErrTest) {
		if rep.ExitStatus != 0 {
			d.errorLocked(r, ErrTest, fmt.Sprintf("%q exited with status %d: %s", rep.Command, rep.ExitStatus, rep.StdErr))
		} else if s, ok := since(v1alpha1.SectionExecReport); ok {
			r.tested = s
			d.metrics.toTested.WithLabelValues(r.phase).Observe(s)
		}
	}
}

// forget takes in an attachment's deletion.
func (d *Driver) forget(att *v1alpha1.NetworkAttachment) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if r := d.records[att.Name]; r != nil {
		d.releaseLocked(att.Name, r.addrKey)
		r.addrKey = ""
	}
}

// releaseLocked forgets that name holds address key.
func (d *Driver) releaseLocked(name, key string) {
	if key != "" && d.holders[key] == name {
		delete(d.holders, key)
	}
}

// done reports whether r got as far as it will: ready, and tested when
// tests run, or failed.
func (d *Driver) doneLocked(r *record) bool {
	if len(r.errs) > 0 {
		return true
	}
	if r.ready < 0 {
		return false
	}
	return !d.cfg.Ping || r.tested >= 0
}

// waitSettled waits until every live attachment is done, or until the
// oldest undone one is ReadyTimeout old; then it counts the undone as
// timeouts.
func (d *Driver) waitSettled(ctx context.Context) error {
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
		d.mu.Lock()
		defer d.mu.Unlock()
		for _, r := range d.order {
			if !r.deleted && !d.doneLocked(r) && time.Since(r.created) < d.cfg.ReadyTimeout {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, r := range d.order {
		if !r.deleted && !d.doneLocked(r) {
			d.errorLocked(r, ErrTimeout, fmt.Sprintf("not done %s after its creation", d.cfg.ReadyTimeout))
		}
	}
	return nil
}

// progress prints a line every Progress period.
func (d *Driver) progress(ctx context.Context) {
	if d.cfg.Progress <= 0 {
		return
	}
	start := time.Now()
	ticker := time.NewTicker(d.cfg.Progress)
	defer ticker.Stop()
	lastCreates, lastDeletes := 0, 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		d.mu.Lock()
		creates, deletes, live, addressed, ready, tested, errs := 0, 0, 0, 0, 0, 0, 0
		for _, c := range d.creates {
			creates += c
		}
		for _, c := range d.deletes {
			deletes += c
		}
		for _, r := range d.order {
			if !r.deleted {
				live++
			}
			if r.addressed >= 0 {
				addressed++
			}
			if r.ready >= 0 {
				ready++
			}
			if r.tested >= 0 {
				tested++
			}
		}
		for _, c := range d.errCount {
			errs += c
		}
		phase, created := d.phase, len(d.order)
		d.mu.Unlock()
		period := d.cfg.Progress.Seconds()
		fmt.Fprintf(d.cfg.Out, "%6.1fs %-9s created %d, live %d, addressed %d, ready %d, tested %d, errors %d; %.1f creates/s, %.1f deletes/s\n",
			time.Since(start).Seconds(), phase, created, live, addressed, ready, tested, errs,
			float64(creates-lastCreates)/period, float64(deletes-lastDeletes)/period)
		lastCreates, lastDeletes = creates, deletes
	}
}

// cleanup deletes every attachment and subnet of the run and the namespace
// if the run made it, and waits until the attachments are gone (their
// agents ran their postDeleteExec by then, or will).
func (d *Driver) cleanup(ctx context.Context) error {
	if d.namespace == "" {
		return nil
	}
	sel := metav1.ListOptions{LabelSelector: RunLabel + "=" + d.cfg.RunID}
	atts := d.kos.NetworkV1alpha1().NetworkAttachments(d.namespace)
	var errs []error
	list, err := atts.List(ctx, sel)
	if err != nil {
		errs = append(errs, fmt.Errorf("listing the attachments left: %w", err))
	} else {
		for _, a := range list.Items {
			if err := atts.Delete(ctx, a.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("deleting attachment %s: %w", a.Name, err))
			}
		}
		if len(list.Items) > 0 {
			d.log.Info("Deleted the attachments left", "count", len(list.Items))
		}
	}
	if err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		l, err := atts.List(ctx, sel)
		return err == nil && len(l.Items) == 0, nil
	}); err != nil {
		errs = append(errs, fmt.Errorf("waiting for the attachments to go: %w", err))
	}
	subnets := d.kos.NetworkV1alpha1().Subnets(d.namespace)
	if sl, err := subnets.List(ctx, sel); err != nil {
		errs = append(errs, fmt.Errorf("listing the subnets: %w", err))
	} else {
		for _, s := range sl.Items {
			if err := subnets.Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("deleting subnet %s: %w", s.Name, err))
			}
		}
	}
	if d.createdNamespace {
		if err := d.kube.CoreV1().Namespaces().Delete(ctx, d.namespace, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting namespace %s: %w", d.namespace, err))
		}
	}
	return errors.Join(errs...)
}

// result gathers the run's figures.
func (d *Driver) result() *Result {
	d.mu.Lock()
	defer d.mu.Unlock()
	res := &Result{RunID: d.cfg.RunID, Namespace: d.namespace, Latencies: map[string][]float64{}, Errors: map[string]int{}, Records: len(d.order)}
	for _, p := range d.phaseTimes {
		res.Phases = append(res.Phases, PhaseResult{Name: p.name, Duration: p.dur, Creates: d.creates[p.name], Deletes: d.deletes[p.name]})
	}
	for _, k := range errorKinds {
		res.Errors[k] = d.errCount[k]
	}
	for _, r := range d.order {
		if !r.hasErr(ErrCreate) {
			res.Latencies[LatencyCreate] = append(res.Latencies[LatencyCreate], r.createDur.Seconds())
		}
		for name, v := range map[string]float64{LatencyAddressed: r.addressed, LatencyReady: r.ready, LatencyTested: r.tested} {
			if v >= 0 {
				res.Latencies[name] = append(res.Latencies[name], v)
			}
		}
		if r.deleted && r.deleteDur > 0 {
			res.Latencies[LatencyDelete] = append(res.Latencies[LatencyDelete], r.deleteDur.Seconds())
		}
	}
	for _, v := range res.Latencies {
		slices.Sort(v)
	}
	return res
}

// Names of the latencies in Result and the summary, in the summary's order.
const (
	LatencyCreate    = "create"
	LatencyAddressed = "create→addressed"
	LatencyReady     = "create→ready"
	LatencyTested    = "create→tested"
	LatencyDelete    = "delete"
)

var latencyNames = []string{LatencyCreate, LatencyAddressed, LatencyReady, LatencyTested, LatencyDelete}

// quantile returns the q-quantile of sorted values (nearest rank).
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
