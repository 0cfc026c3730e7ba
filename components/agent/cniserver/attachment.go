package cniserver

// This file finds a request's attachment in the agent's cache and waits
// for it to be ready on this node.

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	kwait "k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/cni"
	"github.com/kos-sdn/kos/components/fabric"
)

// generatedName matches the interface names Multus makes up, net<N>.
var generatedName = regexp.MustCompile(`^net[0-9]+$`)

// defaultNetworksHint ends the message of an ADD that finds no attachment
// for a made-up interface name, nor one Multus's defaultNetworks shifted
// it from.
const defaultNetworksHint = "; an interface net<N> that Multus numbered after its defaultNetworks stands for the pod's first attachment of the same subnet named net<M>, M < N, that no other interface of the sandbox has, and there is none yet"

// podAttachment returns the local attachment of a pod's interface from the
// cache, with its address if it has one, or why there is none yet: the
// attachment this sandbox's interface was plugged for, else the one the
// controller named for the interface, else, for a made-up name net<N> that
// Multus numbered after its defaultNetworks, the one it stands for
// (names.go).
func (s *Server) podAttachment(req *cni.Request) (*v1alpha1.NetworkAttachment, string) {
	if key, ok := s.sandboxes.keyOf(req.ContainerID, req.IfName); ok {
		if att, exists := s.agent.CachedAttachment(key); exists && att.Labels[v1alpha1.PodUIDLabel] != "" && (req.Pod.UID == "" || att.Labels[v1alpha1.PodUIDLabel] == req.Pod.UID) {
			return att, ""
		}
	}
	key := req.Pod.Namespace + "/" + v1alpha1.AttachmentName(req.Pod.Name, req.IfName)
	att, exists := s.agent.CachedAttachment(key)
	var why string
	switch {
	case !exists:
		why = fmt.Sprintf("no NetworkAttachment %s for interface %s of pod %s on node %s: kos-controller-manager makes it once the pod's k8s.v1.cni.cncf.io/networks annotation names a NetworkAttachmentDefinition of type kos (see the pod's events)", key, req.IfName, req.Pod, s.node)
	case req.Pod.UID != "" && att.Labels[v1alpha1.PodUIDLabel] != req.Pod.UID:
		why = fmt.Sprintf("NetworkAttachment %s is for pod UID %s, not %s: an earlier pod of that name's, which kos-controller-manager replaces", key, att.Labels[v1alpha1.PodUIDLabel], req.Pod.UID)
	case att.Annotations[v1alpha1.InterfaceAnnotation] != req.IfName:
		why = fmt.Sprintf("NetworkAttachment %s is for interface %q, not %s (see the pod's events)", key, att.Annotations[v1alpha1.InterfaceAnnotation], req.IfName)
	case req.Subnet != "" && att.Spec.Subnet != req.Subnet:
		// Another entry's, if Multus shifted the names; add says so
		// if no entry of the request's subnet comes before it.
		if shifted := s.shiftedAttachment(req); shifted != nil {
			return shifted, ""
		}
		return att, ""
	default:
		return att, ""
	}
	if shifted := s.shiftedAttachment(req); shifted != nil {
		return shifted, ""
	}
	if !exists && generatedName.MatchString(req.IfName) {
		why += defaultNetworksHint
	}
	return nil, why
}

// shiftedAttachment returns the attachment a request's made-up interface
// name stands for when Multus numbered it after its defaultNetworks, or
// nil.
func (s *Server) shiftedAttachment(req *cni.Request) *v1alpha1.NetworkAttachment {
	if _, ok := generatedNumber(req.IfName); !ok {
		return nil
	}
	return pickShifted(req, s.agent.PodAttachments(req.Pod.Namespace, req.Pod.Name), s.sandboxes.pluggedFor)
}

// awaitPodAttachment waits, up to wait, for the pod's attachment
// to exist, to have its address and to be ready on this node, and returns
// it. The error says what it was waiting for; an attachment whose status
// holds IPAM's errors instead of an address fails at once with them.
func (s *Server) awaitPodAttachment(ctx context.Context, req *cni.Request, wait time.Duration) (*v1alpha1.NetworkAttachment, fabric.LocalAttachment, *types.Error) {
	var att *v1alpha1.NetworkAttachment
	var addr fabric.LocalAttachment
	var why string
	var failed *types.Error
	err := kwait.PollUntilContextTimeout(ctx, pollInterval, wait, true, func(context.Context) (bool, error) {
		att, why = s.podAttachment(req)
		if att == nil {
			return false, nil
		}
		var ok bool
		if addr, ok = s.agent.Address(att); !ok {
			// IPAM said why it gave no address (a requested address
			// out of range or taken, a full subnet): waiting would
			// only hide that. Kubelet tries again after code 11,
			// and IPAM clears the error once it can assign one.
			switch {
			case len(att.Status.Errors.IPAM) > 0:
				failed = cniError(types.ErrTryAgainLater, "NetworkAttachment %s has no address: %s", cache.MetaObjectToName(att).String(), strings.Join(att.Status.Errors.IPAM, "; "))
				return true, nil
			case att.Status.AddressContention:
				failed = cniError(types.ErrTryAgainLater, "subnet %s has no free address for NetworkAttachment %s", att.Spec.Subnet, cache.MetaObjectToName(att).String())
				return true, nil
			}
			why = fmt.Sprintf("NetworkAttachment %s has no address yet", cache.MetaObjectToName(att).String())
			return false, nil
		}
		if why = s.agent.NotReady(att, addr); why != "" {
			return false, nil
		}
		return true, nil
	})
	switch {
	case failed != nil:
		return nil, fabric.LocalAttachment{}, failed
	case ctx.Err() != nil:
		return nil, fabric.LocalAttachment{}, cniError(types.ErrTryAgainLater, "kos-agent on node %s stopped while waiting: %s", s.node, why)
	case err != nil:
		return nil, fabric.LocalAttachment{}, cniError(types.ErrTryAgainLater, "waited %s: %s", wait.Round(time.Millisecond), why)
	}
	return att, addr, nil
}
