// Package monitoring provides the plain-HTTP endpoint that kos-agent and
// kos-controller-manager serve: Prometheus metrics on /metrics and health
// checks on /healthz and /readyz. kos-apiserver serves its own, over HTTPS,
// through k8s.io/apiserver.
package monitoring

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// shutdownTimeout bounds how long a stopping Server waits for the requests
// in flight.
const shutdownTimeout = 5 * time.Second

// Check is a health check served on Path: "ok" when Func returns nil,
// else Func's error with status Code (503 when zero).
type Check struct {
	Path string
	Func func(*http.Request) error
	Code int
}

// Handler returns the handler of the metrics in registry, on /metrics, and
// of checks.
func Handler(registry *prometheus.Registry, checks ...Check) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{Registry: registry}))
	for _, c := range checks {
		code := c.Code
		if code == 0 {
			code = http.StatusServiceUnavailable
		}
		mux.HandleFunc(c.Path, func(w http.ResponseWriter, r *http.Request) {
			if err := c.Func(r); err != nil {
				http.Error(w, err.Error(), code)
				return
			}
			fmt.Fprintln(w, "ok")
		})
	}
	return mux
}

// Server serves a handler over plain HTTP.
type Server struct {
	listener net.Listener
	server   *http.Server
}

// Listen binds addr (such as ":9295") at once, so that a bad or taken
// address fails before anything else starts, and returns a Server of h.
func Listen(addr string, h http.Handler) (*Server, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening for metrics and health checks: %w", err)
	}
	return &Server{listener: l, server: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}}, nil
}

// Addr returns the address the server listens on.
func (s *Server) Addr() string { return s.listener.Addr().String() }

// Serve serves until ctx ends, then shuts down gracefully, waiting up to
// five seconds for the requests in flight. It returns nil after such a
// shutdown, and the error that stopped it otherwise; either way nothing it
// started runs on once it returns.
func (s *Server) Serve(ctx context.Context) error {
	served := make(chan error, 1)
	go func() { served <- s.server.Serve(s.listener) }()
	select {
	case err := <-served:
		return fmt.Errorf("serving metrics and health checks: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	err := s.server.Shutdown(shutdownCtx)
	if serveErr := <-served; !errors.Is(serveErr, http.ErrServerClosed) {
		err = errors.Join(err, serveErr)
	}
	if err != nil {
		return fmt.Errorf("shutting down the metrics and health server: %w", err)
	}
	return nil
}

// ServeWhile serves while run runs, on a context that ends when either
// stops: a server that fails stops run, and run's end stops the server. It
// returns once both have stopped, with both their errors.
func (s *Server) ServeWhile(ctx context.Context, run func(context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	served := make(chan error, 1)
	go func() {
		err := s.Serve(ctx)
		cancel()
		served <- err
	}()
	runErr := run(ctx)
	cancel()
	return errors.Join(runErr, <-served)
}
