package kosinstall

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/tools/ovsenv"
)

// GuestMTU is the MTU of a guest's interface: room for the VXLAN header
// within the underlay's 1500 bytes.
const GuestMTU = 1450

// Guest is a network namespace holding one attachment's interface, as a
// workload (a VM, a container) would use it.
type Guest struct {
	*ovsenv.Netns
	// Attachment is the attachment whose interface the guest holds.
	Attachment *v1alpha1.NetworkAttachment
	// IP is the attachment's address.
	IP netip.Addr
}

// PlumbGuest gives the attachment's interface to the guest namespace name:
// it creates the namespace unless it exists, moves the interface there from
// the node's network namespace nodeNetns (where the agent makes it), and
// configures it: the attachment's address with the subnet's prefix length,
// MTU GuestMTU, up. The agent makes the interface again when its node's Open
// vSwitch restarts (the one moved away dies with the daemon): calling
// PlumbGuest again moves the new one, so it serves for re-plumbing too.
func PlumbGuest(ctx context.Context, nodeNetns, name string, att *v1alpha1.NetworkAttachment, subnet netip.Prefix) (*Guest, error) {
	ip, err := netip.ParseAddr(att.Status.IPv4)
	if err != nil {
		return nil, fmt.Errorf("attachment %s/%s has no address yet: %w", att.Namespace, att.Name, err)
	}
	ifc := att.Status.IfcName
	if ifc == "" {
		return nil, fmt.Errorf("attachment %s/%s has no interface yet", att.Namespace, att.Name)
	}
	g := &Guest{Netns: &ovsenv.Netns{Name: name}, Attachment: att, IP: ip}
	if _, err := os.Stat(filepath.Join("/run/netns", name)); errors.Is(err, os.ErrNotExist) {
		if g.Netns, err = ovsenv.NewNetns(ctx, name); err != nil {
			return nil, err
		}
	}
	node := &ovsenv.Netns{Name: nodeNetns}
	if _, err := node.Run(ctx, "ip", "link", "show", ifc); err == nil {
		// The interface moved here before: dead since its Open vSwitch
		// stopped, and in the way of the new one.
		if _, err := g.Run(ctx, "ip", "link", "show", ifc); err == nil {
			if _, err := g.Run(ctx, "ip", "link", "delete", ifc); err != nil {
				return nil, fmt.Errorf("deleting the old interface of attachment %s in guest %s: %w", att.Name, name, err)
			}
		}
		if _, err := node.Run(ctx, "ip", "link", "set", ifc, "netns", name); err != nil {
			return nil, fmt.Errorf("moving the interface of attachment %s into guest %s: %w", att.Name, name, err)
		}
	} else if _, gerr := g.Run(ctx, "ip", "link", "show", ifc); gerr != nil {
		return nil, fmt.Errorf("interface %s of attachment %s is neither in node namespace %s (%v) nor in guest %s", ifc, att.Name, nodeNetns, err, name)
	}
	for _, cmd := range [][]string{
		{"ip", "addr", "replace", netip.PrefixFrom(ip, subnet.Bits()).String(), "dev", ifc},
		{"ip", "link", "set", ifc, "mtu", strconv.Itoa(GuestMTU), "up"},
	} {
		if _, err := g.Run(ctx, cmd[0], cmd[1:]...); err != nil {
			return nil, fmt.Errorf("configuring guest %s: %w", name, err)
		}
	}
	// The switch delivers to the attachment's MAC only. An interface moved
	// away while Open vSwitch was still setting it up keeps another one,
	// and the guest would get no reply from any peer.
	if want := att.Status.MACAddress; want != "" {
		got, err := g.Run(ctx, "cat", filepath.Join("/sys/class/net", ifc, "address"))
		if err != nil {
			return nil, fmt.Errorf("reading the MAC address of %s in guest %s: %w", ifc, name, err)
		}
		if !strings.EqualFold(strings.TrimSpace(got), want) {
			return nil, fmt.Errorf("interface %s in guest %s has MAC address %s, not attachment %s's %s", ifc, name, strings.TrimSpace(got), att.Name, want)
		}
	}
	return g, nil
}

// NeighbourMAC returns the MAC address the guest has learned for ip, or ""
// when it has none: after a ping, it tells which interface answered.
func (g *Guest) NeighbourMAC(ctx context.Context, ip netip.Addr) (string, error) {
	out, err := g.Run(ctx, "ip", "neigh", "show", ip.String())
	if err != nil {
		return "", err
	}
	fields := strings.Fields(out)
	for i, f := range fields {
		if f == "lladdr" && i+1 < len(fields) {
			return fields[i+1], nil
		}
	}
	return "", nil
}
