package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// +genclient
// +genclient:noStatus
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// NodeNetworkPolicy is the policy of one virtual network on one node:
// kos-controller-manager compiles the MultiNetworkPolicies that govern the
// network into one per node that has attachments of the network the
// policies select, in the network's namespace, named <vni>.<node>; the
// node's agent programs its switch from it. Only the controller manager
// writes them.
type NodeNetworkPolicy struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// ExtendedMetadata is kept by the server: when each section last changed.
	// +optional
	ExtendedMetadata ExtendedObjectMeta `json:"extendedMetadata,omitempty"`

	// Spec is the network's policy on the node.
	// +optional
	Spec NodeNetworkPolicySpec `json:"spec,omitempty"`
}

// NodeNetworkPolicySpec is the model of one network's policy on one node.
type NodeNetworkPolicySpec struct {
	// Node is the node whose agent enforces it.
	Node string `json:"node"`
	// VNI is the virtual network.
	VNI uint32 `json:"vni"`
	// Policies are the policies that select attachments of the network on
	// the node.
	// +optional
	// +listType=atomic
	Policies []PolicyModel `json:"policies,omitempty"`
}

// PolicyModel is one policy as it applies to one network on one node.
type PolicyModel struct {
	// Name names the policy, as namespace/name.
	Name string `json:"name"`
	// Selected are the IPv4 addresses of the node's attachments that the
	// policy selects.
	// +optional
	// +listType=atomic
	Selected []string `json:"selected,omitempty"`
	// Ingress says the policy isolates them for ingress.
	// +optional
	Ingress bool `json:"ingress,omitempty"`
	// IngressRules allow traffic to them.
	// +optional
	// +listType=atomic
	IngressRules []PolicyRule `json:"ingressRules,omitempty"`
	// Egress says the policy isolates them for egress.
	// +optional
	Egress bool `json:"egress,omitempty"`
	// EgressRules allow traffic from them.
	// +optional
	// +listType=atomic
	EgressRules []PolicyRule `json:"egressRules,omitempty"`
}

// PolicyRule allows traffic between the selected attachments and Peers on
// Ports.
type PolicyRule struct {
	// Peers are IPv4 prefixes less their exceptions; none allows nothing.
	// +optional
	// +listType=atomic
	Peers []PolicyPeer `json:"peers,omitempty"`
	// Ports are destination ports; none allows every port and protocol.
	// +optional
	// +listType=atomic
	Ports []PolicyPort `json:"ports,omitempty"`
}

// PolicyPeer is an IPv4 prefix less Except.
type PolicyPeer struct {
	// CIDR is the prefix, such as 10.0.0.7/32.
	CIDR string `json:"cidr"`
	// Except are prefixes within CIDR left out.
	// +optional
	// +listType=atomic
	Except []string `json:"except,omitempty"`
}

// PolicyPort is a destination port or range of one protocol.
type PolicyPort struct {
	// Protocol is TCP, UDP or SCTP.
	Protocol string `json:"protocol"`
	// Port is the first port; 0 allows every port of Protocol.
	// +optional
	Port int32 `json:"port,omitempty"`
	// EndPort, when not 0, is the last port of the range from Port.
	// +optional
	EndPort int32 `json:"endPort,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// NodeNetworkPolicyList is a list of NodeNetworkPolicies.
type NodeNetworkPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`

	// Items are the NodeNetworkPolicies.
	Items []NodeNetworkPolicy `json:"items"`
}
