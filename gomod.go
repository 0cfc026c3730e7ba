// Package kos holds the module's go.mod, embedded: the versions of the Go
// modules KOS is built with, which the manifests kos-release renders name
// (package release).
package kos

import _ "embed"

// GoMod is the module's go.mod.
//
//go:embed go.mod
var GoMod []byte
