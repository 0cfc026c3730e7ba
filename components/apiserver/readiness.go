package apiserver

import (
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/klog/v2"
)

// DefaultEtcdReadinessGrace is how long kos-apiserver stays ready while
// its etcd checks fail, unless --etcd-readiness-grace says otherwise.
const DefaultEtcdReadinessGrace = 30 * time.Second

// etcdReadyzChecks are the names of the readiness checks k8s.io/apiserver
// adds for its etcd: a read of a health key, and the storage readiness.
var etcdReadyzChecks = []string{"etcd", "etcd-readiness"}

// withEtcdGrace returns checks with its etcd checks made tolerant: each
// passes while it has failed for less than grace without a pass between.
//
// Why: every kos-apiserver replica checks the same etcd, so an etcd blip
// (a member restarting, a leader election, a short loss of quorum) fails
// every replica's readiness at once. The kubelet then takes them all out
// of the Service, and the main cluster's aggregator has no endpoint left:
// every request to the KOS API gets 503, also those a replica could have
// served (discovery, reads from the watch cache), and the APIService turns
// unavailable, so discovery of the whole cluster is incomplete until the
// probes pass again, seconds after etcd recovered. Readiness should take a
// replica out when it cannot serve and others can; no replica can stand
// in for a shared etcd. A longer outage still makes them unready, after
// grace, and liveness (/livez) keeps its etcd check as it is.
// A grace of 0 returns checks as they are.
func withEtcdGrace(checks []healthz.HealthChecker, grace time.Duration, now func() time.Time) []healthz.HealthChecker {
	if grace <= 0 {
		return checks
	}
	out := make([]healthz.HealthChecker, len(checks))
	for i, c := range checks {
		out[i] = c
		if slices.Contains(etcdReadyzChecks, c.Name()) {
			out[i] = &graceCheck{inner: c, grace: grace, now: now}
		}
	}
	return out
}

// graceCheck passes while its inner check has been failing for less than
// grace.
type graceCheck struct {
	inner healthz.HealthChecker
	grace time.Duration
	now   func() time.Time

	mu sync.Mutex
	// failingSince is when the inner check started failing; zero while
	// it passes.
	failingSince time.Time
}

// Name implements healthz.HealthChecker.
func (g *graceCheck) Name() string { return g.inner.Name() }

// GroupName implements healthz.GroupedHealthChecker, so that
// /readyz?exclude=etcd leaves out what the inner check's group names.
func (g *graceCheck) GroupName() string {
	if grouped, ok := g.inner.(healthz.GroupedHealthChecker); ok {
		return grouped.GroupName()
	}
	return g.inner.Name()
}

// Check implements healthz.HealthChecker.
func (g *graceCheck) Check(req *http.Request) error {
	err := g.inner.Check(req)
	g.mu.Lock()
	defer g.mu.Unlock()
	if err == nil {
		if !g.failingSince.IsZero() {
			klog.InfoS("Readiness check passes again", "check", g.Name(), "failedFor", g.now().Sub(g.failingSince).Round(time.Millisecond))
		}
		g.failingSince = time.Time{}
		return nil
	}
	now := g.now()
	if g.failingSince.IsZero() {
		g.failingSince = now
		klog.InfoS("Readiness check failed; staying ready through the grace", "check", g.Name(), "grace", g.grace, "err", err)
	}
	if failing := now.Sub(g.failingSince); failing >= g.grace {
		return fmt.Errorf("failing for %s: %w", failing.Round(time.Second), err)
	}
	return nil
}
