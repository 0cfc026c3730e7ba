package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kos-sdn/kos/components/apis/network"
)

// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// NetworkConfig is the configuration of the KOS data plane: one object per
// cluster, named "cluster". kos-controller-manager creates it on its first
// start, with every default filled in explicitly in spec (the overlay MTU
// from the smallest underlay MTU the nodes report, less VXLAN's 50 bytes),
// and records in status the configuration applied, which node agents use.
// A value once applied is never recomputed: only a change of spec changes
// it, and changing the overlay MTU or the tunnel port while
// NetworkAttachments exist is refused unless the update carries the
// annotation network.example.com/force-unsafe-change: "true".
type NetworkConfig struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// ExtendedMetadata is kept by the server: when each section last changed.
	// +optional
	ExtendedMetadata ExtendedObjectMeta `json:"extendedMetadata,omitempty"`

	// Spec is the configuration asked for.
	// +optional
	Spec NetworkConfigSpec `json:"spec,omitempty"`

	// Status is the configuration applied and what the nodes report.
	// +optional
	Status NetworkConfigStatus `json:"status,omitempty"`
}

// NetworkConfigSpec is the configuration of the data plane. Every field is
// optional on creation; kos-controller-manager fills in those left out.
type NetworkConfigSpec struct {
	// OverlayMTU is the MTU of every attachment's interface, on every node,
	// in [576,9216]. Left out, it becomes the smallest underlay MTU the
	// nodes report less VXLAN's overhead (50 bytes), or 1450 when no node
	// reports one yet. Every node's underlay must carry it plus 50 bytes.
	// +optional
	OverlayMTU *int32 `json:"overlayMTU,omitempty"`

	// TunnelPort is the UDP port of the VXLAN tunnels between nodes, in
	// [1,65535]. Left out, it becomes 4789, VXLAN's IANA port.
	// +optional
	TunnelPort *int32 `json:"tunnelPort,omitempty"`
}

// NetworkConfigStatus is written by kos-controller-manager.
type NetworkConfigStatus struct {
	// ObservedGeneration is the generation of the spec last applied.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// OverlayMTU is the overlay MTU applied, which node agents give
	// attachments' interfaces; 0 until first applied.
	// +optional
	OverlayMTU int32 `json:"overlayMTU,omitempty"`

	// TunnelPort is the tunnel port applied, which node agents use; 0
	// until first applied.
	// +optional
	TunnelPort int32 `json:"tunnelPort,omitempty"`

	// Underlay summarises the underlay MTUs the nodes report.
	// +optional
	Underlay UnderlayReport `json:"underlay,omitempty"`

	// AttachmentsWithOtherMTU counts the NetworkAttachments whose interface
	// has an MTU (status.mtu, set by their node's agent) other than
	// overlayMTU: interfaces made before a forced change of the MTU, until
	// their pods are re-created, or by agents that do not use this
	// configuration.
	// +optional
	AttachmentsWithOtherMTU int32 `json:"attachmentsWithOtherMTU,omitempty"`

	// Conditions: Applied is True once status holds spec's values;
	// UnderlayFits is False while some node's underlay cannot carry the
	// overlay MTU with VXLAN's overhead.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// UnderlayReport summarises the underlay MTUs that nodes report in their
// network.example.com/underlay-mtu annotation.
type UnderlayReport struct {
	// NodesReporting is how many nodes report their underlay MTU.
	// +optional
	NodesReporting int32 `json:"nodesReporting,omitempty"`

	// SmallestMTU is the smallest underlay MTU reported; 0 when none is.
	// +optional
	SmallestMTU int32 `json:"smallestMTU,omitempty"`

	// NodesTooSmall is how many nodes' underlays cannot carry the overlay
	// MTU plus VXLAN's overhead.
	// +optional
	NodesTooSmall int32 `json:"nodesTooSmall,omitempty"`

	// TooSmall names the first 20 of those nodes, by name.
	// +optional
	// +listType=atomic
	TooSmall []NodeUnderlay `json:"tooSmall,omitempty"`
}

// NodeUnderlay is the underlay MTU one node reports.
type NodeUnderlay struct {
	// Node is the node's name.
	Node string `json:"node"`
	// MTU is the node's underlay MTU.
	MTU int32 `json:"mtu"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// NetworkConfigList is a list of NetworkConfigs.
type NetworkConfigList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`

	// Items are the NetworkConfigs.
	Items []NetworkConfig `json:"items"`
}

// Names and values of the NetworkConfig that clients share; see the
// constants of the same names in the internal API package.
const (
	NetworkConfigName           = network.NetworkConfigName
	VXLANOverhead               = network.VXLANOverhead
	MinOverlayMTU               = network.MinOverlayMTU
	MaxOverlayMTU               = network.MaxOverlayMTU
	DefaultUnderlayMTU          = network.DefaultUnderlayMTU
	DefaultTunnelPort           = network.DefaultTunnelPort
	ForceUnsafeChangeAnnotation = network.ForceUnsafeChangeAnnotation
	UnderlayMTUAnnotation       = network.UnderlayMTUAnnotation
	MaxTooSmallNamed            = network.MaxTooSmallNamed
)

// The conditions of a NetworkConfig and their reasons.
const (
	// NetworkConfigApplied is True once status holds the values of the
	// current spec.
	NetworkConfigApplied = "Applied"
	// NetworkConfigUnderlayFits is True when every node that reports its
	// underlay MTU can carry the overlay MTU plus VXLAN's overhead.
	NetworkConfigUnderlayFits = "UnderlayFits"

	// ReasonConfigApplied: status holds spec's values.
	ReasonConfigApplied = "Applied"
	// ReasonUnderlayFits: every reporting node's underlay is large enough.
	ReasonUnderlayFits = "UnderlayFits"
	// ReasonUnderlayTooSmall: some node's underlay is too small; the
	// message names them.
	ReasonUnderlayTooSmall = "UnderlayTooSmall"
	// ReasonNoUnderlayReports: no node reports its underlay MTU yet.
	ReasonNoUnderlayReports = "NoUnderlayReports"
)
