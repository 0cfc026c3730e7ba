//go:build tools

// Package kube130 pins the command this module builds so that go.mod and
// go.sum keep every module it needs.
package kube130

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
)
