// Package v1beta1 holds the Go types of the Network Plumbing Working Group's
// MultiNetworkPolicy (k8s.cni.cncf.io/v1beta1), the NetworkPolicy of
// secondary networks: networking/v1's NetworkPolicySpec, plus the
// annotation k8s.v1.cni.cncf.io/policy-for that names the
// NetworkAttachmentDefinitions it governs. KOS does not serve the API; a
// CustomResourceDefinition does (docs/multi-networkpolicy-crd.yaml), and
// clients read it with the dynamic client (FromUnstructured).
//
// +k8s:deepcopy-gen=package
// +groupName=k8s.cni.cncf.io
package v1beta1
