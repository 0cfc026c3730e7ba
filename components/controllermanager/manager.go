// Package controllermanager wires the KOS controllers into one process,
// kos-controller-manager: clients of the main cluster and of the KOS API,
// shared informers, Events, leader election on a Lease, and an HTTP server
// with Prometheus metrics and health checks. The controllers themselves live
// in components/controllers.
package controllermanager

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/kos-sdn/kos/components/controllers/ipam"
	"github.com/kos-sdn/kos/components/controllers/subnetvalidator"
	"github.com/kos-sdn/kos/components/generated/clientset/versioned"
	kosscheme "github.com/kos-sdn/kos/components/generated/clientset/versioned/scheme"
	"github.com/kos-sdn/kos/components/generated/informers/externalversions"
)

// Component is the name the manager records Events and holds its Lease as.
const Component = "kos-controller-manager"

// Config is what a Manager needs. Build it with Options, or directly.
type Config struct {
	// Kube is the client configuration of the main cluster, which holds the
	// Events and the Lease.
	Kube *rest.Config
	// KOS is the client configuration of the KOS API: kos-apiserver itself,
	// or the main cluster's kube-apiserver, which proxies to it.
	KOS *rest.Config

	// SubnetValidatorWorkers and IPAMWorkers are how many subnets and
	// attachments are worked on at once; 0 means 1.
	SubnetValidatorWorkers, IPAMWorkers int

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

// Manager runs the subnet validator and the IPAM controller.
type Manager struct {
	cfg      Config
	kube     kubernetes.Interface
	kos      versioned.Interface
	registry *prometheus.Registry
	handler  http.Handler

	validatedLatency, addressLatency prometheus.Histogram

	// running is true while the controllers run: the manager is ready.
	running atomic.Bool
	// watchdog fails /healthz when this process leads but lost its Lease.
	watchdog *leaderelection.HealthzAdaptor
}

// New returns a Manager for cfg. It creates the clients and the metrics but
// starts nothing.
func New(cfg Config) (*Manager, error) {
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
	reg, validated, addressed, err := newRegistry()
	if err != nil {
		return nil, fmt.Errorf("registering metrics: %w", err)
	}
	m := &Manager{
		cfg: cfg, kube: kube, kos: kos, registry: reg,
		validatedLatency: validated, addressLatency: addressed,
		watchdog: leaderelection.NewLeaderHealthzAdaptor(20 * time.Second),
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", m.healthz)
	mux.HandleFunc("/readyz", m.readyz)
	m.handler = mux
	return m, nil
}

// Handler serves /metrics, /healthz and /readyz.
func (m *Manager) Handler() http.Handler { return m.handler }

func (m *Manager) healthz(w http.ResponseWriter, r *http.Request) {
	if err := m.watchdog.Check(r); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	fmt.Fprintln(w, "ok")
}

// readyz succeeds once the controllers run; a manager waiting for the
// Lease is alive but not ready.
func (m *Manager) readyz(w http.ResponseWriter, _ *http.Request) {
	if !m.running.Load() {
		http.Error(w, "the controllers are not running", http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ok")
}

// Run serves the metrics and runs the controllers, once elected when leader
// election is on, until ctx ends. Its goroutines stop when ctx ends or, with
// leader election, when the Lease is lost, which Run reports as an error: a
// process that lost its Lease must not go on.
func (m *Manager) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	serveErr := make(chan error, 1)
	if m.cfg.MetricsAddress != "" {
		l, err := net.Listen("tcp", m.cfg.MetricsAddress)
		if err != nil {
			return fmt.Errorf("listening for metrics: %w", err)
		}
		srv := &http.Server{Handler: m.handler, ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				serveErr <- fmt.Errorf("serving metrics: %w", err)
				cancel()
			}
		}()
		go func() {
			<-ctx.Done()
			shutdownCtx, done := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer done()
			_ = srv.Shutdown(shutdownCtx)
		}()
		logger.Info("Serving metrics and health checks", "address", l.Addr().String())
	}

	le := m.cfg.LeaderElection
	if le == nil {
		err := m.runControllers(ctx)
		return errors.Join(err, drain(serveErr))
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
	return errors.Join(runErr, drain(serveErr))
}

func drain(errs <-chan error) error {
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// runControllers starts the informers and both controllers and returns when
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
		ipam.Options{AddressLatency: m.addressLatency})
	if err != nil {
		return err
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()

	errs := make(chan error, 2)
	go func() { errs <- validator.Run(ctx, max(m.cfg.SubnetValidatorWorkers, 1)) }()
	go func() { errs <- addresses.Run(ctx, max(m.cfg.IPAMWorkers, 1)) }()
	m.running.Store(true)
	defer m.running.Store(false)
	logger.Info("Running the controllers")
	var all []error
	for range 2 {
		if err := <-errs; err != nil && ctx.Err() == nil {
			all = append(all, err)
		}
	}
	return errors.Join(all...)
}
