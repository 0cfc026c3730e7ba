//go:build tools

// Package kube129 pins the command this module builds so that go.mod and
// go.sum keep every module it needs.
package kube129

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
)
