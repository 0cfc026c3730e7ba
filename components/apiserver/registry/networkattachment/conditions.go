package networkattachment

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kos-sdn/kos/components/apis/network"
	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
)

// setConditions sets att's status.conditions from its spec and the rest of
// its status, starting from the stored conditions old. The server derives
// the conditions on every write, so that they never disagree with the
// fields that IPAM and the node agent write, and no client writes them. A
// condition keeps its lastTransitionTime until its status changes; a new
// status is stamped with now.
func setConditions(att *network.NetworkAttachment, old []metav1.Condition, now time.Time) {
	setReady(att, old, readyCondition(att), now)
}

// setStatusConditions is setConditions for a write of the status endpoint
// that asked for the conditions requested. It honours one request: Ready
// Unknown for ReasonAgentNotHeartbeating, which the attachment liveness
// controller makes when the agent of att's node stopped heartbeating. The
// server keeps it only where it would derive Ready True and only on a write
// that changed no status section (statusChanged false), so that it hides
// no other reason and any report from IPAM or the agent derives the
// condition afresh; a write that asks for anything else derives it too.
func setStatusConditions(att *network.NetworkAttachment, requested, old []metav1.Condition, statusChanged bool, now time.Time) {
	ready := readyCondition(att)
	if ask := meta.FindStatusCondition(requested, v1alpha1.NetworkAttachmentReady); !statusChanged && ask != nil &&
		ask.Status == metav1.ConditionUnknown && ask.Reason == v1alpha1.ReasonAgentNotHeartbeating &&
		ready.Status == metav1.ConditionTrue {
		ready.Status, ready.Reason, ready.Message = metav1.ConditionUnknown, ask.Reason, ask.Message
	}
	setReady(att, old, ready, now)
}

// setReady sets att's conditions to old with ready in place of the Ready
// condition, stamped with now if its status changed.
func setReady(att *network.NetworkAttachment, old []metav1.Condition, ready metav1.Condition, now time.Time) {
	conds := slices.Clone(old)
	ready.LastTransitionTime = metav1.NewTime(now)
	meta.SetStatusCondition(&conds, ready)
	att.Status.Conditions = conds
}

// readyCondition returns the Ready condition of att, without its
// lastTransitionTime. It takes the first thing missing, in the order they
// come: an address (SubnetNotValidated or NoAddress), the interface on the
// node (NotImplemented), the postCreateExec (ExecPending, ExecFailed).
func readyCondition(att *network.NetworkAttachment) metav1.Condition {
	notReady := func(reason, message string) metav1.Condition {
		return metav1.Condition{
			Type:               v1alpha1.NetworkAttachmentReady,
			Status:             metav1.ConditionFalse,
			ObservedGeneration: att.Generation,
			Reason:             reason,
			Message:            message,
		}
	}
	st := &att.Status
	switch {
	case st.IPv4 == "" && slices.Contains(st.Errors.IPAM, v1alpha1.IPAMErrorSubnetNotValidated):
		return notReady(v1alpha1.ReasonSubnetNotValidated, fmt.Sprintf("Subnet %s is not validated", att.Spec.Subnet))
	case st.IPv4 == "" && len(st.Errors.IPAM) > 0:
		return notReady(v1alpha1.ReasonNoAddress, strings.Join(st.Errors.IPAM, "; "))
	case st.IPv4 == "":
		return notReady(v1alpha1.ReasonNoAddress, "IPAM has not assigned an address yet")
	case len(st.Errors.Host) > 0:
		return notReady(v1alpha1.ReasonNotImplemented, fmt.Sprintf("The agent of node %s: %s", att.Spec.Node, strings.Join(st.Errors.Host, "; ")))
	case !implemented(st):
		return notReady(v1alpha1.ReasonNotImplemented, fmt.Sprintf("The agent of node %s has not set up the interface of %s yet", att.Spec.Node, st.IPv4))
	case st.PostCreateExecReport != nil && st.PostCreateExecReport.ExitStatus != 0:
		return notReady(v1alpha1.ReasonExecFailed, fmt.Sprintf("postCreateExec %q exited with status %d", st.PostCreateExecReport.Command, st.PostCreateExecReport.ExitStatus))
	case len(att.Spec.PostCreateExec) > 0 && st.PostCreateExecReport == nil:
		return notReady(v1alpha1.ReasonExecPending, "postCreateExec has not reported yet")
	}
	return metav1.Condition{
		Type:               v1alpha1.NetworkAttachmentReady,
		Status:             metav1.ConditionTrue,
		ObservedGeneration: att.Generation,
		Reason:             v1alpha1.ReasonReady,
		Message:            fmt.Sprintf("Interface %s with address %s is ready on node %s", st.IfcName, st.IPv4, att.Spec.Node),
	}
}

// implemented tells whether the node agent's part of st describes the
// interface of st's current address: the agent writes the MAC address it
// derives from the address and VNI, so a MAC address of an earlier address
// is the agent's report of an interface that is gone.
func implemented(st *network.NetworkAttachmentStatus) bool {
	if st.HostIP == "" || st.MACAddress == "" {
		return false
	}
	ip, err := netip.ParseAddr(st.IPv4)
	if err != nil {
		return false
	}
	return strings.EqualFold(st.MACAddress, v1alpha1.MACAddress(st.AddressVNI, ip).String())
}
