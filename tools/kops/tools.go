//go:build tools

// Package kops pins the command this module builds so that go.mod and go.sum
// keep every module it needs.
package kops

import (
	_ "k8s.io/kops/channels/cmd/channels"
)
