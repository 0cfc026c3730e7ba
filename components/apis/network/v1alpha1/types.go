package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Names of the write sections the server keeps in extendedMetadata.writes.
const (
	// SectionSpec is the spec of any object.
	SectionSpec = "spec"
	// SectionStatus is the whole status of a Subnet.
	SectionStatus = "status"
	// SectionAddress is the part of a NetworkAttachment's status written by IPAM:
	// ipv4, addressVNI, lockUID, addressContention, errors.ipam and subnetCreationTime.
	SectionAddress = "status.address"
	// SectionImpl is the part of a NetworkAttachment's status written by the node
	// agent about the interface: macAddress, ifcName, hostIP and errors.host.
	SectionImpl = "status.impl"
	// SectionExecReport is a NetworkAttachment's status.postCreateExecReport.
	SectionExecReport = "status.execReport"
)

// ExtendedObjectMeta is metadata that the KOS API server keeps beyond the standard
// object metadata. Clients cannot set it: the server ignores what they send.
type ExtendedObjectMeta struct {
	// Writes records, for each section of the object, when the server last
	// accepted a change to that section. It makes the latency from a client's
	// write to its effect measurable end to end.
	// +optional
	// +listType=map
	// +listMapKey=section
	Writes WriteSet `json:"writes,omitempty"`
}

// WriteSet is a list of writes, at most one per section.
type WriteSet []ObjectWrite

// ObjectWrite records when the server last changed one section of an object.
type ObjectWrite struct {
	// Section names the part of the object: "spec" for any object; "status" for
	// a Subnet; "status.address", "status.impl" and "status.execReport" for a
	// NetworkAttachment.
	Section string `json:"section"`

	// ServerTime is when the server accepted the change, with microseconds.
	ServerTime metav1.MicroTime `json:"serverTime"`
}

// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// Subnet is a block of IPv4 addresses on a virtual network (a VXLAN VNI). All the
// subnets of one VNI must live in one namespace and have disjoint CIDR blocks; a
// subnet is used only once status.validated is true.
type Subnet struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// ExtendedMetadata is kept by the server: when each section last changed.
	// +optional
	ExtendedMetadata ExtendedObjectMeta `json:"extendedMetadata,omitempty"`

	// Spec is the subnet's CIDR block and VNI. It cannot change after creation.
	// +optional
	Spec SubnetSpec `json:"spec,omitempty"`

	// Status says whether the subnet was validated against the other subnets.
	// +optional
	Status SubnetStatus `json:"status,omitempty"`
}

// SubnetSpec is the definition of a Subnet. It is immutable.
type SubnetSpec struct {
	// IPv4 is the subnet's CIDR block, such as 10.1.0.0/24. It must lie entirely
	// inside one of the private ranges of RFC 1918: 10.0.0.0/8, 172.16.0.0/12 or
	// 192.168.0.0/16.
	IPv4 string `json:"ipv4"`

	// VNI is the VXLAN network identifier of the subnet's virtual network, in
	// [1,2097151]. A virtual network is confined to one namespace.
	VNI uint32 `json:"vni"`
}

// SubnetStatus is the observed state of a Subnet, written by the subnet validator.
type SubnetStatus struct {
	// Validated is true once the subnet was found to conflict with no other
	// subnet; it never goes back to false.
	// +optional
	Validated bool `json:"validated,omitempty"`

	// Errors lists the conflicts that keep the subnet from being validated.
	// +optional
	// +listType=atomic
	Errors []string `json:"errors,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// SubnetList is a list of Subnets.
type SubnetList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`

	// Items are the Subnets.
	Items []Subnet `json:"items"`
}

// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// NetworkAttachment asks for a network interface on a Subnet on a node, and
// reports the interface: its address, chosen by IPAM, and its MAC address, name
// and host, set by the node's agent.
type NetworkAttachment struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// ExtendedMetadata is kept by the server: when each section last changed.
	// +optional
	ExtendedMetadata ExtendedObjectMeta `json:"extendedMetadata,omitempty"`

	// Spec says where the interface is wanted.
	// +optional
	Spec NetworkAttachmentSpec `json:"spec,omitempty"`

	// Status reports the interface.
	// +optional
	Status NetworkAttachmentStatus `json:"status,omitempty"`
}

// NetworkAttachmentSpec is the desired state of a NetworkAttachment.
type NetworkAttachmentSpec struct {
	// Node is the name of the node that gets the interface. Immutable.
	Node string `json:"node"`

	// Subnet is the name of the Subnet, in the attachment's namespace, that the
	// interface's address comes from. Immutable.
	Subnet string `json:"subnet"`

	// IPv4 is the address the interface asks for, such as 10.1.0.7; empty
	// asks for any free address of the subnet. IPAM gives the interface
	// exactly this address once it lies in the subnet's assignable range and
	// no other attachment holds it; until then status.ipv4 stays empty and
	// status.errors.ipam says why. Immutable.
	// +optional
	IPv4 string `json:"ipv4,omitempty"`

	// PostCreateExec is a command that the node agent runs once the interface
	// exists; its result is reported in status.postCreateExecReport.
	// +optional
	// +listType=atomic
	PostCreateExec []string `json:"postCreateExec,omitempty"`

	// PostDeleteExec is a command that the node agent runs after it deleted the
	// interface.
	// +optional
	// +listType=atomic
	PostDeleteExec []string `json:"postDeleteExec,omitempty"`
}

// NetworkAttachmentStatus is the observed state of a NetworkAttachment.
type NetworkAttachmentStatus struct {
	// Errors reports problems met by IPAM and by the node agent.
	// +optional
	Errors NetworkAttachmentErrors `json:"errors,omitempty"`

	// LockUID is the UID of the IPLock that holds the address.
	// +optional
	LockUID string `json:"lockUID,omitempty"`

	// AddressVNI is the VNI of the virtual network that the address lives on.
	// +optional
	AddressVNI uint32 `json:"addressVNI,omitempty"`

	// IPv4 is the address assigned to the interface. Once set it never
	// changes to another address: it is only ever cleared (when the subnet
	// goes, or the address can no longer be held) and set again.
	// +optional
	IPv4 string `json:"ipv4,omitempty"`

	// AddressContention is true when the subnet had no free address left.
	// +optional
	AddressContention bool `json:"addressContention,omitempty"`

	// SubnetCreationTime is the creation time of the Subnet that the address
	// came from; it tells that Subnet apart from a later one of the same name.
	// +optional
	SubnetCreationTime *metav1.Time `json:"subnetCreationTime,omitempty"`

	// MACAddress is the MAC address of the interface, derived from the VNI and
	// the address.
	// +optional
	MACAddress string `json:"macAddress,omitempty"`

	// IfcName is the name of the interface on the node.
	// +optional
	IfcName string `json:"ifcName,omitempty"`

	// HostIP is the IP address of the node, where the virtual network's tunnel
	// traffic for this interface goes.
	// +optional
	HostIP string `json:"hostIP,omitempty"`

	// MTU is the MTU of the interface: the largest IPv4 packet it carries
	// across nodes. The node agent gives the interface its node's underlay
	// MTU less the VXLAN encapsulation's 50 bytes, or what its --mtu says.
	// +optional
	MTU int32 `json:"mtu,omitempty"`

	// PostCreateExecReport reports the run of spec.postCreateExec.
	// +optional
	PostCreateExecReport *ExecReport `json:"postCreateExecReport,omitempty"`

	// Conditions summarise the status. The Ready condition is True once the
	// interface has its address, the agent of its node has set it up, and
	// its postCreateExec, if any, exited with status 0; when False, its
	// reason says what is missing (SubnetNotValidated, NoAddress,
	// NotImplemented, ExecPending, ExecFailed). The server derives the
	// conditions from the fields above whenever they change, and ignores
	// what clients write into them.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// NetworkAttachmentErrors holds error messages, by the component that met them.
type NetworkAttachmentErrors struct {
	// IPAM holds the errors of address assignment, such as a full subnet.
	// +optional
	// +listType=atomic
	IPAM []string `json:"ipam,omitempty"`

	// Host holds the errors of the node agent in setting up the interface.
	// +optional
	// +listType=atomic
	Host []string `json:"host,omitempty"`
}

// ExecReport reports the run of a command.
type ExecReport struct {
	// Command is the command that ran.
	// +listType=atomic
	Command []string `json:"command"`

	// ExitStatus is the command's exit status; negative when it could not run.
	ExitStatus int32 `json:"exitStatus"`

	// StartTime is when the command started.
	StartTime metav1.Time `json:"startTime"`

	// StopTime is when the command ended.
	StopTime metav1.Time `json:"stopTime"`

	// StdOut is the command's standard output.
	// +optional
	StdOut string `json:"stdOut,omitempty"`

	// StdErr is the command's standard error.
	// +optional
	StdErr string `json:"stdErr,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// NetworkAttachmentList is a list of NetworkAttachments.
type NetworkAttachmentList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`

	// Items are the NetworkAttachments.
	Items []NetworkAttachment `json:"items"`
}

// +genclient
// +genclient:noStatus
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// IPLock holds one address of a virtual network for one NetworkAttachment, which
// is its controller owner. Its name encodes the VNI and the address
// (v1-<vni>-<a>-<b>-<c>-<d>), so that creating it is what takes the address.
type IPLock struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// ExtendedMetadata is kept by the server: when each section last changed.
	// +optional
	ExtendedMetadata ExtendedObjectMeta `json:"extendedMetadata,omitempty"`

	// Spec names the subnet the address belongs to. Immutable.
	// +optional
	Spec IPLockSpec `json:"spec,omitempty"`
}

// IPLockSpec is the definition of an IPLock. It is immutable.
type IPLockSpec struct {
	// SubnetName is the name of the Subnet the address was taken from.
	SubnetName string `json:"subnetName"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// IPLockList is a list of IPLocks.
type IPLockList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`

	// Items are the IPLocks.
	Items []IPLock `json:"items"`
}
