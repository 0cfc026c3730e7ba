package ovs

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"time"

	goovs "github.com/digitalocean/go-openvswitch/ovs"
	"k8s.io/klog/v2"
)

// DefaultUnderlayBridge is the bridge that holds a node's underlay address
// on the userspace datapath, as kos-ovs makes it (nodeovs's
// DefaultUnderlayBridge).
const DefaultUnderlayBridge = "br-ul"

// kindUnderlay flows are those of the tunnel filter on the underlay bridge
// (UnderlayFilter); all share one cookie.
const kindUnderlay flowKind = 5

// Priorities of the underlay filter's flows, above the NORMAL flow every
// bridge starts with (priority 0) and below what an operator might put in
// front of everything.
const (
	underlayDropPriority  = 200
	underlayAdmitPriority = 201
)

// UnderlayFilterConfig says where an UnderlayFilter keeps its flows.
type UnderlayFilterConfig struct {
	// Bridge is the bridge that holds Address, a bridge of the NORMAL
	// action; DefaultUnderlayBridge when empty.
	Bridge string
	// Address is the node's address on the underlay: the filter drops
	// the tunnel packets sent to it from other hosts than the peers.
	Address netip.Addr
	// RunDir and Timeout are as Config's.
	RunDir  string
	Timeout time.Duration
}

// UnderlayFilter is the tunnel filter of the userspace datapath, where
// tunnels end in ovs-vswitchd rather than in the kernel: flows on the
// bridge that holds the node's underlay address let UDP packets to that
// address's tunnel port through (the NORMAL action, which ends them in the
// tunnel) only from the peers' addresses, and drop the others, counted.
// Other traffic of the bridge is left to its own flows.
type UnderlayFilter struct {
	bridge  string
	address netip.Addr
	ovs     *ovsClient
}

var _ TunnelFilter = (*UnderlayFilter)(nil)

// NewUnderlayFilter returns the filter cfg describes. It does not touch
// the switch until Set.
func NewUnderlayFilter(cfg UnderlayFilterConfig) (*UnderlayFilter, error) {
	if cfg.Bridge == "" {
		cfg.Bridge = DefaultUnderlayBridge
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if !cfg.Address.Is4() {
		return nil, fmt.Errorf("underlay address %v is not an IPv4 address", cfg.Address)
	}
	return &UnderlayFilter{bridge: cfg.Bridge, address: cfg.Address, ovs: newOVSClient(cfg.RunDir, cfg.Timeout)}, nil
}

// Check returns an error unless the bridge exists.
func (u *UnderlayFilter) Check(ctx context.Context) error {
	if _, err := u.ovs.vsctl(ctx, "br-exists", u.bridge); err != nil {
		return fmt.Errorf("finding the underlay bridge %s: %w", u.bridge, err)
	}
	return nil
}

// underlayFlows are the flows of a filter that admits UDP to addr's port
// from hosts alone.
func underlayFlows(addr netip.Addr, port int, hosts []netip.Addr) []*goovs.Flow {
	c := cookie(kindUnderlay, 0, netip.Addr{})
	dst := []goovs.Match{goovs.NetworkDestination(addr.String()), goovs.TransportDestinationPort(uint16(port))}
	flows := []*goovs.Flow{{
		Priority: underlayDropPriority,
		Protocol: goovs.ProtocolUDPv4,
		Matches:  dst,
		Cookie:   c,
		Actions:  []goovs.Action{goovs.Drop()},
	}}
	for _, h := range hosts {
		flows = append(flows, &goovs.Flow{
			Priority: underlayAdmitPriority,
			Protocol: goovs.ProtocolUDPv4,
			Matches:  append([]goovs.Match{goovs.NetworkSource(h.String())}, dst...),
			Cookie:   c,
			Actions:  []goovs.Action{goovs.Normal()},
		})
	}
	return flows
}

// underlayFilterFlows matches the filter's flows.
func underlayFilterFlows() *goovs.MatchFlow {
	return flowsWithCookie(cookie(kindUnderlay, 0, netip.Addr{}))
}

// Set makes the bridge's filter flows admit UDP to port from hosts alone:
// one read of them, and, when they differ, one bundle that replaces them.
func (u *UnderlayFilter) Set(ctx context.Context, port int, hosts []netip.Addr) error {
	want := underlayFlows(u.address, port, hosts)
	got, err := u.ovs.dumpFlows(ctx, u.bridge, underlayFilterFlows())
	if err != nil {
		return err
	}
	if sameFlows(got, want) {
		return nil
	}
	if err := u.ovs.bundle(ctx, u.bridge, flowMod{deletes: []*goovs.MatchFlow{underlayFilterFlows()}, adds: want}); err != nil {
		return fmt.Errorf("setting the tunnel filter on bridge %s: %w", u.bridge, err)
	}
	klog.FromContext(ctx).V(2).Info("Set the tunnel filter", "bridge", u.bridge, "port", port, "hosts", hosts)
	return nil
}

// Drops returns how many tunnel packets the filter dropped since its flows
// were last replaced.
func (u *UnderlayFilter) Drops(ctx context.Context) (uint64, error) {
	flows, err := u.ovs.dumpFlows(ctx, u.bridge, underlayFilterFlows())
	if err != nil {
		return 0, err
	}
	var n uint64
	for _, fl := range flows {
		if fl.Priority == underlayDropPriority {
			n += fl.Stats.PacketCount
		}
	}
	return n, nil
}

// Remove deletes the filter's flows, if the bridge exists; it reports
// whether there were any.
func (u *UnderlayFilter) Remove(ctx context.Context) (bool, error) {
	return removeUnderlayFilter(ctx, u.ovs, u.bridge)
}

// RemoveUnderlayFilter deletes the flows of an UnderlayFilter from bridge
// of the Open vSwitch whose run dir is runDir (empty for the default), if
// the bridge exists; it reports whether there were any. kos-agent cleanup
// uses it.
func RemoveUnderlayFilter(ctx context.Context, runDir, bridge string) (bool, error) {
	return removeUnderlayFilter(ctx, newOVSClient(runDir, DefaultTimeout), bridge)
}

func removeUnderlayFilter(ctx context.Context, c *ovsClient, bridge string) (bool, error) {
	if _, err := c.vsctl(ctx, "br-exists", bridge); err != nil {
		// ovs-vsctl br-exists exits 2 when there is no such bridge.
		var exit *exec.ExitError
		if errors.As(err, &exit) && exit.ExitCode() == 2 {
			return false, nil
		}
		return false, err
	}
	flows, err := c.dumpFlows(ctx, bridge, underlayFilterFlows())
	if err != nil {
		return false, err
	}
	if len(flows) == 0 {
		return false, nil
	}
	if err := c.bundle(ctx, bridge, flowMod{deletes: []*goovs.MatchFlow{underlayFilterFlows()}}); err != nil {
		return false, fmt.Errorf("deleting the tunnel filter on bridge %s: %w", bridge, err)
	}
	return true, nil
}
