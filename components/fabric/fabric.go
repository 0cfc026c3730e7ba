// Package fabric is the node agent's seam to the local network: what the
// agent asks of a node's switch (Interface) and the attachments it speaks of.
// The functions that name an attachment's MAC address and interface are the
// API's (v1alpha1.MACAddress, v1alpha1.InterfaceName), because the apiserver
// and the CNI server compute them too.
//
// Two implementations exist: fabric/ovs programs a real Open vSwitch bridge,
// and fabric/logging only logs and remembers, for scale tests without OVS.
// This package itself depends on neither.
package fabric

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/kos-sdn/kos/components/apis/network"
	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
)

// Interface is what the node agent needs from its node's switch. Every
// method is safe for concurrent use; the attachment methods take batches so
// that a reconcile of thousands costs a handful of switch operations.
//
// Creating is idempotent and repairs: creating an attachment that exists,
// wholly or in part, leaves exactly what a fresh create would. Deleting one
// that does not exist is not an error. A VNI and IP name one attachment, so
// when a local and a remote one share them (an address that moved between
// nodes) the one created last takes the forwarding: a remote one leaves the
// local one partial, a local one replaces the remote one.
type Interface interface {
	// Ensure makes the bridge, the tunnel port and the default flows exist.
	// It reports flowsLost when it had to re-install the default flows:
	// the switch lost its flows (ovs-vswitchd restarted, or someone deleted
	// them), so every attachment's flows are gone too and the caller must
	// reconcile from List. On a fresh switch it reports true as well.
	Ensure(ctx context.Context) (flowsLost bool, err error)

	// CreateLocal creates or repairs attachments on this node: a network
	// interface named InterfaceName with address MAC and MTU MTU(), and its
	// flows.
	CreateLocal(ctx context.Context, atts ...LocalAttachment) error
	// DeleteLocal removes local attachments, their interfaces and flows.
	// A plugged interface (PlugLocal) only leaves the switch: the
	// interface itself is its maker's to delete.
	DeleteLocal(ctx context.Context, atts ...LocalAttachment) error

	// PlugLocal makes network interfaces that the caller made, such as the
	// host ends of veth pairs whose other ends are in pods, the ports of
	// local attachments in place of internal ones, and installs their
	// flows. Each interface must exist, named as its attachment's
	// InterfaceName, where the switch's ports live; the attachment must
	// have no port (DeletePorts or DeleteLocal the one it has first: two
	// interfaces cannot share a name, and the switch does not open again
	// an interface deleted and made anew under a port it keeps). One that
	// never had a port, as a pod's, needs nothing else: PlugLocal alone
	// makes it whole. The switch keeps each plug's Owner on its
	// port. Once plugged, an attachment keeps its interface across
	// restarts: CreateLocal repairs its flows and leaves the port as it is
	// (unless the switch cannot open the interface, which is then gone:
	// CreateLocal makes an internal port in its place), and List reports
	// it whole like any other.
	PlugLocal(ctx context.Context, plugs ...Plug) error
	// DeletePorts takes the ports of local attachments off the switch and
	// leaves their flows, which then name port numbers that no port has
	// (a switch gives a freed number to no other port soon after), until
	// PlugLocal or CreateLocal replaces them or DeleteLocal deletes them;
	// meanwhile List reports such an attachment partial. It frees an
	// interface's name for a plug at the cost of a port change alone,
	// where DeleteLocal also changes flows. A plugged interface only
	// leaves the switch, as with DeleteLocal.
	DeletePorts(ctx context.Context, atts ...LocalAttachment) error
	// Plugs returns those of atts whose ports are plugged interfaces,
	// with the owners recorded on them.
	Plugs(ctx context.Context, atts ...LocalAttachment) ([]Plug, error)

	// CreateRemote creates or updates attachments on other nodes: flows
	// that tunnel their traffic to HostIP, and that admit from the tunnel
	// what HostIP sends in their VNI with their MAC as source. A switch
	// drops tunnel packets no remote attachment admits, and frames that a
	// local attachment's port sends with another source MAC or IPv4
	// address than the attachment's. Creating one again with another
	// HostIP moves it.
	CreateRemote(ctx context.Context, atts ...RemoteAttachment) error
	// DeleteRemote removes the flows of remote attachments.
	DeleteRemote(ctx context.Context, atts ...RemoteAttachment) error

	// SetPolicy replaces the policy of a virtual network on this node
	// (NetworkPolicy) at once: no packet meets part of the old policy and
	// part of the new. Connections that the old policy allowed and that
	// are established keep passing; new connections meet the new policy.
	// A NetworkPolicy without policies removes the network's policy.
	// A network's policy outlives its attachments: the caller clears it
	// when the node has none left (List reports it in Policies). Calls
	// for different networks may overlap; calls for one network must not.
	SetPolicy(ctx context.Context, p NetworkPolicy) error

	// List reports what the switch holds, so that a restarted agent can
	// adopt what matches, delete orphans and create what is missing.
	List(ctx context.Context) (*Inventory, error)

	// MTU returns the MTU of the interfaces CreateLocal makes (see
	// AttachmentMTU); 0 when it leaves them at the switch's default.
	MTU() int
}

// LocalAttachment is a network attachment on this node.
type LocalAttachment struct {
	// VNI is the virtual network, in [network.MinVNI, network.MaxVNI].
	VNI uint32
	// IP is the attachment's IPv4 address in that network.
	IP netip.Addr
}

// MAC returns the attachment's MAC address.
func (a LocalAttachment) MAC() net.HardwareAddr { return v1alpha1.MACAddress(a.VNI, a.IP) }

// InterfaceName returns the name of the attachment's network interface.
func (a LocalAttachment) InterfaceName() string { return v1alpha1.InterfaceName(a.MAC()) }

// Validate returns an error when the attachment cannot be installed.
func (a LocalAttachment) Validate() error { return validate(a.VNI, a.IP) }

// String returns a short form for logs, such as 1/10.0.0.5.
func (a LocalAttachment) String() string { return fmt.Sprintf("%d/%s", a.VNI, a.IP) }

// Plug is a local attachment whose port is a network interface that the
// fabric's caller made (PlugLocal) rather than an internal port.
type Plug struct {
	LocalAttachment
	// Owner says what the interface was made for, such as the container
	// ID and interface name of a CNI request, so that its maker can tell,
	// even after a restart, whether the port is still the one it plugged.
	Owner string
}

// Validate returns an error when the plug cannot be installed.
func (p Plug) Validate() error {
	if p.Owner == "" {
		return errors.Join(p.LocalAttachment.Validate(), fmt.Errorf("plug of %v has no owner", p.LocalAttachment))
	}
	return p.LocalAttachment.Validate()
}

// String returns a short form for logs, such as 1/10.0.0.5(owner).
func (p Plug) String() string { return fmt.Sprintf("%v(%s)", p.LocalAttachment, p.Owner) }

// RemoteAttachment is a network attachment on another node, in a virtual
// network that has attachments on this one.
type RemoteAttachment struct {
	// VNI is the virtual network, in [network.MinVNI, network.MaxVNI].
	VNI uint32
	// IP is the attachment's IPv4 address in that network.
	IP netip.Addr
	// HostIP is the IPv4 address of the attachment's node: the far end of
	// the tunnel.
	HostIP netip.Addr
}

// MAC returns the attachment's MAC address.
func (a RemoteAttachment) MAC() net.HardwareAddr { return v1alpha1.MACAddress(a.VNI, a.IP) }

// Validate returns an error when the attachment cannot be installed.
func (a RemoteAttachment) Validate() error {
	if err := validate(a.VNI, a.IP); err != nil {
		return err
	}
	if !a.HostIP.Is4() {
		return fmt.Errorf("host IP %v of %v is not an IPv4 address", a.HostIP, a)
	}
	return nil
}

// String returns a short form for logs, such as 1/10.0.0.5@192.168.0.2.
func (a RemoteAttachment) String() string {
	return fmt.Sprintf("%d/%s@%s", a.VNI, a.IP, a.HostIP)
}

func validate(vni uint32, ip netip.Addr) error {
	var errs []error
	if vni < network.MinVNI || vni > network.MaxVNI {
		errs = append(errs, fmt.Errorf("VNI %d is not in [%d,%d]", vni, network.MinVNI, network.MaxVNI))
	}
	if !ip.Is4() {
		errs = append(errs, fmt.Errorf("IP %v of VNI %d is not an IPv4 address", ip, vni))
	}
	return errors.Join(errs...)
}

// Drops counts the packets a switch dropped for who sent them. The counts
// are the switch's own and start again from zero when it loses its flows.
type Drops struct {
	// Tunnel counts tunnel packets from an address that is not the node
	// of a remote attachment of the packet's VNI (or whose inner source
	// MAC is not that attachment's).
	Tunnel uint64
	// Spoofed counts frames that local attachments' ports sent with
	// another source MAC or IPv4 address than the attachment's, or that
	// are neither IPv4 nor ARP (IPv6 is dropped and not counted).
	Spoofed uint64
	// Filtered counts tunnel packets the node's tunnel filter dropped
	// before the tunnel: from a host that is no node of a remote
	// attachment, or, on the kernel datapath, arriving on another
	// interface than the underlay's. 0 without a filter.
	Filtered uint64
}

// Inventory is what a fabric found on its switch. Each list is sorted by VNI,
// then IP.
type Inventory struct {
	// Local holds the local attachments that are whole: the interface with
	// its MAC address and exactly the flows CreateLocal installs.
	Local []LocalAttachment
	// Remote holds the remote attachments that are whole: exactly the
	// flows CreateRemote installs, all towards one host.
	Remote []RemoteAttachment

	// PartialLocal holds local attachments of which only some parts exist,
	// or exist differently: an interface without its flows (as after an
	// ovs-vswitchd restart), flows without their interface, or an
	// interface of another MTU than the fabric's. Creating
	// such an attachment repairs it; deleting it removes what is left.
	PartialLocal []LocalAttachment
	// PartialRemote holds remote attachments with missing or disagreeing
	// flows. HostIP is the one a flow names, if any.
	PartialRemote []RemoteAttachment

	// Policies holds the VNIs of the networks that have a policy on the
	// switch (SetPolicy), sorted. Whether a policy is the one wanted is
	// not checked: a restarted agent sets each network's policy again,
	// which costs one bundle, and clears those of networks it no longer
	// has.
	Policies []uint32
}

// Sort sorts each list of the inventory by VNI, then IP.
func (inv *Inventory) Sort() {
	for _, l := range [][]LocalAttachment{inv.Local, inv.PartialLocal} {
		slices.SortFunc(l, func(a, b LocalAttachment) int {
			return cmp.Or(cmp.Compare(a.VNI, b.VNI), a.IP.Compare(b.IP))
		})
	}
	for _, l := range [][]RemoteAttachment{inv.Remote, inv.PartialRemote} {
		slices.SortFunc(l, func(a, b RemoteAttachment) int {
			return cmp.Or(cmp.Compare(a.VNI, b.VNI), a.IP.Compare(b.IP))
		})
	}
	slices.Sort(inv.Policies)
}
