package cniserver

// This file finds the attachment of a request's interface when Multus
// named it otherwise than kos-controller-manager did. Both name an entry
// of the pod's k8s.v1.cni.cncf.io/networks annotation that asks for no
// interface net<N>, but Multus counts the defaultNetworks of its own
// configuration (on the node, out of the controller's sight; none for pods
// of its systemNamespaces) before the annotation's entries: with one
// default network, the controller's net1 is Multus's net2. The shift is
// the same for every entry of a pod, and Multus runs a sandbox's ADDs in
// the annotation's order.

import (
	"slices"
	"strconv"
	"strings"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/cni"
)

// generatedNumber returns N of an interface name net<N>, or false.
func generatedNumber(ifname string) (int, bool) {
	if !generatedName.MatchString(ifname) {
		return 0, false
	}
	n, err := strconv.Atoi(strings.TrimPrefix(ifname, "net"))
	return n, err == nil
}

// shiftedCandidates returns the pod's attachments that a request's made-up
// interface name net<M> may stand for after Multus's shift, the likeliest
// first: the pod's (by UID, when the request names one), in the request's
// subnet, named net<N> by the controller with N < M, in the order of N.
func shiftedCandidates(req *cni.Request, podAtts []*v1alpha1.NetworkAttachment) []*v1alpha1.NetworkAttachment {
	m, ok := generatedNumber(req.IfName)
	if !ok {
		return nil
	}
	type numbered struct {
		n   int
		att *v1alpha1.NetworkAttachment
	}
	var found []numbered
	for _, att := range podAtts {
		uid := att.Labels[v1alpha1.PodUIDLabel]
		if uid == "" || (req.Pod.UID != "" && uid != req.Pod.UID) {
			continue
		}
		if req.Subnet != "" && att.Spec.Subnet != req.Subnet {
			continue
		}
		if n, ok := generatedNumber(att.Annotations[v1alpha1.InterfaceAnnotation]); ok && n < m {
			found = append(found, numbered{n, att})
		}
	}
	slices.SortFunc(found, func(a, b numbered) int { return a.n - b.n })
	atts := make([]*v1alpha1.NetworkAttachment, len(found))
	for i, f := range found {
		atts[i] = f.att
	}
	return atts
}

// pickShifted returns the attachment a request's made-up interface name
// stands for after Multus's shift: the first candidate (shiftedCandidates)
// that no other interface of the same sandbox has (takenBy says which
// sandbox interface, container ID and interface name, an attachment's
// plug is remembered for), or nil.
func pickShifted(req *cni.Request, podAtts []*v1alpha1.NetworkAttachment, takenBy func(key string) (containerID, ifname string, ok bool)) *v1alpha1.NetworkAttachment {
	for _, att := range shiftedCandidates(req, podAtts) {
		cid, ifname, ok := takenBy(att.Namespace + "/" + att.Name)
		if ok && cid == req.ContainerID && ifname != req.IfName {
			continue
		}
		return att
	}
	return nil
}
