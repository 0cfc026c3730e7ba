package agent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	"k8s.io/klog/v2"

	"github.com/kos-sdn/kos/components/fabric"
)

// underlayWait is how long Options.Config waits, as the agent starts, for an
// interface to hold the node's tunnel address: kos-ovs, in the same pod, may
// be moving it onto its bridge just then.
const underlayWait = 30 * time.Second

// underlayPollPeriod is how often the agent looks for the underlay while it
// waits for one.
const underlayPollPeriod = 500 * time.Millisecond

// underlay is the interface that holds the node's tunnel address, through
// which the node's VXLAN traffic leaves.
type underlay struct {
	name string
	mtu  int
}

// errNoUnderlay means that no interface holds the address looked for.
var errNoUnderlay = errors.New("no interface holds it")

// findUnderlay returns the interface of the agent's network namespace that
// holds ip, or errNoUnderlay.
func findUnderlay(ip netip.Addr) (underlay, error) {
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		return underlay{}, fmt.Errorf("listing addresses: %w", err)
	}
	for _, a := range addrs {
		if got, ok := netip.AddrFromSlice(a.IP); !ok || got.Unmap() != ip {
			continue
		}
		link, err := netlink.LinkByIndex(a.LinkIndex)
		if err != nil {
			return underlay{}, fmt.Errorf("reading interface %d, which holds %s: %w", a.LinkIndex, ip, err)
		}
		return underlay{name: link.Attrs().Name, mtu: link.Attrs().MTU}, nil
	}
	return underlay{}, errNoUnderlay
}

// waitUnderlay looks for the interface that holds ip until one does or
// within has passed.
func waitUnderlay(ctx context.Context, ip netip.Addr, within time.Duration) (underlay, error) {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	for {
		u, err := findUnderlay(ip)
		if !errors.Is(err, errNoUnderlay) {
			return u, err
		}
		select {
		case <-ctx.Done():
			return underlay{}, fmt.Errorf("waited %s: %w", within, err)
		case <-time.After(underlayPollPeriod):
		}
	}
}

// assumedUnderlayMTU is the underlay's MTU when the agent makes no
// interfaces and finds no underlay: Ethernet's.
const assumedUnderlayMTU = 1500

// attachmentMTU returns the MTU of the interfaces the agent makes: given,
// when not 0, else the MTU of the underlay, the interface that holds hostIP,
// less VXLAN's overhead (fabric.AttachmentMTU). It waits up to wait for an
// interface to hold hostIP; with wait 0 (the logging fabric, which makes no
// interfaces and runs with made-up addresses) it looks once and, finding
// none, assumes an Ethernet underlay.
func attachmentMTU(ctx context.Context, given int, hostIP netip.Addr, wait time.Duration) (int, error) {
	logger := klog.FromContext(ctx)
	if given != 0 {
		warnIfTooLarge(logger, given, hostIP)
		logger.Info("Interfaces of attachments get the MTU given", "mtu", given)
		return given, nil
	}
	var u underlay
	var err error
	if wait > 0 {
		u, err = waitUnderlay(ctx, hostIP, wait)
	} else {
		u, err = findUnderlay(hostIP)
	}
	switch {
	case err == nil:
	case wait == 0:
		u = underlay{mtu: assumedUnderlayMTU}
		logger.V(2).Info("Assuming an Ethernet underlay", "hostIP", hostIP, "underlayMTU", u.mtu, "reason", err.Error())
	default:
		return 0, fmt.Errorf("finding the underlay, the interface that holds --host-ip %s, for the MTU: %w; give --mtu", hostIP, err)
	}
	mtu, err := fabric.AttachmentMTU(u.mtu)
	if err != nil {
		return 0, fmt.Errorf("choosing the MTU of attachments for underlay %s: %w; give --mtu", u.name, err)
	}
	logger.Info("Interfaces of attachments get the underlay's MTU less VXLAN's overhead", "mtu", mtu, "underlay", u.name, "underlayMTU", u.mtu)
	return mtu, nil
}

// warnIfTooLarge logs a warning when the underlay that holds hostIP, if
// one does, cannot carry packets of MTU mtu with VXLAN's overhead. It does
// not refuse the MTU: the path between nodes may carry more than the
// interface says, as when the address sits on a bridge or VLAN device of a
// smaller MTU than the interfaces beneath.
func warnIfTooLarge(logger klog.Logger, mtu int, hostIP netip.Addr) {
	u, err := findUnderlay(hostIP)
	if err != nil {
		logger.V(2).Info("Not checking the MTU given against the underlay", "hostIP", hostIP, "reason", err.Error())
		return
	}
	if fits := u.mtu - fabric.VXLANOverhead; mtu > fits {
		logger.Info("Warning: the MTU given is more than the underlay carries with VXLAN's overhead; full-size packets are lost unless the path between nodes carries more",
			"mtu", mtu, "underlay", u.name, "underlayMTU", u.mtu, "fits", fits)
	}
}
