package channel

import (
	"fmt"
	"sort"
	"strings"

	"github.com/blang/semver/v4"
	"k8s.io/klog/v2"
)

// ServerVersion turns the gitVersion discovery reports ("v1.31.0-beta.1+abc")
// into the version kubernetesVersion ranges are matched against (1.31.0). The
// pre-release and build parts are dropped, as in kOps, so that a pre-release
// of 1.31 gets what 1.31 gets.
func ServerVersion(gitVersion string) (semver.Version, error) {
	v, err := semver.ParseTolerant(gitVersion)
	if err != nil {
		return semver.Version{}, fmt.Errorf("server version %q is not a semantic version: %w", gitVersion, err)
	}
	return semver.Version{Major: v.Major, Minor: v.Minor, Patch: v.Patch}, nil
}

// Select picks, for each addon name, the release to weigh against the
// cluster: the highest version among the releases whose kubernetesVersion
// range contains kubeVersion (an entry without a range fits every cluster).
// A release without version ranks below every versioned one; between equal
// versions the one listed first wins, so that several channels given at once
// (their Load results concatenated) keep their order of precedence. The
// result is sorted by name.
func Select(releases []*Addon, kubeVersion semver.Version) []*Addon {
	kubeVersion = semver.Version{Major: kubeVersion.Major, Minor: kubeVersion.Minor, Patch: kubeVersion.Patch}
	best := map[string]*Addon{}
	for _, a := range releases {
		if !fits(a, kubeVersion) {
			continue
		}
		if cur, ok := best[a.Name]; !ok || newer(a, cur) {
			best[a.Name] = a
		}
	}
	selected := make([]*Addon, 0, len(best))
	for _, a := range best {
		selected = append(selected, a)
	}
	sort.Slice(selected, func(i, j int) bool { return selected[i].Name < selected[j].Name })
	return selected
}

// Fitting returns the releases whose kubernetesVersion range contains
// kubeVersion, in their order.
func Fitting(releases []*Addon, kubeVersion semver.Version) []*Addon {
	kubeVersion = semver.Version{Major: kubeVersion.Major, Minor: kubeVersion.Minor, Patch: kubeVersion.Patch}
	var out []*Addon
	for _, a := range releases {
		if fits(a, kubeVersion) {
			out = append(out, a)
		}
	}
	return out
}

// fits reports whether a's kubernetesVersion range contains kubeVersion.
func fits(a *Addon, kubeVersion semver.Version) bool {
	if a.KubernetesVersion == "" {
		return true
	}
	r, err := semver.ParseRange(a.KubernetesVersion)
	if err != nil {
		// Load refuses such ranges; a release built by hand may still have one.
		klog.InfoS("Ignoring addon release with an unparseable kubernetesVersion", "addon", a.Name, "kubernetesVersion", a.KubernetesVersion, "err", err)
		return false
	}
	return r(kubeVersion)
}

// newer reports whether a ranks strictly above b.
func newer(a, b *Addon) bool {
	switch {
	case a.Version == nil:
		return false
	case b.Version == nil:
		return true
	default:
		return a.Version.GT(*b.Version)
	}
}

// NoFit is an addon the channels list none of whose releases fits the
// cluster's Kubernetes version: the cliff a cluster upgraded past every
// range falls off. Nothing of the addon is applied, and the run says so
// rather than finding nothing to do.
type NoFit struct {
	// Name is the addon's name.
	Name string
	// KubeVersion is the cluster's version, as ranges are matched against it.
	KubeVersion semver.Version
	// Releases are the addon's releases, in channel order.
	Releases []*Addon
}

// Error names the cluster's version and, newest release first, the
// kubernetesVersion ranges the channels offer.
func (n NoFit) Error() string {
	return fmt.Sprintf("no release fits Kubernetes %s: %s; the addon is left as it is until a channel offers a release for Kubernetes %d.%d",
		n.KubeVersion, n.offers(), n.KubeVersion.Major, n.KubeVersion.Minor)
}

// offers says which ranges the releases claim, with the newest release of
// each, newest first: "the channels offer 0.3.0 for >=1.29.0 <1.38.0".
func (n NoFit) offers() string {
	type offer struct {
		newest *Addon
		ranges string
	}
	var offers []*offer
	byRange := map[string]*offer{}
	for _, a := range n.Releases {
		r := a.KubernetesVersion
		o, ok := byRange[r]
		if !ok {
			o = &offer{newest: a, ranges: r}
			byRange[r] = o
			offers = append(offers, o)
		}
		if newer(a, o.newest) {
			o.newest = a
		}
	}
	sort.SliceStable(offers, func(i, j int) bool { return newer(offers[i].newest, offers[j].newest) })
	parts := make([]string, len(offers))
	for i, o := range offers {
		parts[i] = fmt.Sprintf("%s for %s", DescribeRelease(o.newest.VersionString(), o.newest.ID), o.ranges)
	}
	return "the channels offer " + strings.Join(parts, ", ")
}

// Unfit returns the addons of releases none of whose releases fits
// kubeVersion (see Select), sorted by name.
func Unfit(releases []*Addon, kubeVersion semver.Version) []NoFit {
	kubeVersion = semver.Version{Major: kubeVersion.Major, Minor: kubeVersion.Minor, Patch: kubeVersion.Patch}
	fitting := map[string]bool{}
	byName := map[string][]*Addon{}
	for _, a := range releases {
		byName[a.Name] = append(byName[a.Name], a)
		if fits(a, kubeVersion) {
			fitting[a.Name] = true
		}
	}
	var out []NoFit
	for name, rels := range byName {
		if !fitting[name] {
			out = append(out, NoFit{Name: name, KubeVersion: kubeVersion, Releases: rels})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
