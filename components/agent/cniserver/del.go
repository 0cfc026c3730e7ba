package cniserver

// This file answers DEL: it unplugs the interface a sandbox got.

import (
	"context"
	"fmt"
	"slices"

	"k8s.io/klog/v2"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/cni"
	"github.com/kos-sdn/kos/components/fabric"
)

// del removes the interface a sandbox got: the pod's end of the veth
// pair, in the sandbox's namespace if it is still there, and the port, if
// the sandbox still owns it; a pod's attachment is left without a port
// (the pod's next sandbox plugs one), a plain one gets an internal port
// back. A DEL never fails: whatever it cannot remove goes with the
// sandbox's namespace, or with the attachment. A stale DEL (of an earlier
// sandbox) removes nothing of the current one: its namespace is another,
// and the port names another owner.
func (s *Server) del(ctx context.Context, req *cni.Request) {
	logger := klog.FromContext(ctx)
	if req.IfName == "" {
		return
	}
	if _, err := deletePodEnd(cni.NetnsPath(ctx, req.Netns), req.IfName); err != nil {
		logger.Error(err, "Deleting the pod's interface failed; it goes with the sandbox")
	}
	if req.Pod.Namespace == "" || req.Pod.Name == "" || req.ContainerID == "" {
		return
	}
	s.budgets.end(req.ContainerID)
	// The port names its sandbox and interface, so the attachment whose
	// port it is can be tried among those the interface may stand for:
	// the one remembered for it, the one named for it, and those Multus
	// may have shifted its name from (names.go).
	var keys []string
	if key, ok := s.sandboxes.keyOf(req.ContainerID, req.IfName); ok {
		keys = append(keys, key)
	}
	keys = append(keys, req.Pod.Namespace+"/"+v1alpha1.AttachmentName(req.Pod.Name, req.IfName))
	if _, ok := generatedNumber(req.IfName); ok {
		for _, att := range shiftedCandidates(req, s.agent.PodAttachments(req.Pod.Namespace, req.Pod.Name)) {
			keys = append(keys, att.Namespace+"/"+att.Name)
		}
	}
	seen := map[string]bool{}
	for _, key := range keys {
		if seen[key] {
			continue
		}
		seen[key] = true
		s.sandboxes.forget(key, req.ContainerID)
		att, exists := s.agent.CachedAttachment(key)
		if !exists {
			continue // its port went with it
		}
		addr, ok := s.agent.Address(att)
		if !ok {
			continue
		}
		p := &podPlug{key: key, addr: addr, owner: plugOwner(req), veth: &veth{hostNetns: s.cfg.HostNetns, hostName: addr.InterfaceName()}, pod: podOwned(att)}
		unplugged, err := s.unplug(ctx, p)
		if err != nil {
			logger.Error(err, "Unplugging the pod's interface failed", "attachment", key)
		}
		if unplugged || err != nil {
			return
		}
	}
}

// unplug takes the plug's port off the switch if the plug's owner still
// owns it, and gives a plain attachment an internal port again if the
// agent holds it as local; a pod's attachment gets none. unplugged says
// that the port was the plug owner's.
func (s *Server) unplug(ctx context.Context, p *podPlug) (unplugged bool, err error) {
	release, notHeld := s.agent.Hold(p.addr, p.key)
	defer release()
	plugs, err := s.ports.Plugs(ctx, p.addr)
	if err != nil {
		return false, fmt.Errorf("reading the attachment's port: %w", err)
	}
	if !slices.ContainsFunc(plugs, func(pl fabric.Plug) bool { return pl.Owner == p.owner }) {
		klog.FromContext(ctx).V(2).Info("The port is not the sandbox's; leaving it", "attachment", p.key, "plugs", plugs)
		return false, nil
	}
	// A plain attachment the agent still holds gets an internal port
	// back, whose CreateLocal replaces the flows: only the port goes
	// first.
	if notHeld == nil && !p.pod {
		if err := s.ports.DeletePorts(ctx, p.addr); err != nil {
			s.agent.Lost(p.addr, p.key)
			return true, fmt.Errorf("taking the pod's port off the switch: %w", err)
		}
		s.restorePort(ctx, p)
	} else {
		if err := s.ports.DeleteLocal(ctx, p.addr); err != nil {
			s.agent.Lost(p.addr, p.key)
			return true, fmt.Errorf("taking the pod's port off the switch: %w", err)
		}
		if _, err := deleteHostEnd(p.veth.hostNetns, p.veth.hostName); err != nil {
			return true, fmt.Errorf("deleting the pod's veth: %w", err)
		}
	}
	klog.FromContext(ctx).V(2).Info("Unplugged a pod's interface", "attachment", p.key, "address", p.addr)
	return true, nil
}
