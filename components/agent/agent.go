package agent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/kos-sdn/kos/components/agent/cniserver"
	"github.com/kos-sdn/kos/components/agent/exechook"
	"github.com/kos-sdn/kos/components/agent/policy"
	"github.com/kos-sdn/kos/components/agent/probe"
	networkapi "github.com/kos-sdn/kos/components/apis/network"
	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/fabric"
	kosclient "github.com/kos-sdn/kos/components/generated/clientset/versioned"
	kosinformers "github.com/kos-sdn/kos/components/generated/informers/externalversions/network/v1alpha1"
)

// Defaults for Config.
const (
	DefaultFlowCheckPeriod = 5 * time.Second
	DefaultReconcilePeriod = 2 * time.Minute
	DefaultExecTimeout     = 30 * time.Second
	DefaultExecWorkers     = 2
)

// Config is what an Agent needs.
type Config struct {
	// NodeName is the node the agent serves: the spec.node of its local
	// attachments.
	NodeName string
	// HostIP is the node's address on the underlay: where other nodes
	// tunnel traffic for this node's attachments. It goes into the
	// status.hostIP of each local attachment.
	HostIP netip.Addr
	// Client reaches the KOS API.
	Client kosclient.Interface
	// Fabric is the node's switch.
	Fabric fabric.Interface
	// Recorder records Events about local attachments; nil records none.
	Recorder record.EventRecorder
	// Registerer is where the agent's metrics are registered; nil
	// registers them nowhere.
	Registerer prometheus.Registerer
	// AllowedPrograms are the absolute paths of the programs that
	// postCreateExec and postDeleteExec may run; none when empty.
	AllowedPrograms []string
	// FlowCheckPeriod is how often the agent asks the fabric whether its
	// flows were lost (as when ovs-vswitchd restarts), which triggers a
	// full reconcile. DefaultFlowCheckPeriod when zero.
	FlowCheckPeriod time.Duration
	// ReconcilePeriod is how often a full reconcile repairs drift even when
	// no flows were lost. DefaultReconcilePeriod when zero.
	ReconcilePeriod time.Duration
	// ExecTimeout bounds each postCreateExec and postDeleteExec command.
	// DefaultExecTimeout when zero.
	ExecTimeout time.Duration
	// ExecRules allow commands by program and argument patterns, besides
	// AllowedPrograms (see exechook.LoadAllowFile).
	ExecRules []exechook.Rule
	// ExecWorkers is how many postCreateExec and postDeleteExec commands
	// may run at once. DefaultExecWorkers when zero.
	ExecWorkers int
	// NetworkConfig makes the agent give new interfaces the overlay MTU
	// that the NetworkConfig "cluster" applies (its status.overlayMTU),
	// in place of the fabric's own, as soon as it reads one; it keeps the
	// fabric's when it may not read the NetworkConfig.
	NetworkConfig bool
	// GivenMTU is the MTU the operator gave (--mtu), 0 for none: the agent
	// warns when it differs from the NetworkConfig's.
	GivenMTU int
	// UnderlayMTU is the MTU of the node's underlay, 0 when unknown.
	UnderlayMTU int
	// Nodes, when set with UnderlayMTU, is where the agent reports the
	// underlay's MTU on its Node (v1alpha1.UnderlayMTUAnnotation).
	Nodes NodePatcher
	// Policy makes the agent enforce the NodeNetworkPolicies of its node
	// (package policy); when it may not list them it logs that once and
	// enforces none.
	Policy bool
	// CNI configures the CNI server that plugs pods' interfaces for
	// kos-cni; none runs when CNI.Socket is empty.
	CNI cniserver.Config
}

// addressIndex indexes attachments by the address they hold (address.String).
const addressIndex = "address"

// Agent is the node agent: it keeps the node's fabric in line with the
// attachments of this node and with those of the other nodes in the same
// virtual networks, and reports each local attachment's interface in its
// status.
//
// It watches its local attachments with one informer (spec.node) and, for
// each relevant network, the attachments of that network with one more
// (status.addressVNI, and only those with a status.hostIP), started when
// the network gains its first local
// attachment and stopped when it loses its last. Handlers only enqueue
// attachment keys; workers sync one key at a time (sync.go).
type Agent struct {
	node     string
	hostIP   netip.Addr
	client   kosclient.Interface
	fabric   fabric.Interface
	recorder record.EventRecorder
	metrics  *metrics
	exec     execHook
	// hooks bounds how many postCreateExec and postDeleteExec commands run
	// at once; they run off the workers (runHook), so a slow command never
	// holds up the fabric work of other attachments.
	hooks chan struct{}

	flowCheckPeriod time.Duration
	reconcilePeriod time.Duration
	cni             cniserver.Config
	// netConfig applies the NetworkConfig's MTU, when Config asks.
	netConfig   *networkConfig
	nodes       NodePatcher
	underlayMTU int
	// cniSrv is the CNI server, when cni names a socket.
	cniSrv *cniserver.Server
	// policy enforces the node's NodeNetworkPolicies, when Config asks.
	policy *policy.Enforcer
	// probes are the connectivity probes of `kubectl kos check` on local
	// attachments (status.go), which Run removes as it stops.
	probes *probe.Manager

	queue workqueue.TypedRateLimitingInterface[string]

	localInformer cache.SharedIndexInformer

	// The agent's locks, in the order they are taken: a goroutine holding
	// one may take only those after it.
	//
	//  1. fabricMu is held for reading while a worker changes the fabric
	//     and for writing by a full reconcile, which needs the fabric to
	//     itself.
	//  2. addrLocks serialise the fabric operations on one address, which
	//     two attachments may claim at once; a worker or a CNI plug takes
	//     one (and only one) while it holds fabricMu for reading. Each
	//     address has a lock of its own: a plug holds it until its port
	//     and flows are in, and pods' plugs must not wait for each other.
	//  3. The mutexes inside state and health, which only their own
	//     methods take, each for a moment and without taking another.
	fabricMu  sync.RWMutex
	addrLocks addressLocks

	// state is what the agent remembers between syncs.
	state *state
	// health is what /healthz reports.
	health health
	// lastReconcile is what /debug/status reports of the last full
	// reconcile (status.go).
	lastReconcile reconcileRecord
}

// localRecord is what the agent remembers of a local attachment whose
// interface it created.
type localRecord struct {
	uid            string
	postDeleteExec []string
	vars           exechook.Vars
}

// execHook runs attachments' postCreateExec and postDeleteExec commands;
// exechook.Policy is the real one.
type execHook interface {
	// Check returns an error unless command may run.
	Check(command []string, vars exechook.Vars) error
	// Run runs command, if it may, and reports the run.
	Run(ctx context.Context, command []string, vars exechook.Vars) *v1alpha1.ExecReport
	// Result classifies a run: exechook.ResultOK, ResultFailed or
	// ResultRefused.
	Result(command []string, vars exechook.Vars, r *v1alpha1.ExecReport) string
}

// New returns an agent for cfg. It starts nothing: call Run.
func New(cfg Config) (*Agent, error) {
	var errs []error
	if cfg.NodeName == "" {
		errs = append(errs, errors.New("no node name"))
	}
	if !cfg.HostIP.Is4() {
		errs = append(errs, fmt.Errorf("host IP %v is not an IPv4 address", cfg.HostIP))
	}
	if cfg.Client == nil {
		errs = append(errs, errors.New("no KOS API client"))
	}
	if cfg.Fabric == nil {
		errs = append(errs, errors.New("no fabric"))
	}
	hook, err := exechook.NewPolicy(cfg.AllowedPrograms, cfg.ExecRules, orDefault(cfg.ExecTimeout, DefaultExecTimeout))
	if err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer, cfg.Fabric)
	if err != nil {
		return nil, fmt.Errorf("registering metrics: %w", err)
	}
	a := &Agent{
		node:            cfg.NodeName,
		hostIP:          cfg.HostIP,
		client:          cfg.Client,
		fabric:          cfg.Fabric,
		recorder:        cfg.Recorder,
		metrics:         m,
		exec:            hook,
		hooks:           make(chan struct{}, orDefault(cfg.ExecWorkers, DefaultExecWorkers)),
		flowCheckPeriod: orDefault(cfg.FlowCheckPeriod, DefaultFlowCheckPeriod),
		reconcilePeriod: orDefault(cfg.ReconcilePeriod, DefaultReconcilePeriod),
		cni:             cfg.CNI,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "kos-agent"},
		),
		nodes:       cfg.Nodes,
		underlayMTU: cfg.UnderlayMTU,
		// The switch's ports live where the host ends of pods' veths go.
		probes: probe.NewManager(cfg.CNI.HostNetns),
	}
	if cfg.NetworkConfig {
		a.netConfig = newNetworkConfig(cfg, m)
	}
	m.observeMTU(cfg.UnderlayMTU, cfg.Fabric.MTU())
	if cfg.Policy {
		if a.policy, err = policy.New(policy.Config{Node: cfg.NodeName, Client: cfg.Client, Switch: cfg.Fabric, Registerer: cfg.Registerer}); err != nil {
			return nil, err
		}
	}
	a.state = newState(m, a.newNetworkInformer)
	if a.cni.Socket != "" {
		a.cniSrv = a.cniServer()
	}
	if a.recorder == nil {
		// A FakeRecorder without a channel drops every event.
		a.recorder = &record.FakeRecorder{}
	}
	nodeSelector := fields.OneTermEqualSelector(v1alpha1.FieldNode, a.node).String()
	a.localInformer = kosinformers.NewFilteredNetworkAttachmentInformer(listingClient{a.client}, metav1.NamespaceAll, 0,
		cache.Indexers{addressIndex: indexByAddress, cache.NamespaceIndex: cache.MetaNamespaceIndexFunc},
		func(o *metav1.ListOptions) { o.FieldSelector = nodeSelector })
	if _, err := a.localInformer.AddEventHandler(a.handler(informerLocal, nil)); err != nil {
		return nil, fmt.Errorf("watching local attachments: %w", err)
	}
	return a, nil
}

// MTU returns the MTU of the interfaces the agent makes for local
// attachments, as its fabric makes them, and reports in their status.mtu;
// 0 when the fabric leaves it to the switch.
func (a *Agent) MTU() int { return a.fabric.MTU() }

func orDefault[T time.Duration | int](d, def T) T {
	if d <= 0 {
		return def
	}
	return d
}

// handler returns the event handler of an informer: it counts the
// notification and enqueues the attachment's key when keep (if any) says
// the attachment matters to that informer.
func (a *Agent) handler(informer string, keep func(*v1alpha1.NetworkAttachment) bool) cache.ResourceEventHandler {
	enqueue := func(event string, obj any) {
		a.metrics.notifications.WithLabelValues(informer, event).Inc()
		if keep != nil {
			att, ok := obj.(*v1alpha1.NetworkAttachment)
			if !ok {
				if tomb, isTomb := obj.(cache.DeletedFinalStateUnknown); isTomb {
					att, ok = tomb.Obj.(*v1alpha1.NetworkAttachment)
				}
			}
			if ok && !keep(att) {
				return
			}
		}
		key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
		if err != nil {
			utilruntime.HandleError(err)
			return
		}
		a.queue.Add(key)
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { enqueue("add", obj) },
		UpdateFunc: func(_, obj any) { enqueue("update", obj) },
		DeleteFunc: func(obj any) { enqueue("delete", obj) },
	}
}

// indexByAddress indexes an attachment by the address IPAM gave it.
func indexByAddress(obj any) ([]string, error) {
	att, ok := obj.(*v1alpha1.NetworkAttachment)
	if !ok {
		return nil, nil
	}
	if addr, ok := addressOf(att); ok {
		return []string{addr.String()}, nil
	}
	return nil, nil
}

// addressOf returns the address IPAM gave an attachment, if it has a valid
// one.
func addressOf(att *v1alpha1.NetworkAttachment) (address, bool) {
	vni := att.Status.AddressVNI
	if vni < networkapi.MinVNI || vni > networkapi.MaxVNI || att.Status.IPv4 == "" {
		return address{}, false
	}
	ip, err := netip.ParseAddr(att.Status.IPv4)
	if err != nil || !ip.Is4() {
		return address{}, false
	}
	return address{vni: vni, ip: ip}, true
}

// Run runs the agent until ctx is done. It starts the informers, waits
// for their caches, reconciles the fabric (retrying until that succeeds),
// then starts workers that sync attachments and a loop that checks the
// fabric for lost flows and reconciles it periodically. When ctx is done
// it shuts the queue down, waits for the workers and the loop to return,
// removes the fabric's tunnel filter, and stops the informers; every
// goroutine it started has stopped when it returns. It never gives up on
// its own, retrying what fails instead, so it returns nil. Run may be
// called once.
func (a *Agent) Run(ctx context.Context, workers int) error {
	defer utilruntime.HandleCrash()
	logger := klog.FromContext(ctx).WithValues("node", a.node)
	ctx = klog.NewContext(ctx, logger)
	logger.Info("Starting the agent", "hostIP", a.hostIP, "mtu", a.MTU(), "workers", workers)

	var wg sync.WaitGroup
	defer a.state.stopNetworks()
	// A probe's namespace would go with the process; its interface goes
	// back where the agent made it.
	defer a.probes.StopAll(ctx)
	if _, err := a.localInformer.AddEventHandler(a.probeHandler(ctx)); err != nil {
		return fmt.Errorf("watching local attachments for probes: %w", err)
	}
	// Once nothing changes the fabric any more (after wg.Wait).
	defer a.removeTunnelFilter(logger)
	defer wg.Wait()
	defer a.queue.ShutDown()

	a.startNetworkConfig(ctx, &wg)
	if a.policy != nil {
		wg.Go(func() { _ = a.policy.Run(ctx, 2) })
	}
	wg.Go(func() { a.localInformer.RunWithContext(ctx) })
	if !cache.WaitForNamedCacheSyncWithContext(ctx, a.localInformer.HasSynced) {
		return nil // ctx ended: only that stops the wait
	}
	// The networks of the local attachments must be watched, and their
	// caches full, before the first reconcile can tell orphans.
	for _, obj := range a.localInformer.GetStore().List() {
		att := obj.(*v1alpha1.NetworkAttachment)
		addr, ok := addressOf(att)
		a.setRelevance(ctx, keyOf(att), network{att.Namespace, addr.vni}, ok)
	}
	if !cache.WaitForNamedCacheSyncWithContext(ctx, a.state.networksSynced) {
		return nil
	}

	var deferred bool
	for {
		var ok bool
		if ok, deferred = a.reconcileFabric(ctx, reconcileStart); ok {
			break
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(a.flowCheckPeriod):
		}
	}
	a.health.setReady()

	for range workers {
		wg.Go(func() { wait.UntilWithContext(ctx, a.runWorker, time.Second) })
	}
	wg.Go(func() { a.checkFabric(ctx, deferred) })
	if a.cniSrv != nil {
		wg.Go(func() { a.cniSrv.Run(ctx) })
	}
	logger.Info("Agent started")
	<-ctx.Done()
	logger.Info("Stopping the agent")
	return nil
}

func keyOf(att *v1alpha1.NetworkAttachment) string {
	return att.Namespace + "/" + att.Name
}

// setRelevance records the network of a local attachment (in is false when
// it has none), starting and stopping network informers on ctx as networks
// become relevant or irrelevant; ctx must last as long as Run. The
// attachments a stopped informer leaves behind are enqueued.
func (a *Agent) setRelevance(ctx context.Context, key string, n network, in bool) {
	for _, orphan := range a.state.setRelevance(ctx, key, n, in) {
		a.queue.Add(orphan)
	}
}

// newNetworkInformer returns an informer, not yet running, on the
// attachments of network n, whose handler enqueues those of other nodes.
//
// The server sends it only the network's attachments that have a host: one
// without (its agent has not made its interface yet) has nothing for this
// node's switch, and most attachments spend a moment so, between IPAM's
// address write and their agent's status write, which the agents of the
// network need not hear of. An attachment that loses its host leaves the
// informer's view, as a deleted one does, and its flows go.
func (a *Agent) newNetworkInformer(n network) (cache.SharedIndexInformer, error) {
	selector := networkSelector(n.vni)
	inf := kosinformers.NewFilteredNetworkAttachmentInformer(listingClient{a.client}, n.namespace, 0,
		cache.Indexers{addressIndex: indexByAddress},
		func(o *metav1.ListOptions) { o.FieldSelector = selector })
	// The local informer enqueues this node's attachments already.
	remoteOnly := func(att *v1alpha1.NetworkAttachment) bool { return att.Spec.Node != a.node }
	if _, err := inf.AddEventHandler(a.handler(informerNetwork, remoteOnly)); err != nil {
		return nil, err
	}
	return inf, nil
}

// listingClient is the KOS client of the agent's informers: they list and
// then watch, instead of streaming their initial state in the watch
// (client-go's WatchListClient). kos-apiserver answers a list by node or
// network from an index of its watch cache, but builds a streamed initial
// state by testing every attachment of its cache against the selector, so
// that each network an agent starts watching would cost the server work in
// proportion to all attachments rather than to the network's.
type listingClient struct{ kosclient.Interface }

// IsWatchListSemanticsUnSupported tells client-go's reflector to list.
func (listingClient) IsWatchListSemanticsUnSupported() bool { return true }

// networkSelector is the field selector of the attachments of VNI vni that
// have a host.
func networkSelector(vni uint32) string {
	return fields.AndSelectors(
		fields.OneTermEqualSelector(v1alpha1.FieldAddressVNI, fmt.Sprint(vni)),
		fields.OneTermNotEqualSelector(v1alpha1.FieldHostIP, ""),
	).String()
}

func namespaceOf(key string) string {
	ns, _, _ := cache.SplitMetaNamespaceKey(key)
	return ns
}

// runWorker syncs keys from the queue until it shuts down.
func (a *Agent) runWorker(ctx context.Context) {
	for a.processNextItem(ctx) {
	}
}

func (a *Agent) processNextItem(ctx context.Context) bool {
	key, shutdown := a.queue.Get()
	if shutdown {
		return false
	}
	defer a.queue.Done(key)
	if err := a.sync(ctx, key); err != nil {
		utilruntime.HandleErrorWithContext(ctx, err, "Syncing an attachment failed; will retry", "key", key)
		a.queue.AddRateLimited(key)
		return true
	}
	a.queue.Forget(key)
	return true
}

// addressLocks are locks by address, each made when first taken and
// dropped when its last holder or waiter lets go.
type addressLocks struct {
	mu    sync.Mutex
	locks map[address]*addressLock
}

type addressLock struct {
	sync.Mutex
	// users are the goroutines that hold or wait for it; addressLocks.mu
	// guards it.
	users int
}

// lock takes the lock of an address and returns what releases it.
func (l *addressLocks) lock(addr address) (unlock func()) {
	l.mu.Lock()
	if l.locks == nil {
		l.locks = map[address]*addressLock{}
	}
	al := l.locks[addr]
	if al == nil {
		al = &addressLock{}
		l.locks[addr] = al
	}
	al.users++
	l.mu.Unlock()
	al.Lock()
	return func() {
		al.Unlock()
		l.mu.Lock()
		if al.users--; al.users == 0 {
			delete(l.locks, addr)
		}
		l.mu.Unlock()
	}
}

// Healthy returns nil when the agent is working: its first reconcile is
// done and its last check of the fabric succeeded recently.
func (a *Agent) Healthy() error {
	return a.health.err(a.flowCheckPeriod)
}

// Live returns nil unless the agent is stuck in a way a restart may
// repair: once its first reconcile is done, its last check of the fabric
// failed or is overdue. Before that it is live however long the KOS API
// takes to answer.
func (a *Agent) Live() error {
	return a.health.liveErr(a.flowCheckPeriod)
}
