package controllermanager

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
)

func TestNetworkMetricsObserve(t *testing.T) {
	m := newNetworkMetrics()
	reg := prometheus.NewRegistry()
	if err := m.register(reg); err != nil {
		t.Fatal(err)
	}
	st := &v1alpha1.NetworkConfigStatus{OverlayMTU: 1450, TunnelPort: 4789, AttachmentsWithOtherMTU: 3,
		Underlay: v1alpha1.UnderlayReport{NodesReporting: 2, SmallestMTU: 1400, NodesTooSmall: 1}}
	m.Observe(st, map[string]int32{"a": 1500, "b": 1400})
	// Node b stops reporting: its series goes.
	st.Underlay = v1alpha1.UnderlayReport{NodesReporting: 1, SmallestMTU: 1500}
	m.Observe(st, map[string]int32{"a": 1500})

	want := `
# HELP kos_network_attachments_other_mtu NetworkAttachments whose interface has an MTU other than the overlay MTU applied: made before a forced change until their pods are re-created, or by agents that do not use the NetworkConfig.
# TYPE kos_network_attachments_other_mtu gauge
kos_network_attachments_other_mtu 3
# HELP kos_network_node_underlay_mtu The underlay MTU each node reports in its network.example.com/underlay-mtu annotation.
# TYPE kos_network_node_underlay_mtu gauge
kos_network_node_underlay_mtu{node="a"} 1500
# HELP kos_network_nodes_underlay_too_small Nodes whose underlay MTU is below the overlay MTU plus VXLAN's 50 bytes: their pods lose full-size packets.
# TYPE kos_network_nodes_underlay_too_small gauge
kos_network_nodes_underlay_too_small 0
# HELP kos_network_overlay_mtu The overlay MTU applied (NetworkConfig status.overlayMTU), which agents give attachments' interfaces; 0 until applied.
# TYPE kos_network_overlay_mtu gauge
kos_network_overlay_mtu 1450
# HELP kos_network_underlay_mtu_smallest The smallest underlay MTU a node reports; 0 when none does.
# TYPE kos_network_underlay_mtu_smallest gauge
kos_network_underlay_mtu_smallest 1500
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"kos_network_attachments_other_mtu", "kos_network_node_underlay_mtu", "kos_network_nodes_underlay_too_small", "kos_network_overlay_mtu", "kos_network_underlay_mtu_smallest"); err != nil {
		t.Error(err)
	}
}
