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
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
