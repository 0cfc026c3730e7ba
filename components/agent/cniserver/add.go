package cniserver

// This file answers ADD: it plugs a veth pair into the pod as its
// attachment's port.

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/cni"
	"github.com/kos-sdn/kos/components/fabric"
)

// podPlug is what a request plugs: the pod's attachment, its address, and
// the veth pair.
type podPlug struct {
	key   string
	addr  fabric.LocalAttachment
	owner string
	veth  *veth
	// pod says that the attachment is a pod's (it has the pod-UID label):
	// the agent makes it no internal port, so the veth is its only port,
	// and a failed plug or a DEL leaves it none.
	pod bool
}

// podOwned reports whether an attachment is a pod's, labelled with its
// UID by kos-controller-manager.
func podOwned(att *v1alpha1.NetworkAttachment) bool {
	return att.Labels[v1alpha1.PodUIDLabel] != ""
}

// plugOwner is the owner recorded on the port of a pod's interface: the
// sandbox and interface a CNI request names.
func plugOwner(req *cni.Request) string { return req.ContainerID + "/" + req.IfName }

// add waits for the pod's attachment to be ready on this node, then
// plugs a veth pair into the pod as the attachment's port (a pod's
// attachment has none before; a plain one's internal port makes way), and
// returns the CNI result. An ADD of a sandbox and interface
// plugged already plugs them anew.
func (s *Server) add(ctx context.Context, req *cni.Request) (*types100.Result, *types.Error) {
	switch {
	case req.ContainerID == "" || req.IfName == "" || req.Netns == "":
		return nil, cniError(types.ErrInvalidEnvironmentVariables, "ADD needs a container ID, an interface name and a network namespace")
	case req.Pod.Namespace == "" || req.Pod.Name == "":
		return nil, cniError(types.ErrInvalidEnvironmentVariables, "CNI_ARGS names no pod (K8S_POD_NAMESPACE and K8S_POD_NAME)")
	case req.Subnet == "":
		return nil, cniError(types.ErrInvalidNetworkConfig, "network configuration %q names no subnet", req.Network)
	}
	prefix, cniErr := s.subnets.prefix(ctx, req.Pod.Namespace, req.Subnet, nil)
	if cniErr != nil {
		return nil, cniErr
	}
	wait := s.cfg.Wait
	if !isReplug(ctx) {
		if wait, cniErr = s.budgets.wait(req.ContainerID, s.cfg.Wait, s.cfg.TotalWait, time.Now()); cniErr != nil {
			return nil, cniErr
		}
	}
	att, addr, cniErr := s.awaitPodAttachment(ctx, req, wait)
	if cniErr != nil {
		return nil, cniErr
	}
	if att.Spec.Subnet != req.Subnet {
		return nil, cniError(types.ErrInvalidNetworkConfig, "NetworkAttachment %s is in subnet %s, but network %q names subnet %s", cache.MetaObjectToName(att).String(), att.Spec.Subnet, req.Network, req.Subnet)
	}
	// The prefix read before the wait may be of an earlier subnet of
	// that name; the attachment says which one its address is from.
	if prefix, cniErr = s.subnets.prefix(ctx, req.Pod.Namespace, req.Subnet, att.Status.SubnetCreationTime); cniErr != nil {
		return nil, cniErr
	}
	if err := checkRequestedIPs(req.IPs, addr.IP); err != nil {
		return nil, cniError(types.ErrInvalidNetworkConfig, "NetworkAttachment %s has address %s: %v", cache.MetaObjectToName(att).String(), addr.IP, err)
	}
	if err := checkRequestedMAC(req.MAC, addr.MAC()); err != nil {
		return nil, cniError(types.ErrInvalidNetworkConfig, "NetworkAttachment %s: %v", cache.MetaObjectToName(att).String(), err)
	}
	p := s.podPlugOf(ctx, req, cache.MetaObjectToName(att).String(), addr, prefix)
	p.pod = podOwned(att)
	if err := s.plug(ctx, p); err != nil {
		return nil, cniError(types.ErrInternal, "plugging interface %s of pod %s (NetworkAttachment %s, address %s): %v", req.IfName, req.Pod, p.key, addr.IP, err)
	}
	s.sandboxes.remember(ctx, p.key, req)
	return p.result(), nil
}

// podPlugOf returns what a request plugs for the attachment key at addr,
// in a subnet with prefix length bits.
func (s *Server) podPlugOf(ctx context.Context, req *cni.Request, key string, addr fabric.LocalAttachment, bits int) *podPlug {
	mac := addr.MAC()
	return &podPlug{
		key:   key,
		addr:  addr,
		owner: plugOwner(req),
		veth: &veth{
			hostNetns:         s.cfg.HostNetns,
			hostName:          v1alpha1.InterfaceName(mac),
			podNetns:          cni.NetnsPath(ctx, req.Netns),
			sandbox:           req.Netns,
			podName:           req.IfName,
			mac:               mac,
			addr:              netip.PrefixFrom(addr.IP, bits),
			mtu:               s.ports.MTU(),
			noChecksumOffload: s.cfg.NoChecksumOffload,
		},
	}
}

// result is the CNI 1.0 result of a plug: the pod's interface, its address
// and the route to its subnet, which the kernel made with the address.
func (p *podPlug) result() *types100.Result {
	v := p.veth
	subnet := v.addr.Masked()
	zero := 0
	return &types100.Result{
		CNIVersion: types100.ImplementedSpecVersion,
		Interfaces: []*types100.Interface{{Name: v.podName, Mac: v.mac.String(), Mtu: v.mtu, Sandbox: v.sandbox}},
		IPs: []*types100.IPConfig{{
			Interface: &zero,
			Address:   net.IPNet{IP: v.addr.Addr().AsSlice(), Mask: net.CIDRMask(v.addr.Bits(), 32)},
		}},
		Routes: []*types.Route{{Dst: net.IPNet{IP: subnet.Addr().AsSlice(), Mask: net.CIDRMask(subnet.Bits(), 32)}}},
	}
}

// checkRequestedIPs returns an error when a pod asked for addresses and
// has is none of them.
func checkRequestedIPs(ips []string, has netip.Addr) error {
	if len(ips) == 0 {
		return nil
	}
	for _, s := range ips {
		ip, err := netip.ParseAddr(s)
		if p, perr := netip.ParsePrefix(s); err != nil && perr == nil {
			ip, err = p.Addr(), nil
		}
		if err == nil && ip == has {
			return nil
		}
	}
	return fmt.Errorf("the pod asked for %s", strings.Join(ips, ", "))
}

// checkRequestedMAC returns an error when a pod asked for a MAC address
// (the "mac" capability) that is not has, the attachment's: KOS's flows and
// the host end's name follow from it, so it cannot be honoured.
func checkRequestedMAC(mac string, has net.HardwareAddr) error {
	if mac == "" {
		return nil
	}
	if hw, err := net.ParseMAC(mac); err == nil && bytes.Equal(hw, has) {
		return nil
	}
	return fmt.Errorf("the pod asked for MAC address %s, but a KOS interface has its attachment's, %s, which follows from its address: remove \"mac\" from the pod's network selection", mac, has)
}

// plug makes the pod's veth pair the attachment's port: it deletes the
// veth of an earlier sandbox (which has the name the new one needs), takes
// the port of that name off the switch if there is one, makes the pair and
// plugs its host end, which replaces the flows. A pod's attachment has no
// port before its first plug, so its ADD costs the plug alone. It holds the address's lock throughout, so that no sync
// or reconcile sees the attachment half plugged. On failure it leaves the
// attachment as the agent makes it: a plain one with an internal port, a
// pod's with none.
func (s *Server) plug(ctx context.Context, p *podPlug) (err error) {
	release, notHeld := s.agent.Hold(p.addr, p.key)
	defer release()
	if notHeld != nil {
		return fmt.Errorf("the switch no longer holds the attachment for it (%w); try again", notHeld)
	}
	defer func() {
		if err != nil {
			s.restorePort(ctx, p)
		}
	}()
	// A port the switch keeps for an interface of the name the veth
	// needs must go first: an earlier sandbox's veth (the switch would
	// not open the new one under its port), an internal port (a plain
	// attachment's, or one an older agent made for a pod's, or the
	// agent's repair of a pod's whose veth vanished).
	taken, err := deleteHostEnd(p.veth.hostNetns, p.veth.hostName)
	if err != nil {
		return fmt.Errorf("deleting the veth of an earlier sandbox: %w", err)
	}
	if !taken && p.pod {
		if taken, err = hostNameTaken(p.veth.hostNetns, p.veth.hostName); err != nil {
			return err
		}
	}
	if taken || !p.pod {
		// Only the port goes: PlugLocal replaces the flows it leaves.
		if err := s.ports.DeletePorts(ctx, p.addr); err != nil {
			s.agent.Lost(p.addr, p.key)
			return fmt.Errorf("taking the internal port off the switch: %w", err)
		}
	}
	if err := p.veth.add(); err != nil {
		return err
	}
	if err := s.ports.PlugLocal(ctx, fabric.Plug{LocalAttachment: p.addr, Owner: p.owner}); err != nil {
		return fmt.Errorf("plugging %s into the switch: %w", p.veth.hostName, err)
	}
	klog.FromContext(ctx).V(2).Info("Plugged a pod's interface", "attachment", p.key, "address", p.addr, "interface", p.veth.hostName)
	return nil
}

// restorePort deletes the pod's veth pair and leaves the attachment as the
// agent makes it: a pod's without a port (its port and flows go, until the
// next plug), a plain one with an internal port again; when that fails,
// the agent's sync repairs it.
func (s *Server) restorePort(ctx context.Context, p *podPlug) {
	if _, err := deleteHostEnd(p.veth.hostNetns, p.veth.hostName); err != nil {
		klog.FromContext(ctx).Error(err, "Deleting a pod's veth failed", "attachment", p.key)
	}
	if p.pod {
		if err := s.ports.DeleteLocal(ctx, p.addr); err != nil {
			klog.FromContext(ctx).Error(err, "Taking a pod's port off the switch failed; its sync repairs it", "attachment", p.key)
			s.agent.Lost(p.addr, p.key)
		}
		return
	}
	if err := s.ports.CreateLocal(ctx, p.addr); err != nil {
		klog.FromContext(ctx).Error(err, "Giving an attachment its internal port back failed; its sync repairs it", "attachment", p.key)
		s.agent.Lost(p.addr, p.key)
	}
}
