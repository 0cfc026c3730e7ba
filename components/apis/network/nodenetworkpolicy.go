package network

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NodeNetworkPolicy is the policy of one virtual network on one node, as
// kos-controller-manager compiled it from the MultiNetworkPolicies that
// govern the network, for that node's agent to program.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type NodeNetworkPolicy struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	ExtendedMetadata ExtendedObjectMeta

	Spec NodeNetworkPolicySpec
}

// NodeNetworkPolicySpec is the model of one network's policy on one node.
type NodeNetworkPolicySpec struct {
	// Node is the node whose agent enforces it.
	Node string
	// VNI is the virtual network.
	VNI uint32
	// Policies are the policies that select attachments of the network on
	// the node.
	Policies []PolicyModel
}

// PolicyModel is one policy as it applies to one network on one node.
type PolicyModel struct {
	// Name names the policy, as namespace/name.
	Name string
	// Selected are the IPv4 addresses of the node's attachments that the
	// policy selects.
	Selected []string
	// Ingress says the policy isolates them for ingress.
	Ingress bool
	// IngressRules allow traffic to them.
	IngressRules []PolicyRule
	// Egress says the policy isolates them for egress.
	Egress bool
	// EgressRules allow traffic from them.
	EgressRules []PolicyRule
}

// PolicyRule allows traffic between the selected attachments and Peers on
// Ports.
type PolicyRule struct {
	// Peers are IPv4 prefixes less their exceptions; none allows nothing.
	Peers []PolicyPeer
	// Ports are destination ports; none allows every port and protocol.
	Ports []PolicyPort
}

// PolicyPeer is an IPv4 prefix less Except.
type PolicyPeer struct {
	CIDR   string
	Except []string
}

// PolicyPort is a destination port or range of one protocol.
type PolicyPort struct {
	// Protocol is TCP, UDP or SCTP.
	Protocol string
	// Port is the first port; 0 allows every port of Protocol.
	Port int32
	// EndPort, when not 0, is the last port of the range from Port.
	EndPort int32
}

// NodeNetworkPolicyList is a list of NodeNetworkPolicies.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type NodeNetworkPolicyList struct {
	metav1.TypeMeta
	metav1.ListMeta

	Items []NodeNetworkPolicy
}
