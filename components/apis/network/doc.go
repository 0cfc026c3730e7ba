// Package network holds the internal (hub) version of the KOS API group
// network.example.com: the types the extension API server stores and validates.
// Clients use the wire version in package v1alpha1 instead.
//
// +k8s:deepcopy-gen=package
// +groupName=network.example.com
package network
