package agent

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/kos-sdn/kos/components/agent/exechook"
	"github.com/kos-sdn/kos/components/fabric"
)

// Informer names in the notification counter.
const (
	informerLocal   = "local"
	informerNetwork = "network"
)

// metrics are the agent's Prometheus metrics. Each agent has its own, so
// that many can run in one process; they are registered where Config says.
type metrics struct {
	fabricOps       *prometheus.HistogramVec
	fabricErrors    *prometheus.CounterVec
	createToReady   prometheus.Histogram
	dissemination   *prometheus.HistogramVec
	localAtts       prometheus.Gauge
	remoteAtts      prometheus.Gauge
	networks        prometheus.Gauge
	notifications   *prometheus.CounterVec
	reconciles      *prometheus.CounterVec
	statusWrites    prometheus.Counter
	execs           *prometheus.CounterVec
	informerStarts  prometheus.Counter
	informerStopped prometheus.Counter
	cniRequests     *prometheus.HistogramVec
	underlayMTU     prometheus.Gauge
	mtu             prometheus.Gauge
}

// latencyBuckets span a millisecond to a minute.
var latencyBuckets = prometheus.ExponentialBucketsRange(0.001, 60, 20)

// newMetrics makes the agent's metrics and registers them with reg, if
// any; when fab counts what its switch drops (dropCounter), the counts are
// registered too.
func newMetrics(reg prometheus.Registerer, fab fabric.Interface) (*metrics, error) {
	const ns, sub = "kos", "agent"
	m := &metrics{
		fabricOps: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Subsystem: sub, Name: "fabric_operation_duration_seconds",
			Help:    "How long fabric operations took, by operation (ensure, list, create_local, delete_local, create_remote, delete_remote, plug_local, delete_ports).",
			Buckets: latencyBuckets,
		}, []string{"operation"}),
		fabricErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "fabric_operation_errors_total",
			Help: "Fabric operations that failed, by operation.",
		}, []string{"operation"}),
		createToReady: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: ns, Subsystem: sub, Name: "attachment_create_to_ready_seconds",
			Help:    "From the server's write of a local attachment's spec to its write of the status that made it ready (status.impl), as the server recorded both.",
			Buckets: latencyBuckets,
		}),
		dissemination: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Subsystem: sub, Name: "remote_attachment_dissemination_seconds",
			Help: "From the server's write of a remote attachment's address (status.address in extendedMetadata.writes) to its flows being in this node's switch, " +
				"once per remote attachment the switch gains, by whether the address was written while the agent watched the attachment's network " +
				"(address_written=while_watched: the dissemination latency) or before (before_watched: the node caught up, as at start).",
			Buckets: latencyBuckets,
		}, []string{"address_written"}),
		localAtts: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "local_attachments",
			Help: "Local attachments the fabric holds.",
		}),
		remoteAtts: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "remote_attachments",
			Help: "Remote attachments the fabric holds.",
		}),
		networks: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "relevant_networks",
			Help: "Virtual networks with a local attachment, each watched by an informer of its own.",
		}),
		notifications: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "attachment_notifications_total",
			Help: "Attachment notifications from the informers, by informer (local, network) and event (add, update, delete).",
		}, []string{"informer", "event"}),
		reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "reconciles_total",
			Help: "Full reconciles of the fabric against the attachments, by reason (start, flows_lost, periodic, retry, deferred) and result (ok, error).",
		}, []string{"reason", "result"}),
		statusWrites: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "status_writes_total",
			Help: "Status updates written for local attachments.",
		}),
		execs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "execs_total",
			Help: "Commands of postCreateExec and postDeleteExec, by which (create, delete) and result (ok, failed, refused).",
		}, []string{"which", "result"}),
		informerStarts: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "network_informer_starts_total",
			Help: "Network informers started, as networks became relevant.",
		}),
		informerStopped: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "network_informer_stops_total",
			Help: "Network informers stopped, as networks stopped being relevant.",
		}),
		cniRequests: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Subsystem: sub, Name: "cni_request_duration_seconds",
			Help:    "How long kos-cni's requests took, from the agent's receipt to its answer, by command (ADD, DEL, CHECK, STATUS) and result (ok, error). An ADD includes the wait for the pod's attachment.",
			Buckets: latencyBuckets,
		}, []string{"command", "result"}),
		underlayMTU: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "underlay_mtu",
			Help: "The MTU of the node's underlay, the interface that holds the agent's host IP; 0 when unknown.",
		}),
		mtu: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "mtu",
			Help: "The MTU the agent gives new interfaces of attachments: the NetworkConfig's overlay MTU once applied, else its own; 0 when it leaves it to the switch.",
		}),
	}
	// Every series a dashboard shows exists from the start, at zero, so
	// that a panel of errors shows none rather than nothing.
	for _, o := range []string{"ensure", "list", opDeleteLocal.String(), opDeleteRemote.String(), opCreateLocal.String(), opCreateRemote.String(), opPlugLocal, opDeletePorts} {
		m.fabricErrors.WithLabelValues(o)
	}
	for _, which := range []string{"create", "delete"} {
		for _, result := range []string{exechook.ResultOK, exechook.ResultFailed, exechook.ResultRefused} {
			m.execs.WithLabelValues(which, result)
		}
	}
	if reg == nil {
		return m, nil
	}
	var errs []error
	for _, c := range []prometheus.Collector{
		m.fabricOps, m.fabricErrors, m.createToReady, m.dissemination, m.localAtts, m.remoteAtts, m.networks,
		m.notifications, m.reconciles, m.statusWrites, m.execs, m.informerStarts, m.informerStopped,
		m.cniRequests, m.underlayMTU, m.mtu,
	} {
		if err := reg.Register(c); err != nil {
			errs = append(errs, err)
		}
	}
	if d, ok := fab.(dropCounter); ok {
		if err := reg.Register(newDropsCollector(d)); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return m, nil
}

// dropCounter is a fabric that counts the packets its switch drops for who
// sent them (fabric/ovs is one; fabric/logging, which has no switch, is
// not).
type dropCounter interface {
	Drops(ctx context.Context) (fabric.Drops, error)
}

// dropsScrapeTimeout bounds the switch read of one scrape.
const dropsScrapeTimeout = 5 * time.Second

// dropsCollector reports a fabric's drop counts, read from the switch when
// Prometheus scrapes: one read of a handful of flows per scrape and no work
// in between. The counts are the switch's own, so they start again from
// zero when the switch loses its flows; Prometheus takes that for a
// counter reset.
type dropsCollector struct {
	fabric   dropCounter
	tunnel   *prometheus.Desc
	spoofed  *prometheus.Desc
	filtered *prometheus.Desc
}

func newDropsCollector(d dropCounter) *dropsCollector {
	return &dropsCollector{
		fabric: d,
		tunnel: prometheus.NewDesc("kos_agent_tunnel_drops_total",
			"Tunnel packets the node's switch dropped because no remote attachment of their VNI is on the node that sent them (or their inner source MAC is none of its attachments').",
			nil, nil),
		spoofed: prometheus.NewDesc("kos_agent_spoofed_drops_total",
			"Frames the node's switch dropped because a local attachment's port sent them with another source MAC or IPv4 address than the attachment's (IPv6, which attachments do not use, is dropped uncounted).",
			nil, nil),
		filtered: prometheus.NewDesc("kos_agent_tunnel_filter_drops_total",
			"Tunnel packets the node's tunnel filter dropped before the tunnel: from a host that holds no remote attachment of the node, or, on the kernel datapath, arriving on another interface than the underlay's. 0 without a filter (--tunnel-filter=none).",
			nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *dropsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.tunnel
	ch <- c.spoofed
	ch <- c.filtered
}

// Collect implements prometheus.Collector. A failed read of the switch
// leaves both counts out of that scrape, rather than failing the whole
// scrape, and is logged.
func (c *dropsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), dropsScrapeTimeout)
	defer cancel()
	d, err := c.fabric.Drops(ctx)
	if err != nil {
		klog.Background().V(2).Info("Reading the switch's drop counts failed", "err", err)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.tunnel, prometheus.CounterValue, float64(d.Tunnel))
	ch <- prometheus.MustNewConstMetric(c.spoofed, prometheus.CounterValue, float64(d.Spoofed))
	ch <- prometheus.MustNewConstMetric(c.filtered, prometheus.CounterValue, float64(d.Filtered))
}

// observeMTU sets the MTU gauges.
func (m *metrics) observeMTU(underlay, inUse int) {
	m.underlayMTU.Set(float64(underlay))
	m.mtu.Set(float64(inUse))
}
