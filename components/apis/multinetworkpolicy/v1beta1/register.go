package v1beta1

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group of the Network Plumbing Working Group.
const GroupName = "k8s.cni.cncf.io"

// Kind is the kind of a MultiNetworkPolicy.
const Kind = "MultiNetworkPolicy"

// SchemeGroupVersion is the group and version of these types.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1beta1"}

// MultiNetworkPolicies is the resource of the MultiNetworkPolicy CRD, as
// the dynamic client and informers name it.
var MultiNetworkPolicies = SchemeGroupVersion.WithResource("multi-networkpolicies")

var (
	// SchemeBuilder collects the functions that add these types to a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds these types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion, &MultiNetworkPolicy{}, &MultiNetworkPolicyList{})
	metav1.AddToGroupVersion(scheme, SchemeGroupVersion)
	return nil
}

// FromUnstructured converts a MultiNetworkPolicy that the dynamic client
// or a dynamic informer returned. The result shares nothing with u, so a
// cached u stays as it was.
func FromUnstructured(u *unstructured.Unstructured) (*MultiNetworkPolicy, error) {
	p := &MultiNetworkPolicy{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), p); err != nil {
		return nil, fmt.Errorf("converting MultiNetworkPolicy %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return p, nil
}
