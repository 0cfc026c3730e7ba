//go:build tools

// Package versitygw pins the command this module builds so that go.mod and
// go.sum keep every module it needs.
package versitygw

import (
	_ "github.com/versity/versitygw/cmd/versitygw"
)
