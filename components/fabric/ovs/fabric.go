// Package ovs is the fabric that programs Open vSwitch: one bridge with a
// VXLAN tunnel port, a port per local attachment (an internal port, or an
// interface its caller plugged, such as the host end of a pod's veth pair),
// and the OpenFlow flows that join them, through the ovs-vsctl and ovs-ofctl
// tools (github.com/digitalocean/go-openvswitch runs ovs-ofctl) and, for
// the ports PlugLocal adds, a kept connection to ovsdb-server (ovsdb.go).
//
// Which flows KOS wants is in flows.go, as values; how to get them into the
// switch is in switch.go. Every flow carries a cookie naming the attachment
// it belongs to, so listing and deleting need no memory of what was
// installed: a restarted agent reads it all back from the switch.
//
// The tunnel port sends and receives on Config.TunnelPort; a TunnelFilter
// (peers.go: nftables on the kernel datapath, package tunnelfilter; flows
// on the underlay bridge on the userspace one, underlay.go) keeps that UDP
// port closed to all but the nodes of the remote attachments on the
// switch.
//
// Flow changes go out in OpenFlow bundles, atomically; changes that
// concurrent callers make while a bundle is in flight share the next one
// (batch.go), because each ovs-ofctl run costs as much as a thousand flows.
//
// The package talks to OVS only; it never imports client-go.
package ovs

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	goovs "github.com/digitalocean/go-openvswitch/ovs"
	"k8s.io/klog/v2"

	"github.com/kos-sdn/kos/components/fabric"
)

// Defaults for Config.
const (
	DefaultBridge  = "kos"
	DefaultTimeout = 30 * time.Second
)

// TunnelPort is the name of the bridge's VXLAN port.
const TunnelPort = "vtep"

// The external IDs of a local attachment's interface, which say what it is
// for when the agent lists the switch after a restart.
const (
	externalIDVNI = "kos-vni"
	externalIDIP  = "kos-ip"
	// externalIDOwner marks a plugged interface (PlugLocal) and says who
	// plugged it.
	externalIDOwner = "kos-owner"
)

// Config says which Open vSwitch to program and how.
type Config struct {
	// Bridge is the bridge to own; DefaultBridge when empty.
	Bridge string
	// DatapathType is the bridge's datapath_type. Empty leaves OVS's
	// default, the kernel datapath of real nodes; "netdev" selects the
	// userspace datapath, which needs no kernel module.
	DatapathType string
	// RunDir is the OVS run dir (OVS_RUNDIR), which selects the OVS
	// instance when several run on one machine; empty for the default.
	RunDir string
	// Timeout bounds each OVS command; DefaultTimeout when zero.
	Timeout time.Duration
	// MTU is the MTU of the local attachments' interfaces, which the
	// fabric asks OVS for (the Interface table's mtu_request) and List
	// checks. Zero leaves them at OVS's default, the MTU the device is
	// made with, and List does not check it.
	MTU int
	// TunnelPort is the UDP port of the VXLAN tunnels, on which the
	// tunnel port sends and receives (its options:dst_port);
	// fabric.DefaultTunnelPort when zero.
	TunnelPort int
	// Filter, when set, keeps the tunnel's UDP port closed to all but
	// the nodes of the remote attachments on the switch (TunnelFilter);
	// nil leaves it open to any sender, whose packets the flows then
	// drop.
	Filter TunnelFilter
}

// Fabric programs one bridge of one Open vSwitch. It implements
// fabric.Interface and is safe for concurrent use.
type Fabric struct {
	bridge       string
	datapathType string
	// mtu is the MTU CreateLocal gives interfaces; SetMTU changes it.
	mtu atomic.Int64
	// udpPort is the tunnels' UDP port; SetTunnelPort changes it and the
	// next Ensure moves the tunnel port to it.
	udpPort atomic.Int64
	// peers keeps the tunnel filter in line with the remote
	// attachments' nodes; it does nothing without a filter.
	peers *peers
	ovs   *ovsClient
	flows *flowBatcher
	// plugs runs the PlugLocal calls that arrive together as one.
	plugs *groupCommit[fabric.Plug]

	mu sync.Mutex
	// tunnelPort is the OpenFlow number of the tunnel port, 0 while
	// unknown. OVS keeps port numbers across restarts of ovs-vswitchd, but
	// Ensure re-reads it all the same.
	tunnelPort int
	// gates says, by VNI, whether the network's policy gate is on the
	// switch, as SetPolicy last left it; a network not in it is read from
	// the switch. Only SetPolicy changes policy flows, so it stays true
	// until the switch loses its flows, which Ensure finds and then
	// forgets it all.
	gates map[uint32]bool
}

var _ fabric.Interface = (*Fabric)(nil)

// New returns a fabric for the bridge cfg names. It does not touch the
// switch: call Ensure first.
func New(cfg Config) *Fabric {
	if cfg.Bridge == "" {
		cfg.Bridge = DefaultBridge
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	client := newOVSClient(cfg.RunDir, cfg.Timeout)
	f := &Fabric{
		bridge:       cfg.Bridge,
		datapathType: cfg.DatapathType,
		ovs:          client,
		flows:        &flowBatcher{ovs: client, bridge: cfg.Bridge},
	}
	f.plugs = &groupCommit[fabric.Plug]{do: f.plugLocal}
	f.mtu.Store(int64(cfg.MTU))
	if cfg.TunnelPort == 0 {
		cfg.TunnelPort = fabric.DefaultTunnelPort
	}
	f.udpPort.Store(int64(cfg.TunnelPort))
	f.peers = newPeers(cfg.Filter)
	return f
}

// Ensure creates the bridge and its tunnel port unless they exist, sets
// the tunnel port's UDP port (TunnelPort), and installs the default flows
// unless they are there; flowsLost says it had to. It also learns the
// tunnel port's number anew, sets the bridge's fragment handling to
// nx-match, and, with a filter, makes the filter what the remote
// attachments on the switch want (repairing it if someone changed it).
func (f *Fabric) Ensure(ctx context.Context) (flowsLost bool, err error) {
	if err := f.ovs.ensureBridge(ctx, f.bridge, f.datapathType, TunnelPort, f.TunnelPort()); err != nil {
		return false, err
	}
	if err := f.peers.ensure(ctx, f.TunnelPort(), f.remoteHosts); err != nil {
		return false, err
	}
	// Show the ports of a datagram's first fragment to the flow tables,
	// where network policy checks them (by default they read as 0). The
	// setting is ovs-vswitchd's, not the database's, and a restart
	// forgets it: set it every time.
	if _, err := f.ofctl(ctx, "set-frags", f.bridge, "nx-match"); err != nil {
		return false, fmt.Errorf("setting the fragment handling of bridge %s: %w", f.bridge, err)
	}
	vtep, err := f.refreshTunnelPort(ctx)
	if err != nil {
		return false, err
	}
	c := cookie(kindDefault, 0, netip.Addr{})
	got, err := f.ovs.dumpFlows(ctx, f.bridge, flowsWithCookie(c))
	if err != nil {
		return false, err
	}
	want := defaultFlows(vtep)
	if sameFlows(got, want) {
		return false, nil
	}
	// The switch lost its flows (ovs-vswitchd restarted, or someone
	// deleted them): what SetPolicy knew of its policy gates is stale.
	f.forgetGates()
	if err := f.flows.apply(ctx, []*goovs.MatchFlow{flowsWithCookie(c)}, want); err != nil {
		return false, fmt.Errorf("installing the default flows: %w", err)
	}
	klog.FromContext(ctx).V(2).Info("Installed the default flows", "bridge", f.bridge, "found", len(got))
	return true, nil
}

// CreateLocal creates or repairs local attachments: their internal ports,
// with the fabric's MTU, in one ovs-vsctl transaction, then all their flows in one bundle that
// first deletes whatever flows they had. An attachment whose port is a
// plugged interface keeps it: only its flows are repaired, unless OVS could
// not open the interface (it is gone), which an internal port then
// replaces. Telling these apart costs one read of their Interface rows
// first.
func (f *Fabric) CreateLocal(ctx context.Context, atts ...fabric.LocalAttachment) error {
	if err := validateAll(atts); err != nil {
		return err
	}
	if len(atts) == 0 {
		return nil
	}
	names := make([]string, 0, len(atts))
	for _, a := range atts {
		names = append(names, a.InterfaceName())
	}
	existing, err := f.ovs.interfacesIfExist(ctx, names...)
	if err != nil {
		return err
	}
	keep := make(map[string]bool, len(existing))
	var gone []string
	for _, r := range existing {
		switch {
		case plugged(r) && r.OFPort < 0:
			// OVS could not open the plugged interface: it is gone, as
			// a pod's veth is after a reboot. An internal port takes its
			// place until the pod is plugged again; without one the
			// attachment could not be created, nor the others with it.
			gone = append(gone, r.Name)
		case plugged(r):
			keep[r.Name] = true
		}
	}
	if len(gone) > 0 {
		if err := f.ovs.deletePorts(ctx, f.bridge, gone); err != nil {
			return err
		}
	}
	ports := make([]internalPort, 0, len(atts))
	for _, a := range atts {
		if keep[a.InterfaceName()] {
			continue
		}
		ports = append(ports, internalPort{
			name:        a.InterfaceName(),
			mac:         a.MAC().String(),
			mtu:         f.MTU(),
			externalIDs: attachmentIDs(a),
		})
	}
	if len(ports) > 0 {
		if err := f.ovs.addInternalPorts(ctx, f.bridge, ports); err != nil {
			return err
		}
	}
	if err := f.installLocalFlows(ctx, atts, names); err != nil {
		return err
	}
	klog.FromContext(ctx).V(4).Info("Created local attachments", "bridge", f.bridge, "count", len(atts))
	return nil
}

// attachmentIDs returns the external IDs that say which attachment a port
// is for.
func attachmentIDs(a fabric.LocalAttachment) map[string]string {
	return map[string]string{
		externalIDVNI: strconv.FormatUint(uint64(a.VNI), 10),
		externalIDIP:  a.IP.String(),
	}
}

// PlugLocal makes the interfaces the caller made the ports of local
// attachments, in one ovs-vsctl transaction, then installs their flows in
// one bundle that first deletes whatever flows they had. It asks OVS for
// no MTU: the interface keeps the one its maker gave it, which the pod's
// end of the pair has too. Calls that arrive while another runs go
// together in the next transaction and bundle: a node's ADDs at the same
// time cost three tool runs in all, not three each.
func (f *Fabric) PlugLocal(ctx context.Context, plugs ...fabric.Plug) error {
	if err := validateAll(plugs); err != nil {
		return err
	}
	if len(plugs) == 0 {
		return nil
	}
	return f.plugs.run(ctx, plugs)
}

// plugLocal is PlugLocal for one batch of plugs.
func (f *Fabric) plugLocal(ctx context.Context, plugs []fabric.Plug) error {
	ports := make([]systemPort, 0, len(plugs))
	atts := make([]fabric.LocalAttachment, 0, len(plugs))
	names := make([]string, 0, len(plugs))
	for _, p := range plugs {
		ids := attachmentIDs(p.LocalAttachment)
		ids[externalIDOwner] = p.Owner
		ports = append(ports, systemPort{name: p.InterfaceName(), externalIDs: ids})
		atts = append(atts, p.LocalAttachment)
		names = append(names, p.InterfaceName())
	}
	// Over OVSDB a plug costs one ovs-ofctl run (the bundle) and no
	// ovs-vsctl: the port's transaction and the wait for its OpenFlow
	// number go over the kept connection. ovs-vsctl still does what that
	// does not: a port of the name on the switch already (--may-exist),
	// and a switch whose database socket the agent cannot reach.
	rows, err := f.ovs.addSystemPortsDirect(ctx, f.bridge, ports)
	if err != nil {
		klog.FromContext(ctx).V(3).Info("Plugging over OVSDB did not work; running ovs-vsctl", "bridge", f.bridge, "count", len(plugs), "err", err)
		if err := f.ovs.addSystemPorts(ctx, f.bridge, ports); err != nil {
			return err
		}
		if rows, err = f.ovs.interfaces(ctx, names...); err != nil {
			return err
		}
	}
	if err := f.installLocalFlowsAt(ctx, atts, rows); err != nil {
		return err
	}
	klog.FromContext(ctx).V(4).Info("Plugged local attachments", "bridge", f.bridge, "count", len(plugs))
	return nil
}

// DeletePorts deletes the ports of local attachments in one OVSDB
// transaction and leaves their flows. OVS does not give a freed OpenFlow
// port number to a new port while others are free (ofproto allocates the
// least recently used), so the flows left behind match no port until
// PlugLocal or CreateLocal replaces them.
func (f *Fabric) DeletePorts(ctx context.Context, atts ...fabric.LocalAttachment) error {
	if err := validateAll(atts); err != nil {
		return err
	}
	if len(atts) == 0 {
		return nil
	}
	names := make([]string, 0, len(atts))
	for _, a := range atts {
		names = append(names, a.InterfaceName())
	}
	if err := f.ovs.deletePorts(ctx, f.bridge, names); err != nil {
		return err
	}
	klog.FromContext(ctx).V(4).Info("Deleted the ports of local attachments", "bridge", f.bridge, "count", len(atts))
	return nil
}

// Plugs reads the Interface rows of atts and returns those that are
// plugged.
func (f *Fabric) Plugs(ctx context.Context, atts ...fabric.LocalAttachment) ([]fabric.Plug, error) {
	if err := validateAll(atts); err != nil {
		return nil, err
	}
	if len(atts) == 0 {
		return nil, nil
	}
	names := make([]string, 0, len(atts))
	for _, a := range atts {
		names = append(names, a.InterfaceName())
	}
	rows, err := f.ovs.interfacesIfExist(ctx, names...)
	if err != nil {
		return nil, err
	}
	var plugs []fabric.Plug
	for _, r := range rows {
		if att, ok := attachmentOf(r); ok && plugged(r) {
			plugs = append(plugs, fabric.Plug{LocalAttachment: att, Owner: r.ExternalIDs[externalIDOwner]})
		}
	}
	return plugs, nil
}

// plugged reports whether an interface is one that PlugLocal plugged.
func plugged(r interfaceRow) bool {
	return r.ExternalIDs[externalIDOwner] != "" && (r.Type == "" || r.Type == "system")
}

// installLocalFlows installs the flows of local attachments whose
// interfaces, named names, are on the bridge: it reads their OpenFlow port
// numbers, then replaces their flows in one bundle.
func (f *Fabric) installLocalFlows(ctx context.Context, atts []fabric.LocalAttachment, names []string) error {
	rows, err := f.ovs.interfaces(ctx, names...)
	if err != nil {
		return err
	}
	return f.installLocalFlowsAt(ctx, atts, rows)
}

// installLocalFlowsAt installs the flows of local attachments whose
// interfaces have the Interface rows rows, in one bundle that first
// deletes whatever flows they had.
func (f *Fabric) installLocalFlowsAt(ctx context.Context, atts []fabric.LocalAttachment, rows []interfaceRow) error {
	ofports := make(map[string]int, len(rows))
	for _, r := range rows {
		if r.OFPort <= 0 {
			return fmt.Errorf("interface %s has no OpenFlow port (ofport %d): %s", r.Name, r.OFPort, r.Error)
		}
		ofports[r.Name] = r.OFPort
	}
	deletes := make([]*goovs.MatchFlow, 0, 2*len(atts))
	adds := make([]*goovs.Flow, 0, 4*len(atts))
	for _, a := range atts {
		port, ok := ofports[a.InterfaceName()]
		if !ok {
			return fmt.Errorf("interface %s of %v vanished while being created", a.InterfaceName(), a)
		}
		// A local attachment replaces a remote one of the same address
		// (fabric.Interface): its forwarding flows take the remote
		// one's place, and the remote one's tunnel ingress flow, which
		// no local flow overwrites, goes with them.
		deletes = append(deletes, flowsWithCookie(cookie(kindLocal, a.VNI, a.IP)), flowsWithCookie(cookie(kindRemote, a.VNI, a.IP)))
		adds = append(adds, localFlows(a, port)...)
	}
	return f.flows.apply(ctx, deletes, adds)
}

// DeleteLocal deletes local attachments: their flows in one bundle, then
// their ports in one OVSDB transaction.
func (f *Fabric) DeleteLocal(ctx context.Context, atts ...fabric.LocalAttachment) error {
	if err := validateAll(atts); err != nil {
		return err
	}
	if len(atts) == 0 {
		return nil
	}
	deletes := make([]*goovs.MatchFlow, 0, len(atts))
	names := make([]string, 0, len(atts))
	for _, a := range atts {
		deletes = append(deletes, flowsWithCookie(cookie(kindLocal, a.VNI, a.IP)))
		names = append(names, a.InterfaceName())
	}
	if err := f.flows.apply(ctx, deletes, nil); err != nil {
		return err
	}
	if err := f.ovs.deletePorts(ctx, f.bridge, names); err != nil {
		return err
	}
	klog.FromContext(ctx).V(4).Info("Deleted local attachments", "bridge", f.bridge, "count", len(atts))
	return nil
}

// CreateRemote creates, updates or repairs remote attachments: one bundle
// that first deletes whatever flows they had, then adds theirs.
func (f *Fabric) CreateRemote(ctx context.Context, atts ...fabric.RemoteAttachment) error {
	if err := validateAll(atts); err != nil {
		return err
	}
	if len(atts) == 0 {
		return nil
	}
	vtep, err := f.tunnelPortNumber(ctx)
	if err != nil {
		return err
	}
	// The filter admits a new host before the flows admit its packets.
	if err := f.peers.admit(ctx, f.TunnelPort(), atts, f.remoteHosts); err != nil {
		return err
	}
	deletes := make([]*goovs.MatchFlow, 0, len(atts))
	adds := make([]*goovs.Flow, 0, 2*len(atts))
	for _, a := range atts {
		deletes = append(deletes, flowsWithCookie(cookie(kindRemote, a.VNI, a.IP)))
		adds = append(adds, remoteFlows(a, vtep)...)
	}
	if err := f.flows.apply(ctx, deletes, adds); err != nil {
		return err
	}
	klog.FromContext(ctx).V(4).Info("Created remote attachments", "bridge", f.bridge, "count", len(atts))
	return nil
}

// DeleteRemote deletes the flows of remote attachments in one bundle.
func (f *Fabric) DeleteRemote(ctx context.Context, atts ...fabric.RemoteAttachment) error {
	if len(atts) == 0 {
		return nil
	}
	deletes := make([]*goovs.MatchFlow, 0, len(atts))
	for _, a := range atts {
		// Only VNI and IP name the flows; a HostIP is not needed.
		if err := (fabric.LocalAttachment{VNI: a.VNI, IP: a.IP}).Validate(); err != nil {
			return fmt.Errorf("deleting remote attachment %v: %w", a, err)
		}
		deletes = append(deletes, flowsWithCookie(cookie(kindRemote, a.VNI, a.IP)))
	}
	if err := f.flows.apply(ctx, deletes, nil); err != nil {
		return err
	}
	// The filter drops a host's packets once no flow admits them.
	if err := f.peers.forget(ctx, f.TunnelPort(), atts); err != nil {
		return err
	}
	klog.FromContext(ctx).V(4).Info("Deleted remote attachments", "bridge", f.bridge, "count", len(atts))
	return nil
}

// Drops reads the packet counts of the default flows that drop what
// classifyTable does not admit: one dump of the handful of flows with the
// default cookie, and the tunnel filter's count, if it has one. The counts
// start again from zero whenever Ensure re-installs the default flows (the
// filter's, whenever its rules are remade).
func (f *Fabric) Drops(ctx context.Context) (fabric.Drops, error) {
	flows, err := f.ovs.dumpFlows(ctx, f.bridge, flowsWithCookie(cookie(kindDefault, 0, netip.Addr{})))
	if err != nil {
		return fabric.Drops{}, err
	}
	var d fabric.Drops
	for _, fl := range flows {
		if fl.Table != classifyTable {
			continue
		}
		switch fl.Priority {
		case tunnelDropPriority:
			d.Tunnel += fl.Stats.PacketCount
		case defaultPriority:
			d.Spoofed += fl.Stats.PacketCount
		}
	}
	if c, ok := f.peers.filter.(filterDropCounter); ok {
		if d.Filtered, err = c.Drops(ctx); err != nil {
			return fabric.Drops{}, fmt.Errorf("reading the tunnel filter's drops: %w", err)
		}
	}
	return d, nil
}

// filterDropCounter is a tunnel filter that counts what it drops (both
// filters of KOS do).
type filterDropCounter interface {
	Drops(ctx context.Context) (uint64, error)
}

// MTU returns the MTU of the interfaces CreateLocal makes; 0 when OVS
// chooses.
func (f *Fabric) MTU() int { return int(f.mtu.Load()) }

// SetMTU sets the MTU of the interfaces CreateLocal makes from now on.
// Internal ports made with another become partial in List, and a
// reconcile asks OVS for the new MTU; plugged interfaces keep their
// maker's.
func (f *Fabric) SetMTU(mtu int) { f.mtu.Store(int64(mtu)) }

// TunnelPort returns the tunnels' UDP port.
func (f *Fabric) TunnelPort() int { return int(f.udpPort.Load()) }

// SetTunnelPort sets the tunnels' UDP port. The next Ensure moves the
// tunnel port, and the filter, to it; its OpenFlow number, and with it
// every flow, stays. Until every node has moved, nodes on the old port and
// nodes on the new one drop each other's tunnel packets.
func (f *Fabric) SetTunnelPort(port int) { f.udpPort.Store(int64(port)) }

// tunnelPortNumber returns the tunnel port's OpenFlow number, reading it if
// it is not known yet.
func (f *Fabric) tunnelPortNumber(ctx context.Context) (int, error) {
	f.mu.Lock()
	port := f.tunnelPort
	f.mu.Unlock()
	if port > 0 {
		return port, nil
	}
	return f.refreshTunnelPort(ctx)
}

func (f *Fabric) refreshTunnelPort(ctx context.Context) (int, error) {
	rows, err := f.ovs.interfaces(ctx, TunnelPort)
	if err != nil {
		return 0, err
	}
	if len(rows) != 1 || rows[0].OFPort <= 0 {
		var why string
		if len(rows) == 1 {
			why = rows[0].Error
		}
		return 0, fmt.Errorf("tunnel port %s has no OpenFlow port number: %s", TunnelPort, why)
	}
	f.mu.Lock()
	f.tunnelPort = rows[0].OFPort
	f.mu.Unlock()
	return rows[0].OFPort, nil
}

func validateAll[A interface{ Validate() error }](atts []A) error {
	var errs []error
	for _, a := range atts {
		if err := a.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
