// Package controllermanager wires the KOS controllers into one process,
// kos-controller-manager: clients of the main cluster and of the KOS API,
// shared informers, Events, leader election on a Lease, and an HTTP server
// with Prometheus metrics and health checks. The controllers themselves live
// in components/controllers.
//
// Like kos-apiserver it goes Options → Complete → Validate → Config →
// Complete → New → Run, and NewCommand wraps those steps in a command.
package controllermanager

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/kos-sdn/kos/components/apis/multinetworkpolicy/v1beta1"
	"github.com/kos-sdn/kos/components/controllers/attachmentliveness"
	"github.com/kos-sdn/kos/components/controllers/ipam"
	"github.com/kos-sdn/kos/components/controllers/multinetworkpolicy"
	"github.com/kos-sdn/kos/components/controllers/networkconfig"
	"github.com/kos-sdn/kos/components/controllers/podnetwork"
	"github.com/kos-sdn/kos/components/controllers/subnetvalidator"
	"github.com/kos-sdn/kos/components/generated/clientset/versioned"
	kosscheme "github.com/kos-sdn/kos/components/generated/clientset/versioned/scheme"
	"github.com/kos-sdn/kos/components/generated/informers/externalversions"
	networkinformers "github.com/kos-sdn/kos/components/generated/informers/externalversions/network/v1alpha1"
	"github.com/kos-sdn/kos/components/monitoring"
)

// Component is the name the manager records Events and holds its Lease as.
const Component = "kos-controller-manager"

// Config is what a Manager needs. Build it with Options, or directly, and
// Complete it before New.
type Config struct {
	// Kube is the client configuration of the main cluster, which holds the
	// Events and the Lease.
	Kube *rest.Config
	// KOS is the client configuration of the KOS API: kos-apiserver itself,
	// or the main cluster's kube-apiserver, which proxies to it.
	KOS *rest.Config

	// SubnetValidatorWorkers and IPAMWorkers are how many subnets and
	// attachments are worked on at once; Complete makes 0 into 1.
	SubnetValidatorWorkers, IPAMWorkers int

	// AddressEvents records an Event on every attachment given an address,
	// not only on those that cannot get one.
	AddressEvents bool

	// PodNetworks runs the pod-network controller, which reads pods and
	// NetworkAttachmentDefinitions from the main cluster; PodNetworkWorkers
	// is how many pods it works on at once (Complete makes 0 into 1).
	PodNetworks       bool
	PodNetworkWorkers int

	// NetworkConfig runs the network configuration controller, which
	// creates and keeps the cluster's NetworkConfig and reads the Nodes of
	// the main cluster.
	NetworkConfig bool

	// MultiNetworkPolicy runs the MultiNetworkPolicy controller, which
	// reports on the policies in Events and publishes each network's model
	// per node as NodeNetworkPolicies. It reads MultiNetworkPolicies,
	// NetworkAttachmentDefinitions, pods and namespaces of the main
	// cluster; when the MultiNetworkPolicy CRD is not served the manager
	// says so once and runs the other controllers.
	MultiNetworkPolicy bool

	// AttachmentLiveness runs the attachment liveness controller: it reads
	// the agents' heartbeat Leases in AgentLeaseNamespace of the main
	// cluster and marks the Ready attachments of a node whose Lease went
	// unrenewed for its duration and AgentLeaseGrace Ready=Unknown.
	// Without the rights to list and watch those Leases (0.3.0's
	// manifests) the manager says so once and runs the other controllers.
	// Complete makes a zero AgentLeaseGrace attachmentliveness.DefaultGrace
	// and a zero AttachmentLivenessWorkers 1.
	AttachmentLiveness        bool
	AgentLeaseNamespace       string
	AgentLeaseGrace           time.Duration
	AttachmentLivenessWorkers int

	// ResyncPeriod makes the informers deliver every object again this
	// often; 0 means never.
	ResyncPeriod time.Duration

	// MetricsAddress is where /metrics, /healthz and /readyz are served,
	// such as ":9295"; "" serves nothing (Handler still works).
	MetricsAddress string

	// LeaderElection, when set, makes the controllers run only while this
	// process holds the Lease it names.
	LeaderElection *LeaderElection
}

// LeaderElection names the Lease the managers elect a leader with, and how
// quickly they fail over.
type LeaderElection struct {
	// Namespace and Name name the Lease.
	Namespace, Name string
	// Identity tells this process apart from the others; it must be unique.
	Identity string
	// LeaseDuration, RenewDeadline and RetryPeriod are as in client-go's
	// leaderelection package.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// CompletedConfig is a Config whose defaults are filled in; only Complete
// makes one, so New never runs on a half-set configuration.
type CompletedConfig struct {
	*completedConfig
}

type completedConfig struct {
	Config
}

// Complete fills in the defaults of c.
func (c Config) Complete() CompletedConfig {
	c.SubnetValidatorWorkers = max(c.SubnetValidatorWorkers, 1)
	c.IPAMWorkers = max(c.IPAMWorkers, 1)
	c.PodNetworkWorkers = max(c.PodNetworkWorkers, 1)
	c.AttachmentLivenessWorkers = max(c.AttachmentLivenessWorkers, 1)
	if c.AgentLeaseGrace <= 0 {
		c.AgentLeaseGrace = attachmentliveness.DefaultGrace
	}
	return CompletedConfig{&completedConfig{Config: c}}
}

// Manager runs the subnet validator, the IPAM controller and, when
// configured, the pod-network and the attachment liveness controllers.
type Manager struct {
	cfg      completedConfig
	kube     kubernetes.Interface
	dynamic  dynamic.Interface
	kos      versioned.Interface
	registry *prometheus.Registry
	handler  http.Handler

	validatedLatency, addressLatency prometheus.Histogram
	network                          *networkMetrics
	silentNodes                      prometheus.Gauge

	// running is true while the controllers run: the manager is ready.
	running atomic.Bool
	// watchdog fails /healthz when this process leads but lost its Lease.
	watchdog *leaderelection.HealthzAdaptor
}

// New returns a Manager of the configuration. It creates the clients and
// the metrics but starts nothing.
func (c CompletedConfig) New() (*Manager, error) {
	cfg := *c.completedConfig
	if cfg.Kube == nil || cfg.KOS == nil {
		return nil, errors.New("the client configurations of the main cluster and of the KOS API are both required")
	}
	kube, err := kubernetes.NewForConfig(rest.AddUserAgent(rest.CopyConfig(cfg.Kube), Component))
	if err != nil {
		return nil, fmt.Errorf("creating the main cluster's client: %w", err)
	}
	kos, err := versioned.NewForConfig(rest.AddUserAgent(rest.CopyConfig(cfg.KOS), Component))
	if err != nil {
		return nil, fmt.Errorf("creating the KOS API client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(rest.AddUserAgent(rest.CopyConfig(cfg.Kube), Component))
	if err != nil {
		return nil, fmt.Errorf("creating the main cluster's dynamic client: %w", err)
	}
	reg, validated, addressed, silent, err := newRegistry()
	if err != nil {
		return nil, fmt.Errorf("registering metrics: %w", err)
	}
	network := newNetworkMetrics()
	if err := network.register(reg); err != nil {
		return nil, fmt.Errorf("registering metrics: %w", err)
	}
	m := &Manager{
		cfg: cfg, kube: kube, dynamic: dyn, kos: kos, registry: reg,
		validatedLatency: validated, addressLatency: addressed, network: network, silentNodes: silent,
		watchdog: leaderelection.NewLeaderHealthzAdaptor(20 * time.Second),
	}
	m.handler = monitoring.Handler(reg,
		monitoring.Check{Path: "/healthz", Func: m.watchdog.Check, Code: http.StatusInternalServerError},
		// A manager waiting for the Lease is alive but not ready.
		monitoring.Check{Path: "/readyz", Func: func(*http.Request) error {
			if !m.running.Load() {
				return errors.New("the controllers are not running")
			}
			return nil
		}},
	)
	return m, nil
}

// Handler serves /metrics, /healthz and /readyz.
func (m *Manager) Handler() http.Handler { return m.handler }

// Run serves the metrics and runs the controllers, once elected when leader
// election is on, until ctx ends. Its goroutines stop when ctx ends or, with
// leader election, when the Lease is lost, which Run reports as an error: a
// process that lost its Lease must not go on. A failure to serve the
// metrics stops the controllers too.
func (m *Manager) Run(ctx context.Context) error {
	if m.cfg.MetricsAddress == "" {
		return m.run(ctx)
	}
	server, err := monitoring.Listen(m.cfg.MetricsAddress, m.handler)
	if err != nil {
		return err
	}
	klog.FromContext(ctx).Info("Serving metrics and health checks", "address", server.Addr())
	return server.ServeWhile(ctx, m.run)
}

// run runs the controllers, once elected when leader election is on, until
// ctx ends or the Lease is lost.
func (m *Manager) run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	le := m.cfg.LeaderElection
	if le == nil {
		return m.runControllers(ctx)
	}
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, le.Namespace, le.Name,
		m.kube.CoreV1(), m.kube.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: le.Identity})
	if err != nil {
		return fmt.Errorf("creating the lease lock: %w", err)
	}
	var runErr error
	lost := false
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:          lock,
		LeaseDuration: le.LeaseDuration,
		RenewDeadline: le.RenewDeadline,
		RetryPeriod:   le.RetryPeriod,
		WatchDog:      m.watchdog,
		Name:          Component,
		// The controllers have stopped when OnStartedLeading returns, so
		// handing the Lease over at once is safe.
		ReleaseOnCancel: true,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				logger.Info("Leading", "lease", klog.KRef(le.Namespace, le.Name), "identity", le.Identity)
				runErr = m.runControllers(ctx)
			},
			OnStoppedLeading: func() {
				if ctx.Err() == nil {
					lost = true
				}
				cancel()
			},
			OnNewLeader: func(identity string) {
				if identity != le.Identity {
					logger.Info("Another manager leads", "leader", identity)
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("creating the leader elector: %w", err)
	}
	elector.Run(ctx)
	if lost {
		runErr = errors.Join(runErr, fmt.Errorf("lost the lease %s/%s", le.Namespace, le.Name))
	}
	return runErr
}

// runControllers starts the informers and the controllers and returns when
// ctx ends and they all stopped.
func (m *Manager) runControllers(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(kosscheme.AddToScheme(scheme))
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartStructuredLogging(3)
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: m.kube.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(scheme, corev1.EventSource{Component: Component})

	factory := externalversions.NewSharedInformerFactory(m.kos, m.cfg.ResyncPeriod)
	network := factory.Network().V1alpha1()
	validator, err := subnetvalidator.NewController(m.kos, network.Subnets(), recorder,
		subnetvalidator.Options{ValidationLatency: m.validatedLatency})
	if err != nil {
		return err
	}
	addresses, err := ipam.NewController(m.kos, network.Subnets(), network.NetworkAttachments(), network.IPLocks(), recorder,
		ipam.Options{AddressLatency: m.addressLatency, AddressEvents: m.cfg.AddressEvents})
	if err != nil {
		return err
	}
	runs := []func() error{
		func() error { return validator.Run(ctx, m.cfg.SubnetValidatorWorkers) },
		func() error { return addresses.Run(ctx, m.cfg.IPAMWorkers) },
	}
	if m.cfg.NetworkConfig {
		// The node informer feeds this controller alone, which trims the
		// Nodes it holds to their name and underlay annotation.
		nodeFactory := kubeinformers.NewSharedInformerFactory(m.kube, m.cfg.ResyncPeriod)
		configs, err := networkconfig.NewController(m.kos, network.NetworkConfigs(), nodeFactory.Core().V1().Nodes(), network.NetworkAttachments(), recorder,
			networkconfig.Options{Metrics: m.network})
		if err != nil {
			return err
		}
		nodeFactory.Start(ctx.Done())
		defer nodeFactory.Shutdown()
		runs = append(runs, func() error { return configs.Run(ctx, 1) })
	}
	if m.cfg.PodNetworks {
		// The pod informer feeds this controller alone: it holds only the
		// pods that may want attachments, trimmed.
		kubeFactory := kubeinformers.NewSharedInformerFactoryWithOptions(m.kube, m.cfg.ResyncPeriod, podnetwork.PodInformerOptions()...)
		dynFactory := dynamicinformer.NewDynamicSharedInformerFactory(m.dynamic, m.cfg.ResyncPeriod)
		pods, err := podnetwork.NewController(m.kos, kubeFactory.Core().V1().Pods(),
			dynFactory.ForResource(podnetwork.NetworkAttachmentDefinitions), network.NetworkAttachments(), recorder)
		if err != nil {
			return err
		}
		kubeFactory.Start(ctx.Done())
		defer kubeFactory.Shutdown()
		dynFactory.Start(ctx.Done())
		defer dynFactory.Shutdown()
		runs = append(runs, func() error { return pods.Run(ctx, m.cfg.PodNetworkWorkers) })
	}
	if m.cfg.MultiNetworkPolicy {
		run, err := m.multiNetworkPolicy(ctx, network, recorder)
		if err != nil {
			return err
		}
		if run != nil {
			runs = append(runs, run)
		}
	}
	if m.cfg.AttachmentLiveness {
		run, err := m.attachmentLiveness(ctx, network.NetworkAttachments())
		if err != nil {
			return err
		}
		if run != nil {
			runs = append(runs, run)
		}
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()

	errs := make(chan error, len(runs))
	for _, run := range runs {
		go func() { errs <- run() }()
	}
	m.running.Store(true)
	defer m.running.Store(false)
	logger.Info("Running the controllers", "podNetworks", m.cfg.PodNetworks, "networkConfig", m.cfg.NetworkConfig, "attachmentLiveness", m.cfg.AttachmentLiveness,
		"multiNetworkPolicy", m.cfg.MultiNetworkPolicy)
	var all []error
	for range runs {
		if err := <-errs; err != nil && ctx.Err() == nil {
			all = append(all, err)
		}
	}
	return errors.Join(all...)
}

// attachmentLiveness returns how to run the attachment liveness controller
// on an informer of its own for the agents' Leases, which it starts and
// stops with ctx; or nil when the manager may not list and watch those
// Leases, as with 0.3.0's manifests, which it logs: without the controller
// attachments are as before, Ready until their agent says otherwise. A
// failure to ask is logged, and the controller runs.
func (m *Manager) attachmentLiveness(ctx context.Context, attachments networkinformers.NetworkAttachmentInformer) (func() error, error) {
	logger := klog.FromContext(ctx)
	ns := m.cfg.AgentLeaseNamespace
	for _, verb := range []string{"list", "watch"} {
		review, err := m.kube.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: ns, Verb: verb, Group: coordinationv1.GroupName, Resource: "leases",
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			// Not a reason to run no controller at all: assume the
			// rights, as the manifests since 0.4.0 give them.
			logger.Error(err, "Could not ask whether the manager may read the agents' Leases; running the attachment liveness controller", "namespace", ns, "verb", verb)
			break
		}
		if !review.Status.Allowed {
			logger.Info("Not running the attachment liveness controller: the manager may not read the agents' Leases; the manifests need list and watch on leases in their namespace",
				"namespace", ns, "verb", verb, "reason", review.Status.Reason)
			return nil, nil
		}
	}
	factory := kubeinformers.NewSharedInformerFactoryWithOptions(m.kube, m.cfg.ResyncPeriod, kubeinformers.WithNamespace(ns))
	c, err := attachmentliveness.NewController(m.kos, factory.Coordination().V1().Leases(), ns, attachments,
		attachmentliveness.Options{Grace: m.cfg.AgentLeaseGrace, SilentNodes: m.silentNodes})
	if err != nil {
		return nil, err
	}
	return func() error {
		factory.Start(ctx.Done())
		defer factory.Shutdown()
		return c.Run(ctx, m.cfg.AttachmentLivenessWorkers)
	}, nil
}

// multiNetworkPolicy returns how to run the MultiNetworkPolicy controller on
// informers of its own (a dynamic informer of a resource that is not served
// never syncs, and the pod informer keeps what the pod-network
// controller's trims away), which it starts and stops with ctx; or nil when
// the main cluster does not serve the MultiNetworkPolicy CRD, which it
// logs.
func (m *Manager) multiNetworkPolicy(ctx context.Context, network networkinformers.Interface, recorder record.EventRecorder) (func() error, error) {
	gv := v1beta1.MultiNetworkPolicies.GroupVersion().String()
	resources, err := m.kube.Discovery().ServerResourcesForGroupVersion(gv)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("reading whether the main cluster serves %s: %w", gv, err)
	}
	served := false
	if resources != nil {
		for _, r := range resources.APIResources {
			served = served || r.Name == v1beta1.MultiNetworkPolicies.Resource
		}
	}
	if !served {
		klog.FromContext(ctx).Info("Not running the MultiNetworkPolicy controller: the main cluster does not serve the MultiNetworkPolicy CRD", "groupVersion", gv)
		return nil, nil
	}
	kubeFactory := kubeinformers.NewSharedInformerFactoryWithOptions(m.kube, m.cfg.ResyncPeriod, multinetworkpolicy.PodInformerOptions()...)
	dynFactory := dynamicinformer.NewDynamicSharedInformerFactory(m.dynamic, m.cfg.ResyncPeriod)
	c, err := multinetworkpolicy.NewController(dynFactory.ForResource(v1beta1.MultiNetworkPolicies), dynFactory.ForResource(podnetwork.NetworkAttachmentDefinitions),
		kubeFactory.Core().V1().Pods(), kubeFactory.Core().V1().Namespaces(), network.Subnets(), network.NetworkAttachments(), recorder,
		multinetworkpolicy.Options{Publish: m.kos, NodePolicies: network.NodeNetworkPolicies()})
	if err != nil {
		return nil, err
	}
	return func() error {
		kubeFactory.Start(ctx.Done())
		defer kubeFactory.Shutdown()
		dynFactory.Start(ctx.Done())
		defer dynFactory.Shutdown()
		return c.Run(ctx, 2)
	}, nil
}
