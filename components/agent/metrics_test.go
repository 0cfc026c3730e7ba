package agent

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kos-sdn/kos/components/fabric"
)

// fakeDrops is a dropCounter that returns fixed counts or an error.
type fakeDrops struct {
	drops fabric.Drops
	err   error
}

func (f *fakeDrops) Drops(context.Context) (fabric.Drops, error) { return f.drops, f.err }

func TestDropsCollector(t *testing.T) {
	tests := []struct {
		name string
		fake *fakeDrops
		want string
	}{{
		name: "counts",
		fake: &fakeDrops{drops: fabric.Drops{Tunnel: 7, Spoofed: 3, Filtered: 11}},
		want: `
# HELP kos_agent_spoofed_drops_total Frames the node's switch dropped because a local attachment's port sent them with another source MAC or IPv4 address than the attachment's (IPv6, which attachments do not use, is dropped uncounted).
# TYPE kos_agent_spoofed_drops_total counter
kos_agent_spoofed_drops_total 3
# HELP kos_agent_tunnel_filter_drops_total Tunnel packets the node's tunnel filter dropped before the tunnel: from a host that holds no remote attachment of the node, or, on the kernel datapath, arriving on another interface than the underlay's. 0 without a filter (--tunnel-filter=none).
# TYPE kos_agent_tunnel_filter_drops_total counter
kos_agent_tunnel_filter_drops_total 11
# HELP kos_agent_tunnel_drops_total Tunnel packets the node's switch dropped because no remote attachment of their VNI is on the node that sent them (or their inner source MAC is none of its attachments').
# TYPE kos_agent_tunnel_drops_total counter
kos_agent_tunnel_drops_total 7
`,
	}, {
		name: "switch unreadable",
		fake: &fakeDrops{err: errors.New("no switch")},
		want: "",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewPedanticRegistry()
			if err := reg.Register(newDropsCollector(tt.fake)); err != nil {
				t.Fatal(err)
			}
			if err := testutil.GatherAndCompare(reg, strings.NewReader(tt.want), "kos_agent_tunnel_drops_total", "kos_agent_spoofed_drops_total", "kos_agent_tunnel_filter_drops_total"); err != nil {
				t.Error(err)
			}
		})
	}
}
