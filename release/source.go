// Package release renders KOS releases: every addon's manifest from its one
// source (addons/source: a kustomize base per addon and its variants as
// overlays), with an operator's release configuration (package
// release/api) applied, and the channel files that list them, with their
// hashes. kos-release publishes such a tree; `make addons` renders the
// repository's own (no configuration) and `make verify` renders it again
// and compares.
//
// The source renders one version, Version. Releases before it (0.1.0 to
// 0.3.0) were written by hand and are published as they are: their hashes
// are a contract, and rendering them again would not give their bytes
// (their comments, their field order).
package release

import (
	"path"
)

// Version is the version the source renders. Released says whether it was
// published: once it is, its manifests are immutable like every release's
// (make verify holds their hashes), and a change to the source is the next
// version's, whose Version is set here with Released false.
const (
	Version  = "0.4.0"
	Released = false
)

// SourceDir is the folder of the sources, relative to the addons folder.
const SourceDir = "source"

// Target is one manifest the source renders: a variant of an addon.
type Target struct {
	// Folder is the addon folder, relative to the addons folder, whose
	// index lists the release; Index is that index's file name in it.
	Folder, Index string
	// Variant is what the manifest's file name adds to the version
	// ("-k8s-1.29"), "" for none.
	Variant string
	// Source is the kustomization folder, relative to the addons folder.
	Source string
	// Modules are the Go modules whose versions (those the binary was
	// built with: go.mod's) the manifest's head names, besides those every
	// manifest names.
	Modules []string
}

// File returns the manifest's path relative to the addons folder.
func (t Target) File() string {
	return path.Join(t.Folder, Version+t.Variant+".yaml")
}

// Targets are every manifest of Version, in the order they are rendered.
var Targets = []Target{
	{Folder: "kos-etcd", Index: "addon.yaml", Source: "source/kos-etcd/base"},
	{Folder: "kos-etcd-single-node", Index: "addon.yaml", Source: "source/kos-etcd/variants/single-node"},
	{Folder: "kos-apiserver", Index: "addon.yaml", Variant: "-k8s-1.29", Source: "source/kos-apiserver/variants/k8s-1.29", Modules: []string{"k8s.io/apiserver"}},
	{Folder: "kos-apiserver", Index: "addon.yaml", Variant: "-k8s-1.30", Source: "source/kos-apiserver/base", Modules: []string{"k8s.io/apiserver"}},
	{Folder: "kos-controller-manager", Index: "addon.yaml", Source: "source/kos-controller-manager/base"},
	{Folder: "kos-agent", Index: "addon.yaml", Variant: "-k8s-1.29", Source: "source/kos-agent/variants/k8s-1.29"},
	{Folder: "kos-agent", Index: "addon.yaml", Variant: "-k8s-1.30", Source: "source/kos-agent/base"},
	{Folder: "kos-agent-userspace", Index: "addon.yaml", Variant: "-k8s-1.29", Source: "source/kos-agent/variants/userspace-k8s-1.29"},
	{Folder: "kos-agent-userspace", Index: "addon.yaml", Variant: "-k8s-1.30", Source: "source/kos-agent/variants/userspace"},
	{Folder: "kos-monitoring", Index: "addon.yaml", Source: "source/kos-monitoring/base"},
	{Folder: "kos-monitoring/prometheus-operator", Index: "channel.yaml", Source: "source/kos-monitoring/variants/prometheus-operator"},
}

// headModules are the Go modules every manifest's head names: the API
// types and the renderer.
var headModules = []string{"k8s.io/api", "sigs.k8s.io/kustomize/api"}
