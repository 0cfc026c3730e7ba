package pki

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"

	"github.com/kos-sdn/kos/components/monitoring"
)

// Timing of the signer's passes.
const (
	// DefaultCheckInterval is how often the signer checks the Secrets when
	// no certificate is due for renewal sooner.
	DefaultCheckInterval = 10 * time.Minute
	// retryDelay is how long the signer waits after a pass failed.
	retryDelay = 5 * time.Second
	// minWait keeps a signer whose renewal is due now from spinning.
	minWait = time.Second
	// APIServiceCheckInterval is how often the signer checks the
	// APIService's CA bundle between passes (one GET when it is right).
	// An APIService made again after someone deleted it (channels
	// --drift=repair, docs/operations.md) has no bundle, and the KOS API
	// stays unavailable until it has one: that must not wait for the next
	// pass, up to DefaultCheckInterval away.
	APIServiceCheckInterval = 10 * time.Second
)

// SignerMetrics are what the signer exports, in a registry of its own.
type SignerMetrics struct {
	// Registry holds the metrics below and the Go and process collectors.
	Registry *prometheus.Registry
	// Expiry is kos_certificate_expiry_timestamp_seconds: when the
	// certificate of each Secret (the CA's included) expires.
	Expiry *prometheus.GaugeVec
	// Renewals is kos_certificate_renewals_total: leaf certificates the
	// signer re-issued, by Secret.
	Renewals *prometheus.CounterVec
	// LastSuccess is kos_pki_last_success_timestamp_seconds: when a pass
	// last checked every Secret without an error.
	LastSuccess prometheus.Gauge
}

// NewSignerMetrics registers the signer's metrics in a new registry.
func NewSignerMetrics() *SignerMetrics {
	m := &SignerMetrics{
		Registry: prometheus.NewRegistry(),
		Expiry: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kos_certificate_expiry_timestamp_seconds",
			Help: "When the certificate of a KOS PKI Secret expires, in seconds since the epoch.",
		}, []string{"namespace", "secret"}),
		Renewals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kos_certificate_renewals_total",
			Help: "Leaf certificates the signer re-issued, by Secret.",
		}, []string{"namespace", "secret"}),
		LastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kos_pki_last_success_timestamp_seconds",
			Help: "When the signer last checked every KOS PKI Secret without an error, in seconds since the epoch.",
		}),
	}
	m.Registry.MustRegister(m.Expiry, m.Renewals, m.LastSuccess,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Signer keeps the KOS PKI current in a running cluster: it is the one
// holder of the CA's private key. Each pass ensures the CA and the leaves
// (making what is missing, re-issuing what expires within the renewal
// margin), the APIService's CA bundle, the CA's published ConfigMaps and
// the password Secrets, records every certificate's
// expiry, and sleeps until the next leaf is due for renewal or Interval
// passes, whichever is sooner. The kubelet then updates the Secret volumes
// of the pods in place, and etcd and kos-apiserver read the new files
// without a restart.
type Signer struct {
	// Run does one ensure pass, as kos-pki ensure does.
	Run *EnsureRun
	// Interval bounds the time between passes.
	Interval time.Duration
	// Metrics receives the expiries and renewals.
	Metrics *SignerMetrics
	// Out receives the line of every object a pass created, renewed or
	// patched.
	Out io.Writer

	mu sync.Mutex
	// passed is set once a pass succeeded, for the readiness check.
	passed bool
	// caPEM is the CA certificate of the last pass that got that far,
	// which CheckAPIService makes the APIService's CA bundle.
	caPEM []byte
}

// Loop runs passes until ctx ends; a failed pass is logged and retried
// after a few seconds. It returns nil when ctx ends.
func (s *Signer) Loop(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	if s.Run.apiServices != nil {
		checked := make(chan struct{})
		defer func() { <-checked }()
		go func() {
			defer close(checked)
			s.checkAPIServiceLoop(ctx)
		}()
	}
	for {
		wait, err := s.Pass(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			logger.Error(err, "Ensuring the KOS PKI failed; trying again", "after", retryDelay)
			wait = retryDelay
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// Pass ensures the PKI once and returns how long to wait before the next.
func (s *Signer) Pass(ctx context.Context) (time.Duration, error) {
	r := s.Run
	now := r.ensurer.now()
	ca, results, err := r.ensurer.Ensure(ctx, r.cfg.Leaves)
	if ca != nil {
		s.mu.Lock()
		s.caPEM = ca.CertPEM
		s.mu.Unlock()
	}
	wait := s.Interval
	if wait <= 0 {
		wait = DefaultCheckInterval
	}
	for _, res := range results {
		if res.Action != Kept && s.Out != nil {
			fmt.Fprintln(s.Out, res)
		}
		if res.Secret == nil {
			continue
		}
		if res.Action == Renewed {
			s.Metrics.Renewals.WithLabelValues(res.Secret.Namespace, res.Secret.Name).Inc()
		}
		key := corev1.TLSCertKey
		if res.Secret.Name == CASecret {
			key = CACertKey
		}
		notAfter, ok := expiry(res.Secret.Data[key])
		if !ok {
			continue
		}
		s.Metrics.Expiry.WithLabelValues(res.Secret.Namespace, res.Secret.Name).Set(float64(notAfter.Unix()))
		if res.Secret.Name == CASecret || res.Secret.Labels[ManagedByLabel] != FieldManager {
			continue
		}
		// The next check comes just after the margin is reached.
		if due := notAfter.Add(-r.ensurer.renewBefore()).Sub(now) + 100*time.Millisecond; due < wait {
			wait = max(due, minWait)
		}
	}
	if err != nil {
		return 0, err
	}
	if r.apiServices != nil {
		res, err := EnsureCABundle(ctx, r.apiServices, r.cfg.APIService, ca.CertPEM)
		if err != nil {
			return 0, err
		}
		if res.Action != Kept && s.Out != nil {
			fmt.Fprintln(s.Out, res)
		}
	}
	published, skipped, err := r.publish(ctx, ca)
	for _, res := range published {
		switch {
		case res.Action == Skipped:
			// Until its consumer is installed, every pass skips it:
			// not worth a line each time.
			klog.FromContext(ctx).V(2).Info("Skipped publishing", "object", res.Object, "reason", res.Reason)
		case res.Action != Kept && s.Out != nil:
			fmt.Fprintln(s.Out, res)
		}
	}
	if err != nil {
		return 0, err
	}
	if skipped {
		wait = min(wait, PublishRetry)
	}
	s.Metrics.LastSuccess.Set(float64(time.Now().Unix()))
	s.mu.Lock()
	s.passed = true
	s.mu.Unlock()
	klog.FromContext(ctx).V(2).Info("Ensured the KOS PKI", "next", wait)
	return wait, nil
}

// checkAPIServiceLoop runs CheckAPIService every APIServiceCheckInterval
// until ctx ends. A missing APIService is logged at V(2) only: that is
// what the operator's runbook passes through before it is made again.
func (s *Signer) checkAPIServiceLoop(ctx context.Context) {
	logger := klog.FromContext(ctx)
	tick := time.NewTicker(APIServiceCheckInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		res, err := s.CheckAPIService(ctx)
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case apierrors.IsNotFound(err):
			logger.V(2).Info("The APIService to give the CA bundle is missing", "err", err)
		case err != nil:
			logger.Error(err, "Checking the APIService's CA bundle failed; trying again", "after", APIServiceCheckInterval)
		case res.Action != Kept && s.Out != nil:
			fmt.Fprintln(s.Out, res)
		}
	}
}

// CheckAPIService makes the CA of the last pass the APIService's CA bundle
// when it is not (EnsureCABundle): one GET when it is. Before a pass has
// read the CA, or without an APIService to keep, it does nothing.
func (s *Signer) CheckAPIService(ctx context.Context) (Result, error) {
	s.mu.Lock()
	caPEM := s.caPEM
	s.mu.Unlock()
	if s.Run.apiServices == nil || caPEM == nil {
		return Result{Action: Kept}, nil
	}
	return EnsureCABundle(ctx, s.Run.apiServices, s.Run.cfg.APIService, caPEM)
}

// Ready reports whether a pass has succeeded.
func (s *Signer) Ready(*http.Request) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.passed {
		return errors.New("no pass has succeeded yet")
	}
	return nil
}

// Handler serves the signer's metrics on /metrics, /healthz (the process
// answers) and /readyz (a pass has succeeded).
func (s *Signer) Handler() http.Handler {
	return monitoring.Handler(s.Metrics.Registry,
		monitoring.Check{Path: "/healthz", Func: func(*http.Request) error { return nil }},
		monitoring.Check{Path: "/readyz", Func: s.Ready},
	)
}

// expiry reads the NotAfter of the first certificate of PEM data.
func expiry(data []byte) (time.Time, bool) {
	block, _ := pem.Decode(data)
	if block == nil {
		return time.Time{}, false
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return time.Time{}, false
	}
	return cert.NotAfter, true
}
