package channels

import (
	"fmt"
	"sort"

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
