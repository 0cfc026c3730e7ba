package controllermanager

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/client-go/util/workqueue"
)

// queueMetrics are the work-queue metrics of every queue of the process,
// labelled by queue name. client-go takes one metrics provider per process,
// so they are created once and each Manager's registry exposes them.
var queueMetrics = struct {
	once                        sync.Once
	depth, unfinished, longest  *prometheus.GaugeVec
	adds, retries               *prometheus.CounterVec
	queueDuration, workDuration *prometheus.HistogramVec
}{}

func setQueueMetricsProvider() {
	queueMetrics.once.Do(func() {
		labels := []string{"name"}
		m := &queueMetrics
		m.depth = prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Subsystem: "workqueue", Name: "depth", Help: "Current depth of the work queue.",
		}, labels)
		m.adds = prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "workqueue", Name: "adds_total", Help: "Keys added to the work queue.",
		}, labels)
		m.queueDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: "workqueue", Name: "queue_duration_seconds", Help: "Seconds a key waits in the work queue before it is processed.",
			Buckets: prometheus.ExponentialBuckets(1e-4, 4, 10),
		}, labels)
		m.workDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: "workqueue", Name: "work_duration_seconds", Help: "Seconds processing a key takes.",
			Buckets: prometheus.ExponentialBuckets(1e-4, 4, 10),
		}, labels)
		m.unfinished = prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Subsystem: "workqueue", Name: "unfinished_work_seconds", Help: "Seconds of work in progress not yet observed by work_duration.",
		}, labels)
		m.longest = prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Subsystem: "workqueue", Name: "longest_running_processor_seconds", Help: "Seconds the longest running processor of the queue has been running.",
		}, labels)
		m.retries = prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "workqueue", Name: "retries_total", Help: "Keys requeued after a failure.",
		}, labels)
		workqueue.SetProvider(queueMetricsProvider{})
	})
}

// queueMetricsProvider hands client-go the children of queueMetrics.
type queueMetricsProvider struct{}

func (queueMetricsProvider) NewDepthMetric(name string) workqueue.GaugeMetric {
	return queueMetrics.depth.WithLabelValues(name)
}

func (queueMetricsProvider) NewAddsMetric(name string) workqueue.CounterMetric {
	return queueMetrics.adds.WithLabelValues(name)
}

func (queueMetricsProvider) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return queueMetrics.queueDuration.WithLabelValues(name)
}

func (queueMetricsProvider) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return queueMetrics.workDuration.WithLabelValues(name)
}

func (queueMetricsProvider) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return queueMetrics.unfinished.WithLabelValues(name)
}

func (queueMetricsProvider) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return queueMetrics.longest.WithLabelValues(name)
}

func (queueMetricsProvider) NewRetriesMetric(name string) workqueue.CounterMetric {
	return queueMetrics.retries.WithLabelValues(name)
}

// latencyBuckets span a millisecond to about a minute.
var latencyBuckets = prometheus.ExponentialBuckets(1e-3, 2, 17)

// newRegistry returns a registry with the process and Go runtime metrics,
// the work-queue metrics, the two latency histograms and the gauge of
// silent nodes, which it returns too.
func newRegistry() (reg *prometheus.Registry, validated, addressed prometheus.Histogram, silent prometheus.Gauge, err error) {
	setQueueMetricsProvider()
	validated = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "kos", Name: "subnet_create_to_validated_seconds",
		Help:    "Seconds from a subnet's creation to its validation, by the server's write times.",
		Buckets: latencyBuckets,
	})
	addressed = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "kos", Name: "attachment_create_to_address_seconds",
		Help:    "Seconds from an attachment's creation to the write of its address, by the server's write times.",
		Buckets: latencyBuckets,
	})
	silent = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "kos", Name: "nodes_not_heartbeating",
		Help: "Nodes whose kos-agent stopped renewing its heartbeat Lease, whose Ready attachments are marked Ready=Unknown.",
	})
	reg = prometheus.NewRegistry()
	m := &queueMetrics
	for _, c := range []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.depth, m.adds, m.queueDuration, m.workDuration, m.unfinished, m.longest, m.retries,
		validated, addressed, silent,
	} {
		if err := reg.Register(c); err != nil {
			return nil, nil, nil, nil, err
		}
	}
	return reg, validated, addressed, silent, nil
}
