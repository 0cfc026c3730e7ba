//go:build tools

// Package etcd pins the command this module builds so that go.mod and go.sum
// keep every module it needs.
package etcd

import (
	_ "go.etcd.io/etcd/server/v3"
)
