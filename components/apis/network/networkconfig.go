package network

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NetworkConfig is the configuration of the KOS data plane, one per cluster,
// named NetworkConfigName.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type NetworkConfig struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	ExtendedMetadata ExtendedObjectMeta

	Spec   NetworkConfigSpec
	Status NetworkConfigStatus
}

// NetworkConfigSpec is the configuration asked for; nil fields are filled in
// by kos-controller-manager.
type NetworkConfigSpec struct {
	// OverlayMTU is the MTU of every attachment's interface.
	OverlayMTU *int32
	// TunnelPort is the UDP port of the VXLAN tunnels between nodes.
	TunnelPort *int32
}

// NetworkConfigStatus is the configuration applied and what the nodes report.
type NetworkConfigStatus struct {
	// ObservedGeneration is the generation of the spec last applied.
	ObservedGeneration int64
	// OverlayMTU is the overlay MTU applied; 0 until the first application.
	OverlayMTU int32
	// TunnelPort is the tunnel port applied; 0 until the first application.
	TunnelPort int32
	// Underlay summarises the underlay MTUs the nodes report.
	Underlay UnderlayReport
	// AttachmentsWithOtherMTU counts the attachments whose interface has an
	// MTU other than OverlayMTU.
	AttachmentsWithOtherMTU int32
	// Conditions are Applied and UnderlayFits.
	Conditions []metav1.Condition
}

// UnderlayReport summarises the underlay MTUs the nodes report.
type UnderlayReport struct {
	// NodesReporting is how many nodes report their underlay MTU.
	NodesReporting int32
	// SmallestMTU is the smallest underlay MTU reported; 0 when none is.
	SmallestMTU int32
	// NodesTooSmall is how many nodes' underlays cannot carry the overlay MTU.
	NodesTooSmall int32
	// TooSmall names the first of those nodes, by name.
	TooSmall []NodeUnderlay
}

// NodeUnderlay is the underlay MTU one node reports.
type NodeUnderlay struct {
	// Node is the node's name.
	Node string
	// MTU is the node's underlay MTU.
	MTU int32
}

// NetworkConfigList is a list of NetworkConfigs.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type NetworkConfigList struct {
	metav1.TypeMeta
	metav1.ListMeta

	Items []NetworkConfig
}

// The name of the one NetworkConfig, the bounds of its values, and what
// kos-controller-manager fills in.
const (
	// NetworkConfigName is the name of the cluster's NetworkConfig.
	NetworkConfigName = "cluster"
	// VXLANOverhead is what VXLAN over IPv4 adds to an attachment's packet on
	// the underlay: outer IPv4 (20), UDP (8), VXLAN (8) and the inner
	// Ethernet header (14).
	VXLANOverhead = 50
	// MinOverlayMTU and MaxOverlayMTU bound the overlay MTU: IPv4's minimum
	// datagram every host accepts (RFC 791) and the jumbo frame size common
	// switches carry, as the agent's fabric bounds an interface's MTU.
	MinOverlayMTU = 576
	MaxOverlayMTU = 9216
	// DefaultUnderlayMTU is the underlay MTU assumed when no node reports
	// one: Ethernet's.
	DefaultUnderlayMTU = 1500
	// DefaultTunnelPort is VXLAN's IANA port.
	DefaultTunnelPort = 4789
	// ForceUnsafeChangeAnnotation, set to "true", lets an update change the
	// overlay MTU or the tunnel port while NetworkAttachments exist.
	ForceUnsafeChangeAnnotation = GroupName + "/force-unsafe-change"
	// UnderlayMTUAnnotation is the annotation of a Node of the main cluster
	// in which the node's agent reports its underlay MTU, in decimal.
	UnderlayMTUAnnotation = GroupName + "/underlay-mtu"
	// MaxTooSmallNamed is how many nodes status.underlay.tooSmall names.
	MaxTooSmallNamed = 20
)
