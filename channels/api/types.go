// Package api holds the wire types of channel files (kind: Addons), in the
// format kOps writes, so that a kOps channel loads unchanged.
//
// It holds no logic beyond what a wire type needs; loading, validation and
// selection live in package channels.
package api

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Kind is the kind of a channel file. A location whose first YAML document is
// of another kind is a plain manifest.
const Kind = "Addons"

// Addons is a channel: a list of addon releases.
type Addons struct {
	metav1.TypeMeta `json:",inline"`
	// ObjectMeta names the channel; metadata.name is the default addon name.
	ObjectMeta metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec AddonsSpec `json:"spec,omitempty"`
}

// AddonsSpec lists the releases a channel offers.
type AddonsSpec struct {
	Addons []*AddonSpec `json:"addons,omitempty"`
}

// NeedsRollingUpdate names the nodes to mark for a rolling update when an
// addon is updated.
type NeedsRollingUpdate string

// The values of NeedsRollingUpdate kOps defines.
const (
	NeedsRollingUpdateControlPlane NeedsRollingUpdate = "control-plane"
	NeedsRollingUpdateWorkers      NeedsRollingUpdate = "workers"
	NeedsRollingUpdateAll          NeedsRollingUpdate = "all"
)

// AddonSpec is one release of one addon.
type AddonSpec struct {
	// Name is the addon's identity; it defaults to the channel's metadata.name.
	Name *string `json:"name,omitempty"`
	// Namespace holds the addon's install record; it defaults to kube-system.
	Namespace *string `json:"namespace,omitempty"`
	// Selector holds labels that every object of the addon carries. The tool
	// stamps them onto each object it applies and prunes by them.
	Selector map[string]string `json:"selector"`
	// Version is the semver of this release; "1.6" is read as 1.6.0.
	Version string `json:"version,omitempty"`
	// Manifest locates the manifest, relative to the channel's own location.
	Manifest *string `json:"manifest,omitempty"`
	// ManifestHash is the hex SHA-256 of the manifest's bytes.
	ManifestHash string `json:"manifestHash,omitempty"`
	// KubernetesVersion is a semver range; clusters outside it ignore this entry.
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`
	// ID breaks ties between releases of equal version, usually naming the
	// Kubernetes range the release is for (k8s-1.29).
	ID string `json:"id,omitempty"`
	// NeedsRollingUpdate marks matching nodes kops.k8s.io/needs-update on an update.
	NeedsRollingUpdate NeedsRollingUpdate `json:"needsRollingUpdate,omitempty"`
	// NeedsPKI asks for a CA Secret (kube-system/NAME-ca) and a cert-manager
	// Issuer (kube-system/NAME) signing with it, as kOps provides them.
	NeedsPKI bool `json:"needsPKI,omitempty"`
	// Prune adds kinds to prune beyond those the addon applied.
	Prune *PruneSpec `json:"prune,omitempty"`
	// UpgradesFrom is the oldest installed version this release upgrades
	// from (a version such as 0.2.0, not a range): an addon installed at an
	// older version must go through a release in between first. Empty
	// means any. kOps's channels ignores the field (it decodes channels
	// leniently), so a channel carrying it still loads there.
	UpgradesFrom string `json:"upgradesFrom,omitempty"`
}

// PruneSpec says which objects, beyond the ones the addon applied before,
// pruning considers.
type PruneSpec struct {
	Kinds []PruneKindSpec `json:"kinds,omitempty"`
}

// PruneKindSpec names one kind to prune, optionally narrowed.
type PruneKindSpec struct {
	Group string `json:"group,omitempty"`
	Kind  string `json:"kind,omitempty"`
	// Namespaces limits pruning to these namespaces.
	Namespaces []string `json:"namespaces,omitempty"`
	// LabelSelector narrows pruning further than the addon's selector.
	LabelSelector string `json:"labelSelector,omitempty"`
	// FieldSelector narrows pruning by fields.
	FieldSelector string `json:"fieldSelector,omitempty"`
}
