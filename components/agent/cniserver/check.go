package cniserver

// This file answers CHECK: is a sandbox's interface as its ADD left it.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"k8s.io/client-go/tools/cache"

	"github.com/kos-sdn/kos/components/cni"
	"github.com/kos-sdn/kos/components/fabric"
)

// check checks that a sandbox's interface is as its ADD left it: the
// attachment ready, its port the sandbox's, and the pod's end of the veth
// pair with the attachment's MAC address, address and MTU.
func (s *Server) check(ctx context.Context, req *cni.Request) *types.Error {
	if req.ContainerID == "" || req.IfName == "" || req.Netns == "" || req.Pod.Namespace == "" || req.Pod.Name == "" {
		return cniError(types.ErrInvalidEnvironmentVariables, "CHECK needs a container ID, an interface name, a network namespace and the pod (K8S_POD_NAMESPACE and K8S_POD_NAME)")
	}
	att, why := s.podAttachment(req)
	if att == nil {
		return cniError(types.ErrInternal, "%s", why)
	}
	addr, ok := s.agent.Address(att)
	if !ok {
		return cniError(types.ErrInternal, "NetworkAttachment %s has no address", cache.MetaObjectToName(att).String())
	}
	if why := s.agent.NotReady(att, addr); why != "" {
		return cniError(types.ErrInternal, "%s", why)
	}
	prefix, cniErr := s.subnets.prefix(ctx, req.Pod.Namespace, att.Spec.Subnet, att.Status.SubnetCreationTime)
	if cniErr != nil {
		return cniErr
	}
	p := s.podPlugOf(ctx, req, cache.MetaObjectToName(att).String(), addr, prefix)
	plugs, err := s.ports.Plugs(ctx, addr)
	if err != nil {
		return cniError(types.ErrTryAgainLater, "reading the port of NetworkAttachment %s: %v", p.key, err)
	}
	if !slices.ContainsFunc(plugs, func(pl fabric.Plug) bool { return pl.Owner == p.owner }) {
		return cniError(types.ErrInternal, "the port of NetworkAttachment %s is not interface %s of container %s (plugs: %v)", p.key, req.IfName, req.ContainerID, plugs)
	}
	if err := p.veth.check(); err != nil {
		return cniError(types.ErrInternal, "interface %s of pod %s: %v", req.IfName, req.Pod, err)
	}
	if err := checkPrevResult(req.PrevResult, p.veth.addr); err != nil {
		return cniError(types.ErrInternal, "interface %s of pod %s: %v", req.IfName, req.Pod, err)
	}
	return nil
}

// checkPrevResult returns an error when the result of the ADD being
// checked gave the pod another address than it has.
func checkPrevResult(raw json.RawMessage, addr netip.Prefix) error {
	if len(raw) == 0 {
		return nil
	}
	prev, err := types100.NewResult(raw)
	if err != nil {
		return fmt.Errorf("decoding the previous result: %w", err)
	}
	res, err := types100.NewResultFromResult(prev)
	if err != nil {
		return fmt.Errorf("reading the previous result: %w", err)
	}
	for _, ip := range res.IPs {
		ones, _ := ip.Address.Mask.Size()
		if got, ok := netip.AddrFromSlice(ip.Address.IP); ok && netip.PrefixFrom(got.Unmap(), ones) == addr {
			return nil
		}
	}
	return fmt.Errorf("the previous result does not hold address %s", addr)
}
