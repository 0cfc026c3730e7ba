//go:build tools

// Package prometheus pins the command this module builds so that go.mod and
// go.sum keep every module it needs.
package prometheus

import (
	_ "github.com/prometheus/prometheus/cmd/prometheus"
)
