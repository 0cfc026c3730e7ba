package channels

import (
	"strings"

	"github.com/blang/semver/v4"
)

// The reasons Decide gives, as the plan shows them. A pending release that
// did not finish gives "<version> did not finish" (ReasonUnfinished).
const (
	ReasonInstall          = "install"
	ReasonUpgrade          = "upgrade"
	ReasonIDChanged        = "id changed"
	ReasonManifestChanged  = "manifest changed"
	ReasonUpToDate         = "up to date"
	ReasonDowngrade        = "downgrade refused"
	ReasonDowngradeAllowed = "downgrade allowed"
	ReasonNewerTool        = "record from a newer tool"
	ReasonUnfinished       = "did not finish"
)

// Decision says whether to apply a release, and why.
type Decision struct {
	// Apply is true when the release is to be applied.
	Apply bool
	// Reason is short text for the plan, one of the Reason constants, or
	// "<Unfinished> did not finish".
	Reason string
	// Unfinished names the pending release (its version, or its id) that a
	// run started and did not finish, when that is why Apply is set.
	Unfinished string
}

// Notable reports whether the plan should show the reason of an applied
// release next to it: it replaces a release that did not finish, or goes
// below the recorded one.
func (d Decision) Notable() bool {
	return d.Apply && (d.Unfinished != "" || d.Reason == ReasonDowngradeAllowed)
}

// DecideOptions tune Decide. The zero value follows kOps's rules.
type DecideOptions struct {
	// AllowDowngrade applies a release older than the recorded one, which
	// is otherwise refused: the operator's explicit choice to go back.
	AllowDowngrade bool
}

// Decide weighs release c against r, the install record of its addon on the
// cluster, and p, the release a run started applying and did not finish. r
// is nil when there is none, and the caller passes nil too for a record that
// does not parse; p is nil when no run left one. The rules are kOps's, with
// the pending release added:
//
//   - a record with systemGeneration above CurrentSystemGeneration was
//     written by a newer tool: never touch it;
//   - both versioned and c older than r: never apply (never downgrade),
//     unless opts.AllowDowngrade;
//   - a pending release that names its release: apply, whether it is c
//     (to finish it) or another (to replace it: re-applying the recorded
//     release after a failed upgrade restores it and prunes what only the
//     failed one added). Going back to the recorded release is no
//     downgrade, so a rollback needs no AllowDowngrade; going below it does;
//   - no record: apply;
//   - both versioned: a newer release applies, and an equal one applies when
//     the ids differ or the manifest hashes do;
//   - either without a version (kOps 1.22 and later write records without
//     one): apply when the ids or the manifest hashes differ. Plan first
//     looks such a record's version up in the channel it names
//     (recordVersions), so this applies only when that fails.
//
// A pending annotation of an older tool names no release (only kinds and
// namespaces to prune) and leaves the decision as if there were none.
// The hashes compared are the channel entry's manifestHash and the record's,
// either possibly empty; no hash of the fetched manifest stands in for a
// missing one.
func Decide(c *Addon, r *Record, p *Pending, opts DecideOptions) Decision {
	if r != nil && r.SystemGeneration > CurrentSystemGeneration {
		return Decision{Reason: ReasonNewerTool}
	}
	var installed *semver.Version
	if r != nil && r.Version != "" {
		v, err := semver.ParseTolerant(r.Version)
		if err != nil {
			// ParseRecord refuses such records; one built by hand is
			// treated as unreadable, which installs.
			r = nil
		} else {
			installed = &v
		}
	}
	newer := 0
	if c.Version != nil && installed != nil {
		newer = c.Version.Compare(*installed)
	}
	if newer < 0 {
		if !opts.AllowDowngrade {
			return Decision{Reason: ReasonDowngrade}
		}
		return Decision{Apply: true, Reason: ReasonDowngradeAllowed}
	}
	if p.namesRelease() {
		return Decision{Apply: true, Reason: p.release() + " " + ReasonUnfinished, Unfinished: p.release()}
	}
	switch {
	case r == nil:
		return Decision{Apply: true, Reason: ReasonInstall}
	case newer > 0:
		return Decision{Apply: true, Reason: ReasonUpgrade}
	case c.ID != r.ID:
		return Decision{Apply: true, Reason: ReasonIDChanged}
	case !strings.EqualFold(c.ManifestHash, r.ManifestHash):
		return Decision{Apply: true, Reason: ReasonManifestChanged}
	default:
		return Decision{Reason: ReasonUpToDate}
	}
}
