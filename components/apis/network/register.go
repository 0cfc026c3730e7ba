package network

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the name of the KOS API group.
const GroupName = "network.example.com"

// SchemeGroupVersion is the internal version of the group, used inside the server.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: runtime.APIVersionInternal}

// Kind returns the group-qualified kind named kind.
func Kind(kind string) schema.GroupKind {
	return SchemeGroupVersion.WithKind(kind).GroupKind()
}

// Resource returns the group-qualified resource named resource.
func Resource(resource string) schema.GroupResource {
	return SchemeGroupVersion.WithResource(resource).GroupResource()
}

var (
	// SchemeBuilder collects the functions that add the internal types to a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the internal types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion,
		&Subnet{}, &SubnetList{},
		&NetworkAttachment{}, &NetworkAttachmentList{},
		&IPLock{}, &IPLockList{},
		&NetworkConfig{}, &NetworkConfigList{},
		&NodeNetworkPolicy{}, &NodeNetworkPolicyList{},
	)
	return nil
}
