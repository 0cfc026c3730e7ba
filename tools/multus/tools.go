//go:build tools

// Package multus pins the command this module builds so that go.mod and go.sum
// keep every module it needs.
package multus

import (
	_ "gopkg.in/k8snetworkplumbingwg/multus-cni.v4/cmd/multus"
)
