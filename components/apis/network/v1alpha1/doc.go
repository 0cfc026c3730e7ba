// Package v1alpha1 is version v1alpha1 of the KOS API group network.example.com:
// the wire types that clients, controllers and agents use.
//
// +k8s:deepcopy-gen=package
// +k8s:conversion-gen=github.com/kos-sdn/kos/components/apis/network
// +k8s:defaulter-gen=TypeMeta
// +k8s:openapi-gen=true
// +k8s:openapi-model-package=com.github.kos-sdn.kos.components.apis.network.v1alpha1
// +groupName=network.example.com
package v1alpha1
