//go:build tools

// Package kube129 pins the commands this module builds so that go.mod and
// go.sum keep every module they need.
package kube129

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
)
