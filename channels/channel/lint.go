package channel

import (
	"fmt"
	"sort"
	"strings"

	"github.com/blang/semver/v4"
)

// The rules Lint checks, as LintProblem.Rule names them.
const (
	// LintDowngrade: a newer Kubernetes minor gets an older release of the
	// addon than an earlier minor does, so upgrading the cluster downgrades
	// the addon (an open-ended range of an old release outliving the capped
	// range of a newer one).
	LintDowngrade = "downgrade"
	// LintTie: two entries of one addon with the same version fit one
	// Kubernetes version; channels takes the first, kOps's channels the
	// last.
	LintTie = "tie"
	// LintSplit: the releases of one addon that fit one Kubernetes version
	// come from several channels; kOps applies channels one at a time, so
	// the addon switches between them on every pass.
	LintSplit = "split"
	// LintKOps: kOps's channels, which takes the last entry that fits,
	// would choose another release than channels, which takes the newest.
	LintKOps = "kops"
	// LintUpgradePath: a release names the oldest version it upgrades from
	// (upgradesFrom), the channels list older releases, but on some
	// Kubernetes version no release to go through fits: a cluster with an
	// older release installed cannot reach it.
	LintUpgradePath = "upgrade-path"
)

// lintMaxMinor is the last Kubernetes 1.x minor Lint looks at: far enough
// beyond any release that an open-ended range shows what it will do.
const lintMaxMinor = 99

// LintProblem is one reason a set of channels is unsafe to apply.
type LintProblem struct {
	// Addon is the addon's name.
	Addon string
	// Rule is one of the Lint constants.
	Rule string
	// Message says which entries and why, and what to change.
	Message string
}

func (p LintProblem) String() string {
	return fmt.Sprintf("%s: %s: %s", p.Addon, p.Rule, p.Message)
}

// Lint checks the releases of channels meant to be applied together, as
// Load returns them and in the order the channels are given (concatenated),
// for what goes wrong only on some clusters or some day: for every
// Kubernetes version 1.0 to 1.99 (patch 0 and 99) it picks each addon's
// release as Select does, and as kOps's channels does (the last entry that
// fits, whatever its version), and reports
//
//   - a release older than one picked for an earlier Kubernetes version
//     (LintDowngrade), by either tool: a cluster upgraded past a capped
//     range falls back to an old open-ended one;
//   - two fitting entries of one version (LintTie);
//   - fitting entries of one addon from several channels (LintSplit);
//   - kOps's pick differing in version from ours (LintKOps);
//   - a release whose upgradesFrom no fitting release lets a cluster reach
//     from the older releases listed (LintUpgradePath).
//
// Each problem is reported once, at the first Kubernetes version it shows
// on. The result is sorted by addon, then rule; none means the channels are
// safe to apply together, with either tool.
func Lint(releases []*Addon) []LintProblem {
	byName := map[string][]*Addon{}
	var names []string
	for _, a := range releases {
		if _, ok := byName[a.Name]; !ok {
			names = append(names, a.Name)
		}
		byName[a.Name] = append(byName[a.Name], a)
	}
	sort.Strings(names)
	var out []LintProblem
	for _, name := range names {
		out = append(out, lintAddon(name, byName[name])...)
	}
	return out
}

// lintAddon checks the releases of one addon, in channel order.
func lintAddon(name string, releases []*Addon) []LintProblem {
	var out []LintProblem
	report := func(rule, format string, args ...any) {
		out = append(out, LintProblem{Addon: name, Rule: rule, Message: fmt.Sprintf(format, args...)})
	}
	type pair struct{ a, b *Addon }
	reported := map[pair]bool{}
	splits := map[[2]string]bool{} // pairs of channels reported
	ours, kops := &lintPicks{}, &lintPicks{}
	kopsDiffers := false
	noPath := map[*Addon]bool{}
	for _, k := range lintVersions() {
		var fitting []*Addon
		for _, a := range releases {
			if fits(a, k) {
				fitting = append(fitting, a)
			}
		}
		if len(fitting) == 0 {
			// Nothing to apply: neither tool touches the addon.
			continue
		}
		for _, a := range fitting {
			if noPath[a] || !missingStep(a, releases, fitting) {
				continue
			}
			noPath[a] = true
			report(LintUpgradePath, "%s upgrades from %s or later (upgradesFrom), and the channels list older releases, but on Kubernetes %s no release from %s below %s fits: a cluster with an older one installed cannot upgrade; list a release in between for that Kubernetes version",
				describeEntry(a), a.UpgradesFrom, k, a.UpgradesFrom, a.Version)
		}
		for i, a := range fitting {
			for _, b := range fitting[:i] {
				if reported[pair{b, a}] {
					continue
				}
				switch {
				case a.Channel != b.Channel:
					if splits[[2]string{b.Channel, a.Channel}] {
						continue
					}
					splits[[2]string{b.Channel, a.Channel}] = true
					report(LintSplit, "%s and %s both fit Kubernetes %s but are in different channels: kOps's channels applies channels one at a time, so the addon would switch between them on every pass; list the releases for one kind of cluster in one channel (make release FLAVOR=...)",
						describeEntry(b), describeEntry(a), k)
				case a.VersionString() == b.VersionString():
					reported[pair{b, a}] = true
					report(LintTie, "%s and %s have the same version and both fit Kubernetes %s: channels would choose the first, kOps's channels the last; make their kubernetesVersion ranges disjoint",
						describeEntry(b), describeEntry(a), k)
				}
			}
		}
		pick := Select(fitting, k)[0]
		kpick := fitting[len(fitting)-1]
		if !kopsDiffers && pick.VersionString() != kpick.VersionString() {
			kopsDiffers = true
			report(LintKOps, "on Kubernetes %s channels chooses the newest, %s, but kOps's channels the last entry that fits, %s: list the releases oldest first",
				k, describeEntry(pick), describeEntry(kpick))
		}
		ourBest, ourAt, ourDown := ours.next(pick, k)
		kopsBest, kopsAt, kopsDown := kops.next(kpick, k)
		const hint = "a cluster upgraded to %s would go back to the older release (and a new one would get it); end the older release's kubernetesVersion range where the newer one's ends"
		switch {
		case ourDown && kopsDown && pick == kpick && ourBest == kopsBest:
			report(LintDowngrade, "on Kubernetes %s channels and kOps's channels choose %s, older than %s, which they choose on Kubernetes %s: "+hint,
				k, describeEntry(pick), describeEntry(ourBest), ourAt, k)
		default:
			if ourDown {
				report(LintDowngrade, "on Kubernetes %s channels chooses %s, older than %s, which it chooses on Kubernetes %s: "+hint,
					k, describeEntry(pick), describeEntry(ourBest), ourAt, k)
			}
			if kopsDown {
				report(LintDowngrade, "on Kubernetes %s kOps's channels chooses %s, older than %s, which it chooses on Kubernetes %s: "+hint,
					k, describeEntry(kpick), describeEntry(kopsBest), kopsAt, k)
			}
		}
	}
	return out
}

// lintPicks follows one tool's picks for one addon across Kubernetes
// versions.
type lintPicks struct {
	// best is the newest release picked so far, last at the version at.
	best *Addon
	at   semver.Version
	// reported is set once a downgrade was reported: one is enough.
	reported bool
}

// next records the pick for Kubernetes version k and reports, the first
// time only, a pick older than the best so far (returned with where it was
// picked).
func (p *lintPicks) next(pick *Addon, k semver.Version) (best *Addon, at semver.Version, downgrade bool) {
	if p.best != nil && newer(p.best, pick) {
		if p.reported {
			return nil, semver.Version{}, false
		}
		p.reported = true
		return p.best, p.at, true
	}
	p.best, p.at = pick, k
	return nil, semver.Version{}, false
}

// lintVersions are the Kubernetes versions Lint picks releases for, in
// order.
func lintVersions() []semver.Version {
	var out []semver.Version
	for minor := uint64(0); minor <= lintMaxMinor; minor++ {
		for _, patch := range []uint64{0, 99} {
			out = append(out, semver.Version{Major: 1, Minor: minor, Patch: patch})
		}
	}
	return out
}

// describeEntry names a channel entry in Lint's messages:
// "0.1.0 (k8s-1.29, >=1.29.0) of bootstrap-channel.yaml".
func describeEntry(a *Addon) string {
	var details []string
	if a.ID != "" {
		details = append(details, a.ID)
	}
	r := a.KubernetesVersion
	if r == "" {
		r = "any Kubernetes"
	}
	details = append(details, r)
	return fmt.Sprintf("%s (%s) of %s", DescribeRelease(a.VersionString(), ""), strings.Join(details, ", "), a.Channel)
}

// missingStep reports whether a names an UpgradesFrom, releases hold one
// older than it, and none of fitting lies between it and a: the release a
// cluster installed below UpgradesFrom must go through.
func missingStep(a *Addon, releases, fitting []*Addon) bool {
	if a.UpgradesFrom == nil || a.Version == nil {
		return false
	}
	older := false
	for _, b := range releases {
		if b.Version != nil && b.Version.LT(*a.UpgradesFrom) {
			older = true
			break
		}
	}
	if !older {
		return false
	}
	for _, b := range fitting {
		if b.Version != nil && !b.Version.LT(*a.UpgradesFrom) && b.Version.LT(*a.Version) {
			return false
		}
	}
	return true
}

// LintEnd names the problems and warnings of LintRangeEnds.
const LintEnd = "end"

// LintRangeEnds checks where the kubernetesVersion ranges of each addon
// end, against current, the newest Kubernetes minor released: an addon
// none of whose releases fits current is a problem (a cluster on it gets
// no release: the cliff), and one none of whose releases fits the next
// minor is a warning (a cluster upgraded to it will fall off). Both are
// sorted by addon.
func LintRangeEnds(releases []*Addon, current semver.Version) (problems, warnings []LintProblem) {
	current = semver.Version{Major: current.Major, Minor: current.Minor}
	next := semver.Version{Major: current.Major, Minor: current.Minor + 1}
	byName := map[string][]*Addon{}
	var names []string
	for _, a := range releases {
		if _, ok := byName[a.Name]; !ok {
			names = append(names, a.Name)
		}
		byName[a.Name] = append(byName[a.Name], a)
	}
	sort.Strings(names)
	for _, name := range names {
		rels := byName[name]
		switch {
		case len(Fitting(rels, current)) == 0:
			problems = append(problems, LintProblem{Addon: name, Rule: LintEnd, Message: fmt.Sprintf(
				"no release fits Kubernetes %d.%d, the newest minor: %s; a cluster on it gets no release of the addon; claim it in a release tested there",
				current.Major, current.Minor, NoFit{Name: name, KubeVersion: current, Releases: rels}.offers())})
		case len(Fitting(rels, next)) == 0:
			warnings = append(warnings, LintProblem{Addon: name, Rule: LintEnd, Message: fmt.Sprintf(
				"no release fits Kubernetes %d.%d, the next minor: a cluster upgraded to it will get no release of the addon (channels then fails, naming it) until a release tested there claims it",
				next.Major, next.Minor)})
		}
	}
	return problems, warnings
}
