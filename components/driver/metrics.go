package driver

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Phases of a run, in the phase label of the metrics and in the summary.
const (
	PhaseWarmUp   = "warm-up"
	PhaseCruise   = "cruise"
	PhaseCoolDown = "cool-down"
)

// Kinds of error, in the kind label of kos_driver_errors_total and in the
// summary.
const (
	ErrCreate    = "create"    // a create call failed
	ErrDelete    = "delete"    // a delete call failed
	ErrAddress   = "address"   // IPAM reported an error (status.errors.ipam)
	ErrHost      = "host"      // the agent reported an error (status.errors.host)
	ErrTest      = "test"      // the ping test exited with a non-zero status
	ErrTimeout   = "timeout"   // not ready (or tested) within --ready-timeout
	ErrDuplicate = "duplicate" // two live attachments held one address of one VNI
)

var errorKinds = []string{ErrCreate, ErrDelete, ErrAddress, ErrHost, ErrTest, ErrTimeout, ErrDuplicate}

// latencyBuckets span a millisecond to two minutes.
var latencyBuckets = prometheus.ExponentialBucketsRange(0.001, 120, 24)

type metrics struct {
	create, delete, toAddress, toReady, toTested *prometheus.HistogramVec
	operations                                   *prometheus.CounterVec
	errors                                       *prometheus.CounterVec
	live                                         prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	const ns, sub = "kos", "driver"
	hist := func(name, help string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Subsystem: sub, Name: name, Help: help, Buckets: latencyBuckets,
		}, []string{"phase"})
	}
	m := &metrics{
		create:    hist("create_seconds", "How long the driver's create calls of attachments took, by phase."),
		delete:    hist("delete_seconds", "How long the driver's delete calls of attachments took, by phase."),
		toAddress: hist("create_to_address_seconds", "From the server's write of a driver attachment's spec to its write of the address (extendedMetadata.writes), by the phase the attachment was created in."),
		toReady:   hist("create_to_ready_seconds", "From the server's write of a driver attachment's spec to its write of the interface that made it ready (status.impl), by phase."),
		toTested:  hist("create_to_tested_seconds", "From the server's write of a driver attachment's spec to its write of a successful ping test's report (status.execReport), by phase."),
		operations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "operations_total",
			Help: "Attachment creates and deletes the driver made, by operation (create, delete) and phase.",
		}, []string{"operation", "phase"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "errors_total",
			Help: "Errors the driver saw, by kind (create, delete, address, host, test, timeout, duplicate).",
		}, []string{"kind"}),
		live: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "attachments",
			Help: "Attachments the driver created and has not deleted.",
		}),
	}
	for _, k := range errorKinds {
		m.errors.WithLabelValues(k)
	}
	var errs []error
	for _, c := range []prometheus.Collector{m.create, m.delete, m.toAddress, m.toReady, m.toTested, m.operations, m.errors, m.live} {
		if err := reg.Register(c); err != nil {
			errs = append(errs, err)
		}
	}
	return m, errors.Join(errs...)
}
