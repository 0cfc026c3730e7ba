package controllermanager

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
)

// networkMetrics are the gauges of the network configuration: the values
// applied and the underlay MTUs the nodes report. They implement
// networkconfig.Metrics.
type networkMetrics struct {
	overlayMTU, tunnelPort, smallest, reporting, tooSmall, otherMTU prometheus.Gauge
	underlay                                                        *prometheus.GaugeVec
}

func newNetworkMetrics() *networkMetrics {
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "kos", Subsystem: "network", Name: name, Help: help})
	}
	return &networkMetrics{
		overlayMTU: gauge("overlay_mtu", "The overlay MTU applied (NetworkConfig status.overlayMTU), which agents give attachments' interfaces; 0 until applied."),
		tunnelPort: gauge("tunnel_port", "The VXLAN tunnel port applied (NetworkConfig status.tunnelPort); 0 until applied."),
		smallest:   gauge("underlay_mtu_smallest", "The smallest underlay MTU a node reports; 0 when none does."),
		reporting:  gauge("nodes_reporting_underlay", "Nodes that report their underlay MTU."),
		tooSmall:   gauge("nodes_underlay_too_small", "Nodes whose underlay MTU is below the overlay MTU plus VXLAN's 50 bytes: their pods lose full-size packets."),
		otherMTU:   gauge("attachments_other_mtu", "NetworkAttachments whose interface has an MTU other than the overlay MTU applied: made before a forced change until their pods are re-created, or by agents that do not use the NetworkConfig."),
		underlay: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "kos", Subsystem: "network", Name: "node_underlay_mtu",
			Help: "The underlay MTU each node reports in its network.example.com/underlay-mtu annotation.",
		}, []string{"node"}),
	}
}

// register adds the gauges to reg.
func (m *networkMetrics) register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.overlayMTU, m.tunnelPort, m.smallest, m.reporting, m.tooSmall, m.otherMTU, m.underlay} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// Observe sets the gauges from the network configuration's status and the
// nodes' reports; nodes that no longer report lose their series.
func (m *networkMetrics) Observe(st *v1alpha1.NetworkConfigStatus, underlays map[string]int32) {
	m.overlayMTU.Set(float64(st.OverlayMTU))
	m.tunnelPort.Set(float64(st.TunnelPort))
	m.smallest.Set(float64(st.Underlay.SmallestMTU))
	m.reporting.Set(float64(st.Underlay.NodesReporting))
	m.tooSmall.Set(float64(st.Underlay.NodesTooSmall))
	m.otherMTU.Set(float64(st.AttachmentsWithOtherMTU))
	m.underlay.Reset()
	for node, mtu := range underlays {
		m.underlay.WithLabelValues(node).Set(float64(mtu))
	}
}
