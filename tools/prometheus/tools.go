//go:build tools

// Package prometheus pins the commands this module builds so that go.mod and
// go.sum keep every module they need.
package prometheus

import (
	_ "github.com/prometheus/prometheus/cmd/prometheus"
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
