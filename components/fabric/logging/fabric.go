// Package logging is a fabric that programs nothing: it logs each operation
// with klog and remembers, in memory, what a real switch would hold. It lets
// many agents run on one machine for scale tests, and is a faithful fake
// for the agent's tests: it validates as the OVS fabric does, lists whole
// and partial attachments alike, and can lose its flows on request as an
// ovs-vswitchd restart does.
package logging

import (
	"context"
	"errors"
	"net/netip"
	"sync"

	"k8s.io/klog/v2"

	"github.com/kos-sdn/kos/components/fabric"
)

// key names an attachment: a VNI and an IP name at most one, local or remote.
type key struct {
	vni uint32
	ip  netip.Addr
}

// local is what exists of a local attachment.
type local struct {
	att fabric.LocalAttachment
	// mtu is its interface's MTU, the fabric's when it was created.
	mtu int
	// owner is the owner of its interface when one was plugged
	// (PlugLocal), "" for an internal port.
	owner string
	// flowsWhole is false when some of its flows are gone: after LoseFlows,
	// or after a remote attachment with its VNI and IP took them over.
	flowsWhole bool
}

// Fabric logs and remembers. It implements fabric.Interface and is safe for
// concurrent use.
type Fabric struct {
	mu           sync.Mutex
	mtu          int
	tunnelPort   int
	defaultFlows bool
	local        map[key]local
	remote       map[key]fabric.RemoteAttachment
	// policies holds the policies that isolate something, by VNI.
	policies map[uint32]fabric.NetworkPolicy
}

var _ fabric.Interface = (*Fabric)(nil)

// New returns an empty fabric: no default flows, no attachments, and MTU
// 0 until SetMTU.
func New() *Fabric {
	return &Fabric{local: map[key]local{}, remote: map[key]fabric.RemoteAttachment{}, policies: map[uint32]fabric.NetworkPolicy{}}
}

// Ensure installs the default flows unless they are there, and says so.
func (f *Fabric) Ensure(ctx context.Context) (flowsLost bool, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	lost := !f.defaultFlows
	f.defaultFlows = true
	if lost {
		klog.FromContext(ctx).V(2).Info("Installed the default flows")
	}
	return lost, nil
}

// CreateLocal records local attachments as whole. One that had a remote
// attachment's VNI and IP replaces it, as its flows would on a switch. One
// with a plugged interface keeps it.
func (f *Fabric) CreateLocal(ctx context.Context, atts ...fabric.LocalAttachment) error {
	if err := validateAll(atts); err != nil {
		return err
	}
	logger := klog.FromContext(ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, a := range atts {
		k := key{a.VNI, a.IP}
		if l, ok := f.local[k]; ok && l.owner != "" {
			l.flowsWhole = true
			f.local[k] = l
			delete(f.remote, k)
			logger.V(2).Info("Repaired plugged local attachment", "vni", a.VNI, "ip", a.IP, "owner", l.owner)
			continue
		}
		f.local[k] = local{att: a, mtu: f.mtu, flowsWhole: true}
		delete(f.remote, k)
		logger.V(2).Info("Created local attachment", "vni", a.VNI, "ip", a.IP, "mac", a.MAC().String(), "interface", a.InterfaceName(), "mtu", f.mtu)
	}
	return nil
}

// DeleteLocal forgets local attachments.
func (f *Fabric) DeleteLocal(ctx context.Context, atts ...fabric.LocalAttachment) error {
	if err := validateAll(atts); err != nil {
		return err
	}
	logger := klog.FromContext(ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, a := range atts {
		delete(f.local, key{a.VNI, a.IP})
		logger.V(2).Info("Deleted local attachment", "vni", a.VNI, "ip", a.IP, "interface", a.InterfaceName())
	}
	return nil
}

// PlugLocal records local attachments as whole, with plugged interfaces.
func (f *Fabric) PlugLocal(ctx context.Context, plugs ...fabric.Plug) error {
	if err := validateAll(plugs); err != nil {
		return err
	}
	logger := klog.FromContext(ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range plugs {
		k := key{p.VNI, p.IP}
		f.local[k] = local{att: p.LocalAttachment, owner: p.Owner, flowsWhole: true}
		delete(f.remote, k)
		logger.V(2).Info("Plugged local attachment", "vni", p.VNI, "ip", p.IP, "interface", p.InterfaceName(), "owner", p.Owner)
	}
	return nil
}

// DeletePorts records local attachments as partial, without a plugged
// interface: their flows remain, as on a switch, but no port.
func (f *Fabric) DeletePorts(ctx context.Context, atts ...fabric.LocalAttachment) error {
	if err := validateAll(atts); err != nil {
		return err
	}
	logger := klog.FromContext(ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, a := range atts {
		k := key{a.VNI, a.IP}
		if l, ok := f.local[k]; ok {
			l.owner, l.flowsWhole = "", false
			f.local[k] = l
		}
		logger.V(2).Info("Deleted the port of local attachment", "vni", a.VNI, "ip", a.IP, "interface", a.InterfaceName())
	}
	return nil
}

// Plugs returns those of atts with plugged interfaces.
func (f *Fabric) Plugs(ctx context.Context, atts ...fabric.LocalAttachment) ([]fabric.Plug, error) {
	if err := validateAll(atts); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var plugs []fabric.Plug
	for _, a := range atts {
		if l, ok := f.local[key{a.VNI, a.IP}]; ok && l.owner != "" {
			plugs = append(plugs, fabric.Plug{LocalAttachment: l.att, Owner: l.owner})
		}
	}
	return plugs, nil
}

// CreateRemote records remote attachments, replacing one with the same VNI
// and IP. A local attachment with that VNI and IP keeps its interface but
// loses the flows that deliver to it, and so becomes partial.
func (f *Fabric) CreateRemote(ctx context.Context, atts ...fabric.RemoteAttachment) error {
	if err := validateAll(atts); err != nil {
		return err
	}
	logger := klog.FromContext(ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, a := range atts {
		k := key{a.VNI, a.IP}
		f.remote[k] = a
		if l, ok := f.local[k]; ok {
			l.flowsWhole = false
			f.local[k] = l
		}
		logger.V(2).Info("Created remote attachment", "vni", a.VNI, "ip", a.IP, "mac", a.MAC().String(), "hostIP", a.HostIP)
	}
	return nil
}

// DeleteRemote forgets remote attachments; only their VNI and IP matter.
func (f *Fabric) DeleteRemote(ctx context.Context, atts ...fabric.RemoteAttachment) error {
	var errs []error
	for _, a := range atts {
		if err := (fabric.LocalAttachment{VNI: a.VNI, IP: a.IP}).Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	logger := klog.FromContext(ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, a := range atts {
		delete(f.remote, key{a.VNI, a.IP})
		logger.V(2).Info("Deleted remote attachment", "vni", a.VNI, "ip", a.IP)
	}
	return nil
}

// SetPolicy records a network's policy, or forgets it when it isolates no
// attachment, as a switch would hold no flows for it.
func (f *Fabric) SetPolicy(ctx context.Context, p fabric.NetworkPolicy) error {
	if err := p.Validate(); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if p.Isolates() {
		f.policies[p.VNI] = p
	} else {
		delete(f.policies, p.VNI)
	}
	klog.FromContext(ctx).V(2).Info("Set the policy of a network", "vni", p.VNI, "policies", len(p.Policies), "isolates", p.Isolates())
	return nil
}

// Policy returns the policy recorded for a network, if any.
func (f *Fabric) Policy(vni uint32) (fabric.NetworkPolicy, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.policies[vni]
	return p, ok
}

// List returns what the fabric holds.
func (f *Fabric) List(ctx context.Context) (*fabric.Inventory, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	inv := &fabric.Inventory{}
	for _, l := range f.local {
		// A plugged interface keeps its maker's MTU, as on a switch.
		if l.flowsWhole && (l.mtu == f.mtu || l.owner != "") {
			inv.Local = append(inv.Local, l.att)
		} else {
			inv.PartialLocal = append(inv.PartialLocal, l.att)
		}
	}
	for _, r := range f.remote {
		inv.Remote = append(inv.Remote, r)
	}
	for vni := range f.policies {
		inv.Policies = append(inv.Policies, vni)
	}
	inv.Sort()
	return inv, nil
}

// MTU returns the MTU of the interfaces CreateLocal makes.
func (f *Fabric) MTU() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mtu
}

// SetMTU sets the MTU of the interfaces CreateLocal makes from now on. The
// local attachments made with another become partial, as on a switch that
// an agent with another MTU lists.
func (f *Fabric) SetMTU(mtu int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mtu = mtu
}

// TunnelPort returns the tunnels' UDP port: fabric.DefaultTunnelPort
// until SetTunnelPort.
func (f *Fabric) TunnelPort() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.tunnelPort == 0 {
		return fabric.DefaultTunnelPort
	}
	return f.tunnelPort
}

// SetTunnelPort sets the tunnels' UDP port, which it only remembers.
func (f *Fabric) SetTunnelPort(port int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tunnelPort = port
}

// LoseFlows forgets every flow, as an ovs-vswitchd restart does: the
// default flows, remote attachments and policies are gone, and local
// attachments keep only their interfaces.
func (f *Fabric) LoseFlows() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.defaultFlows = false
	clear(f.remote)
	clear(f.policies)
	for k, l := range f.local {
		l.flowsWhole = false
		f.local[k] = l
	}
	klog.V(2).InfoS("Lost every flow")
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
