package channels

import (
	"strings"

	"github.com/blang/semver/v4"
)

// The reasons Decide gives, as the plan shows them.
const (
	ReasonInstall         = "install"
	ReasonUpgrade         = "upgrade"
	ReasonIDChanged       = "id changed"
	ReasonManifestChanged = "manifest changed"
	ReasonUpToDate        = "up to date"
	ReasonDowngrade       = "downgrade refused"
	ReasonNewerTool       = "record from a newer tool"
)

// Decision says whether to apply a release, and why.
type Decision struct {
	// Apply is true when the release is to be applied.
	Apply bool
	// Reason is short text for the plan, one of the Reason constants.
	Reason string
}

// Decide weighs release c against r, the install record of its addon on the
// cluster; r is nil when there is none, and the caller passes nil too for a
// record that does not parse. The rules are kOps's:
//
//   - no record: apply;
//   - a record with systemGeneration above CurrentSystemGeneration was
//     written by a newer tool: never touch it;
//   - both versioned: a newer release applies, an older one never does
//     (never downgrade), and an equal one applies when the ids differ or the
//     manifest hashes do;
//   - either without a version (kOps 1.22 and later write records without
//     one): apply when the ids or the manifest hashes differ. Plan first
//     looks such a record's version up in the channel it names
//     (recordVersions), so this applies only when that fails.
//
// The hashes compared are the channel entry's manifestHash and the record's,
// either possibly empty; no hash of the fetched manifest stands in for a
// missing one.
func Decide(c *Addon, r *Record) Decision {
	if r == nil {
		return Decision{Apply: true, Reason: ReasonInstall}
	}
	if r.SystemGeneration > CurrentSystemGeneration {
		return Decision{Reason: ReasonNewerTool}
	}
	var installed *semver.Version
	if r.Version != "" {
		v, err := semver.ParseTolerant(r.Version)
		if err != nil {
			// ParseRecord refuses such records; one built by hand is
			// treated as unreadable, which installs.
			return Decision{Apply: true, Reason: ReasonInstall}
		}
		installed = &v
	}
	if c.Version != nil && installed != nil {
		switch c.Version.Compare(*installed) {
		case 1:
			return Decision{Apply: true, Reason: ReasonUpgrade}
		case -1:
			return Decision{Reason: ReasonDowngrade}
		}
	}
	switch {
	case c.ID != r.ID:
		return Decision{Apply: true, Reason: ReasonIDChanged}
	case !strings.EqualFold(c.ManifestHash, r.ManifestHash):
		return Decision{Apply: true, Reason: ReasonManifestChanged}
	default:
		return Decision{Reason: ReasonUpToDate}
	}
}
