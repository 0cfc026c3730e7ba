package network

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Names of the write sections the server keeps in ExtendedObjectMeta.Writes.
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

// ExtendedObjectMeta is metadata the KOS server keeps beyond ObjectMeta.
type ExtendedObjectMeta struct {
	// Writes records, per section of the object, when the server last changed it.
	Writes WriteSet
}

// WriteSet is a list of writes, at most one per section.
type WriteSet []ObjectWrite

// ObjectWrite records when the server last wrote one section of an object.
type ObjectWrite struct {
	// Section names the part of the object.
	Section string
	// ServerTime is when the server accepted the write.
	ServerTime metav1.MicroTime
}

// Subnet is a block of addresses on a virtual network.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type Subnet struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	ExtendedMetadata ExtendedObjectMeta

	Spec   SubnetSpec
	Status SubnetStatus
}

// SubnetSpec is the desired state of a Subnet; it is immutable.
type SubnetSpec struct {
	// IPv4 is the subnet's CIDR block, inside RFC 1918 space.
	IPv4 string
	// VNI is the VXLAN network identifier of the virtual network, in
	// [MinVNI, MaxVNI].
	VNI uint32
}

// MinVNI and MaxVNI bound the VXLAN network identifiers a Subnet may use.
// MaxVNI is 21 bits because the agent encodes a VNI, with the address, in
// an attachment's MAC address and in the cookies of its flows.
const (
	MinVNI = 1
	MaxVNI = 1<<21 - 1
)

// SubnetStatus is the observed state of a Subnet.
type SubnetStatus struct {
	// Validated is true once the subnet is known to conflict with no other.
	Validated bool
	// Errors lists the conflicts that keep the subnet from being validated.
	Errors []string
}

// SubnetList is a list of Subnets.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type SubnetList struct {
	metav1.TypeMeta
	metav1.ListMeta

	Items []Subnet
}

// NetworkAttachment is a request for, and the state of, a network interface on a
// subnet on a node.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type NetworkAttachment struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	ExtendedMetadata ExtendedObjectMeta

	Spec   NetworkAttachmentSpec
	Status NetworkAttachmentStatus
}

// NetworkAttachmentSpec is the desired state of a NetworkAttachment.
type NetworkAttachmentSpec struct {
	// Node is the name of the node of the interface; immutable.
	Node string
	// Subnet is the name of the Subnet, in the same namespace; immutable.
	Subnet string
	// IPv4 is the address asked for, or empty for any free one; immutable.
	IPv4 string
	// PostCreateExec is a command the agent runs after creating the interface.
	PostCreateExec []string
	// PostDeleteExec is a command the agent runs after deleting the interface.
	PostDeleteExec []string
}

// NetworkAttachmentStatus is the observed state of a NetworkAttachment.
type NetworkAttachmentStatus struct {
	// Errors reports problems, by the component that met them.
	Errors NetworkAttachmentErrors
	// LockUID is the UID of the IPLock that holds the address.
	LockUID string
	// AddressVNI is the VNI of the virtual network the address lives on.
	AddressVNI uint32
	// IPv4 is the assigned address.
	IPv4 string
	// AddressContention is true when no address could be assigned.
	AddressContention bool
	// SubnetCreationTime is the creation time of the Subnet the address came from.
	SubnetCreationTime *metav1.Time
	// MACAddress is the MAC address of the interface.
	MACAddress string
	// IfcName is the name of the interface on the node.
	IfcName string
	// HostIP is the IP address of the node.
	HostIP string
	// MTU is the MTU of the interface.
	MTU int32
	// PostCreateExecReport reports on the run of spec.postCreateExec.
	PostCreateExecReport *ExecReport
	// Conditions summarise the fields above; the server derives them.
	Conditions []metav1.Condition
}

// NetworkAttachmentErrors groups error messages by the component that met them.
type NetworkAttachmentErrors struct {
	// IPAM holds errors from address assignment.
	IPAM []string
	// Host holds errors from the node agent.
	Host []string
}

// ExecReport reports on the run of a command.
type ExecReport struct {
	// Command is the command that ran.
	Command []string
	// ExitStatus is the command's exit status.
	ExitStatus int32
	// StartTime is when the command started.
	StartTime metav1.Time
	// StopTime is when the command ended.
	StopTime metav1.Time
	// StdOut is the command's standard output.
	StdOut string
	// StdErr is the command's standard error.
	StdErr string
}

// NetworkAttachmentList is a list of NetworkAttachments.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type NetworkAttachmentList struct {
	metav1.TypeMeta
	metav1.ListMeta

	Items []NetworkAttachment
}

// IPLock holds one address of a virtual network for one NetworkAttachment, its
// controller owner. Its name encodes the VNI and the address.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type IPLock struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	ExtendedMetadata ExtendedObjectMeta

	Spec IPLockSpec
}

// IPLockSpec is the desired state of an IPLock; it is immutable.
type IPLockSpec struct {
	// SubnetName is the name of the Subnet the address was taken from.
	SubnetName string
}

// IPLockList is a list of IPLocks.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type IPLockList struct {
	metav1.TypeMeta
	metav1.ListMeta

	Items []IPLock
}
