package v1beta1

import (
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// MultiNetworkPolicy is a NetworkPolicy of the interfaces that pods get on
// secondary networks: those of the NetworkAttachmentDefinitions that its
// policy-for annotation (PolicyForAnnotation) names. Its spec means what a
// NetworkPolicy's does, with pods' addresses on those networks in place of
// their cluster addresses.
type MultiNetworkPolicy struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// Spec is the policy, as networking/v1 defines it.
	// +optional
	Spec networkingv1.NetworkPolicySpec `json:"spec,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// MultiNetworkPolicyList is a list of MultiNetworkPolicies.
type MultiNetworkPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the MultiNetworkPolicies.
	Items []MultiNetworkPolicy `json:"items"`
}
