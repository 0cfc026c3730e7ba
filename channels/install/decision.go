package install

import (
	"fmt"
	"strings"

	"github.com/blang/semver/v4"

	"github.com/kos-sdn/kos/channels/channel"
)

// The reasons Decide gives, as the plan shows them. A pending release that
// did not finish gives "<version> did not finish" (ReasonUnfinished); going
// back from it gives "rollback: <version> did not finish" (ReasonRollback),
// or, in a daemon without consent, "rollback refused: ..."
// (ReasonRollbackRefused); completing it gives "complete: <version> became
// ready" (ReasonComplete); a jump gives "upgrade path: ..."
// (ReasonUpgradePath).
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
	ReasonRollback         = "rollback"
	ReasonRollbackRefused  = "rollback refused"
	ReasonComplete         = "complete"
	ReasonUpgradePath      = "upgrade path"
)

// Decision says whether to apply a release, and why.
type Decision struct {
	// Apply is true when the release is to be applied.
	Apply bool
	// Reason is short text for the plan: one of the Reason constants, or
	// one of them followed by ": " and details.
	Reason string
	// Unfinished names the pending release (its version, or its id) that a
	// run started and did not finish, when that is why Apply is set.
	Unfinished string
	// Blocked is set when the release is not applied and the addon stays
	// behind its channels until someone acts (a jump the release does not
	// allow, a rollback a daemon does not make on its own): unlike a
	// refused downgrade, the run reports it as an error (Plan.Problems).
	Blocked bool
}

// Notable reports whether the plan should show the reason of an applied
// release next to it: it replaces or completes a release that did not
// finish, or goes below the recorded one.
func (d Decision) Notable() bool {
	return d.Apply && (d.Unfinished != "" || d.Reason == ReasonDowngradeAllowed)
}

// Completes reports whether the decision records a pending release that
// became ready since its run's wait ended.
func (d Decision) Completes() bool {
	return d.Apply && strings.HasPrefix(d.Reason, ReasonComplete+":")
}

// RollsBack reports whether the decision goes back from a pending release.
func (d Decision) RollsBack() bool {
	return d.Apply && strings.HasPrefix(d.Reason, ReasonRollback+":")
}

// DecideOptions tune Decide. The zero value follows kOps's rules, with the
// pending release added, as a person running the command gets them.
type DecideOptions struct {
	// AllowDowngrade is the operator's consent to go back from a release
	// that installed successfully: to apply a release older than the
	// recorded one, or older than a pending release that became ready.
	// Without it both are refused. In a daemon (Unattended) it also lets
	// the daemon go back from a pending release that failed.
	AllowDowngrade bool
	// Unattended is set by a run no person watches (the daemon): it never
	// goes back from a pending release on its own, not even one that
	// failed, unless AllowDowngrade. It reports the addon and waits.
	Unattended bool

	// Offered are the releases of the channels that fit the cluster, where
	// Decide looks for the release a jump must go through. Client.PlanWith
	// sets them; a caller of Decide may leave them out, and a blocked jump
	// then names no release of the channels.
	Offered []*channel.Addon
}

// Decide weighs release c against r, the install record of its addon on the
// cluster, and p, the release a run started applying and did not finish. r
// is nil when there is none, and the caller passes nil too for a record that
// does not parse; p is nil when no run left one. The rules are kOps's, with
// the pending release, consent and upgrade paths added:
//
//   - a record with systemGeneration above CurrentSystemGeneration was
//     written by a newer tool: never touch it;
//   - both versioned and c older than r: never apply (never downgrade),
//     unless opts.AllowDowngrade;
//   - a pending release that names its release (see decidePending): c is
//     that release: apply it, to finish it (or, when it became ready,
//     ReasonComplete); c is newer: apply it, replacing it (unless a jump,
//     as below); c goes back from
//     it: a rollback, applied when the pending release failed and a person
//     runs the command (re-applying the recorded release after a failed
//     upgrade restores it and prunes what only the failed one added), and
//     otherwise only with opts.AllowDowngrade;
//   - no record: apply;
//   - both versioned: a newer release applies, unless it names an
//     UpgradesFrom above the recorded version (a jump: blocked, naming the
//     release to go through), and an equal one applies when the ids differ
//     or the manifest hashes do;
//   - either without a version (kOps 1.22 and later write records without
//     one): apply when the ids or the manifest hashes differ. Plan first
//     looks such a record's version up in the channel it names
//     (RecordVersions), so this applies only when that fails.
//
// A pending annotation of an older tool names no release (only kinds and
// namespaces to prune) and leaves the decision as if there were none.
// The hashes compared are the channel entry's manifestHash and the record's,
// either possibly empty; no hash of the fetched manifest stands in for a
// missing one.
func Decide(c *channel.Addon, r *Record, p *Pending, opts DecideOptions) Decision {
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
	if p.NamesRelease() {
		return decidePending(c, installed, p, opts)
	}
	switch {
	case r == nil:
		return Decision{Apply: true, Reason: ReasonInstall}
	case newer > 0:
		if d, ok := upgradePath(c, installed, opts.Offered); !ok {
			return d
		}
		return Decision{Apply: true, Reason: ReasonUpgrade}
	case c.ID != r.ID:
		return Decision{Apply: true, Reason: ReasonIDChanged}
	case !strings.EqualFold(c.ManifestHash, r.ManifestHash):
		return Decision{Apply: true, Reason: ReasonManifestChanged}
	default:
		return Decision{Reason: ReasonUpToDate}
	}
}

// decidePending decides for a candidate c not below the installed version
// when a run left pending release p:
//
//	c is p, ready now (p.Ready)         apply: complete (records it)
//	c is p                              apply: finish it
//	c newer than p                      apply, unless a jump from installed
//	c goes back from p, consented       apply: rollback
//	c goes back from p, p ready         refused (Plan weighs p instead)
//	c goes back from p, Unattended      refused, blocked: the daemon waits
//	c goes back from p, p failed        apply: rollback (a person's way out)
//
// c goes back from p when it is older, or when either has no version (no
// order is known, so consent is asked for as for going back).
func decidePending(c *channel.Addon, installed *semver.Version, p *Pending, opts DecideOptions) Decision {
	rel := p.Release()
	unfinished := rel + " " + ReasonUnfinished
	switch {
	case p.Is(c) && p.Ready:
		return Decision{Apply: true, Reason: ReasonComplete + ": " + rel + " became ready", Unfinished: rel}
	case p.Is(c):
		return Decision{Apply: true, Reason: unfinished, Unfinished: rel}
	case !GoesBack(c, p):
		if d, ok := upgradePath(c, installed, opts.Offered); !ok {
			return d
		}
		return Decision{Apply: true, Reason: unfinished, Unfinished: rel}
	case opts.AllowDowngrade:
		return Decision{Apply: true, Reason: ReasonRollback + ": " + unfinished, Unfinished: rel}
	case p.Ready:
		return Decision{Reason: ReasonRollbackRefused + ": " + rel + " became ready; going back from it needs --allow-downgrade", Blocked: true}
	case opts.Unattended:
		return Decision{Reason: ReasonRollbackRefused + ": " + unfinished + "; a daemon does not roll back on its own: fix the release, or roll back once with apply channel --yes", Blocked: true}
	default:
		return Decision{Apply: true, Reason: ReasonRollback + ": " + unfinished, Unfinished: rel}
	}
}

// GoesBack reports whether applying c would go back from pending release p:
// c is older, or the two cannot be ordered.
func GoesBack(c *channel.Addon, p *Pending) bool {
	if c.Version == nil || p.Version == "" {
		return true
	}
	v, err := semver.ParseTolerant(p.Version)
	if err != nil {
		return true
	}
	return c.Version.LT(v)
}

// upgradePath checks that c upgrades from the installed version: it does
// unless c names an UpgradesFrom above it. A jump is blocked with a reason
// naming the release to go through, found among offered when they hold one.
func upgradePath(c *channel.Addon, installed *semver.Version, offered []*channel.Addon) (Decision, bool) {
	if c.UpgradesFrom == nil || installed == nil || !installed.LT(*c.UpgradesFrom) {
		return Decision{}, true
	}
	return Decision{
		Reason:  fmt.Sprintf("%s: %s upgrades from %s or later, not from %s: %s", ReasonUpgradePath, c.Version, c.UpgradesFrom, installed, through(c, *installed, offered)),
		Blocked: true,
	}, false
}

// through says which release to apply before c when installed is below c's
// UpgradesFrom: the newest release of the addon among offered, between
// UpgradesFrom and c, that upgrades from installed; else the oldest one
// between them (which names its own step in turn); else any release from
// UpgradesFrom on.
func through(c *channel.Addon, installed semver.Version, offered []*channel.Addon) string {
	var direct, first *channel.Addon
	for _, a := range offered {
		if a.Name != c.Name || a.Version == nil || a.Version.LT(*c.UpgradesFrom) || !a.Version.LT(*c.Version) {
			continue
		}
		if (a.UpgradesFrom == nil || !installed.LT(*a.UpgradesFrom)) && (direct == nil || a.Version.GT(*direct.Version)) {
			direct = a
		}
		if first == nil || a.Version.LT(*first.Version) {
			first = a
		}
	}
	switch {
	case direct != nil:
		return fmt.Sprintf("upgrade to %s first (a channel whose newest %s is %s)", direct.Version, c.Name, direct.Version)
	case first != nil:
		return fmt.Sprintf("upgrade to %s first, and on from there (a channel whose newest %s is %s)", first.Version, c.Name, first.Version)
	default:
		return fmt.Sprintf("upgrade to a release from %s on first; the channels list none", c.UpgradesFrom)
	}
}
