package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/kos-sdn/kos/components/agent/debugserver"
	kosclient "github.com/kos-sdn/kos/components/generated/clientset/versioned"
	kosscheme "github.com/kos-sdn/kos/components/generated/clientset/versioned/scheme"
	"github.com/kos-sdn/kos/components/monitoring"
)

// ServerConfig is the configuration of kos-agent: the agent and what serves
// it. Build it with Options, or directly, and Complete it before New.
type ServerConfig struct {
	// Main is the client configuration of the main cluster, which holds
	// the Events.
	Main *rest.Config
	// KOS is the client configuration of the KOS API: kos-apiserver
	// itself, or the main cluster's kube-apiserver, which proxies to it.
	KOS *rest.Config
	// Agent configures the agent; New fills in its Client, Recorder,
	// Registerer and Nodes.
	Agent Config
	// Workers is how many attachments the agent syncs at once; Complete
	// makes 0 into 1.
	Workers int
	// MetricsBindAddress is where /metrics, /livez, /readyz and /healthz
	// are served.
	MetricsBindAddress string
	// DebugBindAddress is where the debug endpoints are served (package
	// debugserver); nowhere when empty.
	DebugBindAddress string
	// DebugLoopbackOnly serves them on loopback only, without checking
	// identity.
	DebugLoopbackOnly bool
}

// CompletedServerConfig is a ServerConfig whose defaults are filled in;
// only Complete makes one, so New never runs on a half-set configuration.
type CompletedServerConfig struct {
	*completedServerConfig
}

type completedServerConfig struct {
	ServerConfig
}

// Complete fills in the defaults of c.
func (c ServerConfig) Complete() CompletedServerConfig {
	c.Workers = max(c.Workers, 1)
	return CompletedServerConfig{&completedServerConfig{ServerConfig: c}}
}

// Server is a kos-agent ready to run: the agent, its metrics, debug
// endpoints and Events.
type Server struct {
	agent              *Agent
	workers            int
	handler            http.Handler
	metricsBindAddress string
	debug              *debugserver.Server
	kube               kubernetes.Interface
	broadcaster        record.EventBroadcaster
}

// New builds the server: the clients, the Event recorder, the metrics and
// the agent, and binds the debug endpoints' address. It starts nothing.
func (c CompletedServerConfig) New() (*Server, error) {
	if c.Main == nil || c.KOS == nil {
		return nil, errors.New("the client configurations of the main cluster and of the KOS API are both required")
	}
	kube, err := kubernetes.NewForConfig(c.Main)
	if err != nil {
		return nil, fmt.Errorf("creating the main cluster's client: %w", err)
	}
	kos, err := kosclient.NewForConfig(c.KOS)
	if err != nil {
		return nil, fmt.Errorf("creating the KOS API's client: %w", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Run starts the broadcaster's delivery to the main cluster; Events
	// recorded before that have no watcher and are dropped.
	broadcaster := record.NewBroadcaster()
	cfg := c.Agent
	cfg.Client = kos
	cfg.Recorder = broadcaster.NewRecorder(kosscheme.Scheme, corev1.EventSource{Component: "kos-agent", Host: cfg.NodeName})
	cfg.Registerer = reg
	cfg.Nodes = kube.CoreV1().Nodes()
	a, err := New(cfg)
	if err != nil {
		broadcaster.Shutdown()
		return nil, err
	}
	var debug *debugserver.Server
	if c.DebugBindAddress != "" {
		debug, err = debugserver.New(debugserver.Config{
			BindAddress:  c.DebugBindAddress,
			LoopbackOnly: c.DebugLoopbackOnly,
			NodeName:     cfg.NodeName,
			Kube:         kube,
		}, a.DebugHandler())
		if err != nil {
			broadcaster.Shutdown()
			return nil, err
		}
	}
	return &Server{
		agent:   a,
		workers: c.Workers,
		handler: monitoring.Handler(reg,
			// A startup and a liveness probe ask /livez, a readiness
			// probe /readyz; /healthz is /readyz for the probes of
			// 0.2.0's manifests.
			monitoring.Check{Path: "/livez", Func: func(*http.Request) error { return a.Live() }},
			monitoring.Check{Path: "/readyz", Func: func(*http.Request) error { return a.Healthy() }},
			monitoring.Check{Path: "/healthz", Func: func(*http.Request) error { return a.Healthy() }}),
		metricsBindAddress: c.MetricsBindAddress,
		debug:              debug,
		kube:               kube,
		broadcaster:        broadcaster,
	}, nil
}

// Run serves /metrics and the health checks, and the debug endpoints,
// records Events and runs the agent until ctx is done; it returns once the
// agent and the HTTP servers have stopped. A failure to serve stops the
// agent too.
func (s *Server) Run(ctx context.Context) error {
	defer s.broadcaster.Shutdown()
	defer s.startHeartbeat(ctx)()
	s.broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: s.kube.CoreV1().Events("")})
	server, err := monitoring.Listen(s.metricsBindAddress, s.handler)
	if err != nil {
		return err
	}
	klog.FromContext(ctx).Info("Serving metrics and health", "address", server.Addr())
	run := func(ctx context.Context) error { return s.agent.Run(ctx, s.workers) }
	if s.debug == nil {
		return server.ServeWhile(ctx, run)
	}
	return server.ServeWhile(ctx, func(ctx context.Context) error {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		served := make(chan error, 1)
		go func() {
			err := s.debug.Serve(ctx)
			cancel()
			served <- err
		}()
		runErr := run(ctx)
		cancel()
		return errors.Join(runErr, <-served)
	})
}
