package daemon

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kos-sdn/kos/channels"
)

// Metrics are a daemon's Prometheus metrics, in a registry of their own
// with the Go and process collectors.
type Metrics struct {
	registry      *prometheus.Registry
	passes        *prometheus.CounterVec
	applied       *prometheus.CounterVec
	failed        *prometheus.CounterVec
	duration      prometheus.Histogram
	lastSuccess   prometheus.Gauge
	ready         prometheus.Gauge
	driftChecked  prometheus.Counter
	driftRepaired *prometheus.CounterVec
	driftReported prometheus.Counter
	drifted       *prometheus.GaugeVec
	blocked       *prometheus.GaugeVec
}

// NewMetrics creates and registers the metrics.
func NewMetrics() *Metrics {
	m := &Metrics{
		registry: prometheus.NewRegistry(),
		passes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "channels_passes_total", Help: "Passes run, by result (success or failure).",
		}, []string{"result"}),
		applied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "channels_addons_applied_total", Help: "Addon releases applied, by addon.",
		}, []string{"addon"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "channels_addons_failed_total", Help: "Addon releases that failed to apply, by addon.",
		}, []string{"addon"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "channels_pass_duration_seconds", Help: "How long passes take.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 16),
		}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "channels_last_success_timestamp_seconds", Help: "When the last fully successful pass started, in seconds since the epoch.",
		}),
		ready: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "channels_ready", Help: "1 while the last pass fully succeeded (/readyz answers 200), 0 otherwise.",
		}),
		driftChecked: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "channels_drift_objects_checked_total", Help: "Applied objects checked for drift.",
		}),
		driftRepaired: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "channels_drift_objects_repaired_total", Help: "Applied objects re-applied because they were changed or deleted, by how (changed or deleted).",
		}, []string{"drift"}),
		driftReported: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "channels_drift_objects_reported_total", Help: "Applied objects found changed or deleted and reported, not repaired (drift mode report).",
		}),
		drifted: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "channels_drifted_object", Help: "1 for each applied object found changed or deleted and not repaired (drift mode report), until its addon is applied again or the edit undone.",
		}, []string{"addon", "kind", "namespace", "name", "drift"}),
		blocked: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "channels_addon_blocked", Help: "1 for each addon the last pass left behind its channels until someone acts, by reason: NoReleaseFits (no release's kubernetesVersion fits the cluster), UpgradePathRefused (a jump the release does not allow), RollbackRefused (the daemon does not roll back on its own).",
		}, []string{"addon", "reason"}),
	}
	m.registry.MustRegister(m.passes, m.applied, m.failed, m.duration, m.lastSuccess, m.ready, m.driftChecked, m.driftRepaired, m.driftReported, m.drifted, m.blocked,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Show both results from the start.
	m.passes.WithLabelValues("success")
	m.passes.WithLabelValues("failure")
	return m
}

// Registry returns the registry holding the metrics.
func (m *Metrics) Registry() *prometheus.Registry { return m.registry }

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}

func (m *Metrics) observePass(res PassResult, began time.Time) {
	m.duration.Observe(res.Duration.Seconds())
	for _, a := range res.Applied {
		m.applied.WithLabelValues(a).Inc()
	}
	for _, a := range res.Failed {
		m.failed.WithLabelValues(a).Inc()
	}
	m.driftChecked.Add(float64(res.Drift.Checked))
	m.driftRepaired.WithLabelValues("changed").Add(float64(res.Drift.Changed))
	m.driftRepaired.WithLabelValues("deleted").Add(float64(res.Drift.Deleted))
	m.driftReported.Add(float64(res.Drift.Reported))
	if res.Err != nil {
		m.passes.WithLabelValues("failure").Inc()
		m.ready.Set(0)
		return
	}
	m.passes.WithLabelValues("success").Inc()
	m.ready.Set(1)
	m.lastSuccess.Set(float64(began.UnixNano()) / 1e9)
}

// setDrifted sets (on) or removes the channels_drifted_object series of an
// object whose drift is reported.
func (m *Metrics) setDrifted(addon string, key channels.ObjectKey, how string, on bool) {
	values := []string{addon, key.GroupKind.String(), key.Namespace, key.Name, how}
	if on {
		m.drifted.WithLabelValues(values...).Set(1)
		return
	}
	m.drifted.DeleteLabelValues(values...)
}

// setBlocked sets (on) or removes the channels_addon_blocked series of an
// addon.
func (m *Metrics) setBlocked(addon, reason string, on bool) {
	if on {
		m.blocked.WithLabelValues(addon, reason).Set(1)
		return
	}
	m.blocked.DeleteLabelValues(addon, reason)
}
