package agent

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/kos-sdn/kos/components/fabric/ovs"
	"github.com/kos-sdn/kos/components/fabric/tunnelfilter"
)

// Tunnel filters for Options.TunnelFilter.
const (
	// TunnelFilterAuto chooses by datapath: nftables on the kernel's,
	// the underlay bridge's flows on the userspace one.
	TunnelFilterAuto     = "auto"
	TunnelFilterNFTables = "nftables"
	TunnelFilterOVS      = "ovs"
	TunnelFilterNone     = "none"
)

// anyInterface is the --tunnel-filter-interface that admits peers on every
// interface.
const anyInterface = "*"

// underlayBridgeWait is how long a starting agent waits for the underlay
// bridge of the userspace datapath's tunnel filter: kos-ovs makes it as it
// starts beside the agent (seconds on a loaded node), and a node without
// one at all only starts that much later.
const underlayBridgeWait = 30 * time.Second

// tunnelFilter returns the tunnel filter --tunnel-filter asks for, nil for
// none, for the node at hostIP whose Open vSwitch runs in runDir. A filter
// that cannot work on this node (no right to the kernel's nftables, no
// underlay bridge) is an error when named, and is logged and left out
// under auto, so that an agent under a manifest that did not plan for it
// still starts.
func (o *Options) tunnelFilter(ctx context.Context, hostIP netip.Addr, runDir string) (ovs.TunnelFilter, error) {
	logger := klog.FromContext(ctx)
	kind := o.TunnelFilter
	if kind == TunnelFilterAuto {
		kind = TunnelFilterNFTables
		if o.DatapathType == "netdev" {
			kind = TunnelFilterOVS
		}
	}
	unusable := func(err error) (ovs.TunnelFilter, error) {
		if o.TunnelFilter == TunnelFilterAuto {
			logger.Info("Warning: not filtering the tunnel port: the filter cannot work on this node; any host may send to it, and the flows drop what no remote attachment admits",
				"tunnelFilter", kind, "reason", err.Error())
			return nil, nil
		}
		return nil, fmt.Errorf("--tunnel-filter=%s: %w", kind, err)
	}
	switch kind {
	case TunnelFilterNFTables:
		ifc := o.TunnelFilterInterface
		switch ifc {
		case anyInterface:
			ifc = ""
		case "":
			u, err := findUnderlay(hostIP)
			if err != nil {
				return unusable(fmt.Errorf("finding the interface that holds --host-ip %s: %w", hostIP, err))
			}
			ifc = u.name
		}
		f := tunnelfilter.New(tunnelfilter.Config{Interface: ifc})
		if err := f.Check(); err != nil {
			return unusable(err)
		}
		logger.Info("Filtering the tunnel port in nftables: only peer nodes, on the underlay interface", "table", tunnelfilter.TableName, "interface", ifc)
		return f, nil
	case TunnelFilterOVS:
		f, err := ovs.NewUnderlayFilter(ovs.UnderlayFilterConfig{Bridge: o.UnderlayBridge, Address: hostIP, RunDir: runDir})
		if err != nil {
			return nil, err
		}
		// The underlay bridge is kos-ovs's, beside the agent in its pod,
		// and may come a moment after the agent starts: waited for, so
		// that the node is not left unfiltered for the agent's life.
		var last error
		waited := wait.PollUntilContextTimeout(ctx, time.Second, underlayBridgeWait, true, func(ctx context.Context) (bool, error) {
			last = f.Check(ctx)
			return last == nil, nil
		})
		if waited != nil {
			if last == nil {
				last = waited
			}
			return unusable(fmt.Errorf("%w (waited %s for it)", last, underlayBridgeWait))
		}
		logger.Info("Filtering the tunnel port on the underlay bridge: only peer nodes", "bridge", o.UnderlayBridge)
		return f, nil
	}
	return nil, nil
}

// tunnelFilterRemover is a fabric with a tunnel filter it can remove
// (fabric/ovs).
type tunnelFilterRemover interface {
	RemoveTunnelFilter(ctx context.Context) (bool, error)
}

// removeTunnelFilterTimeout bounds the removal as the agent stops.
const removeTunnelFilterTimeout = 10 * time.Second

// removeTunnelFilter removes the fabric's tunnel filter as the agent stops:
// an agent that does not keep it (an older release, after a rollback) must
// not find one that drops the nodes that join later. Until the next agent
// sets it again the tunnel port is open, and the flows alone drop what no
// remote attachment admits.
func (a *Agent) removeTunnelFilter(logger klog.Logger) {
	r, ok := a.fabric.(tunnelFilterRemover)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), removeTunnelFilterTimeout)
	defer cancel()
	removed, err := r.RemoveTunnelFilter(ctx)
	switch {
	case err != nil:
		logger.Error(err, "Removing the tunnel filter failed; the next agent sets it again, an older one leaves it as it is")
	case removed:
		logger.Info("Removed the tunnel filter, which only a running agent keeps in step")
	}
}
