package v1alpha1

// The condition of a NetworkAttachment and its reasons. The server derives
// the condition from the status that IPAM and the node agent write.
const (
	// NetworkAttachmentReady is the type of the condition that is True once
	// the attachment's interface is ready for use: it has an address, the
	// agent of its node has set it up, and its postCreateExec, if any,
	// exited with status 0.
	NetworkAttachmentReady = "Ready"

	// ReasonReady: the interface is ready.
	ReasonReady = "Ready"
	// ReasonSubnetNotValidated: the subnet has not been validated (yet), so
	// IPAM gives no address from it.
	ReasonSubnetNotValidated = "SubnetNotValidated"
	// ReasonNoAddress: IPAM has not assigned an address; the message holds
	// status.errors.ipam when it says why.
	ReasonNoAddress = "NoAddress"
	// ReasonNotImplemented: the agent of the attachment's node has not set
	// up the interface for its current address; the message holds
	// status.errors.host when it says why.
	ReasonNotImplemented = "NotImplemented"
	// ReasonExecPending: the interface is set up and its postCreateExec has
	// not reported yet.
	ReasonExecPending = "ExecPending"
	// ReasonExecFailed: the postCreateExec exited with a status other than
	// 0, or could not run.
	ReasonExecFailed = "ExecFailed"
	// ReasonAgentNotHeartbeating: the agent of the attachment's node has
	// stopped renewing its heartbeat Lease, so nobody knows whether the
	// interface still works; the condition is Unknown. The attachment
	// liveness controller asks for it, and the server keeps it only on an
	// attachment that is otherwise Ready.
	ReasonAgentNotHeartbeating = "AgentNotHeartbeating"
)

// IPAMErrorSubnetNotValidated is the status.errors.ipam message of an
// attachment whose subnet is not validated.
const IPAMErrorSubnetNotValidated = "Referenced subnet is not validated"
