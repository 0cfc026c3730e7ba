package channel

import (
	"github.com/blang/semver/v4"

	"github.com/kos-sdn/kos/channels/api"
)

// DefaultNamespace holds install records when an addon names no namespace.
const DefaultNamespace = "kube-system"

// Addon is one release of one addon, read from a channel and resolved against
// the channel's location: the candidate the update decision weighs.
type Addon struct {
	// Name is the addon's identity (spec.name, else the channel's metadata.name).
	Name string
	// Namespace holds the install record.
	Namespace string
	// Version is nil when the entry has none.
	Version *semver.Version
	// ID breaks ties between releases of equal version.
	ID string
	// KubernetesVersion is the entry's semver range as written ("" for any);
	// Load has checked that it parses.
	KubernetesVersion string
	// Manifest is the absolute location of the manifest.
	Manifest string
	// ManifestHash is the channel entry's hex SHA-256 of the manifest; empty
	// when the entry gives none (a plain manifest location always has one).
	ManifestHash string
	// Selector labels every object of the addon.
	Selector map[string]string
	// Prune lists extra kinds to prune; nil when the entry has none.
	Prune *api.PruneSpec
	// NeedsRollingUpdate marks nodes on an update.
	NeedsRollingUpdate api.NeedsRollingUpdate
	// NeedsPKI asks, as in kOps, for a CA Secret and a cert-manager Issuer
	// for the addon before its manifest is applied.
	NeedsPKI bool
	// UpgradesFrom is the oldest installed version the release upgrades
	// from; nil when it upgrades from any.
	UpgradesFrom *semver.Version
	// Channel is the location of the channel the release came from.
	Channel string
	// Inline holds the manifest's bytes when the location was itself a plain
	// manifest, so it is not fetched twice; nil otherwise.
	Inline []byte
}

// VersionString is the release's version as a record stores it, or "" when
// it has none.
func (a *Addon) VersionString() string {
	if a.Version == nil {
		return ""
	}
	return a.Version.String()
}

// DescribeRelease shows a version and an id as "0.1.0 (k8s-1.29)". A release
// without a version (kOps writes such records) shows as "unversioned".
func DescribeRelease(version, id string) string {
	if version == "" {
		version = "unversioned"
	}
	if id == "" {
		return version
	}
	return version + " (" + id + ")"
}
