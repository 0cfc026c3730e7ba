package channel

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/blang/semver/v4"
	"github.com/google/go-cmp/cmp"
)

// picks names each selected release by name, version and id.
func picks(addons []*Addon) []string {
	var out []string
	for _, a := range addons {
		out = append(out, a.Name+"@"+a.VersionString()+"/"+a.ID)
	}
	return out
}

func loadTestdata(t *testing.T, names ...string) []*Addon {
	t.Helper()
	var all []*Addon
	for _, name := range names {
		addons, err := Load(context.Background(), NewFetcher(), filepath.Join("testdata", name))
		if err != nil {
			t.Fatalf("Load: %v", err)
		}
		all = append(all, addons...)
	}
	return all
}

func TestSelect(t *testing.T) {
	t.Parallel()
	one := loadTestdata(t, "ranges.yaml")
	two := loadTestdata(t, "ranges.yaml", "ranges-next.yaml")
	tests := []struct {
		name     string
		releases []*Addon
		server   string // a discovery gitVersion
		want     []string
	}{
		{"below every range", one, "v1.28.3", []string{"dashboard@1.5.0/pre-k8s-1.29", "metrics@0.7.0/a", "unversioned@/"}},
		{"lower bound included", one, "v1.29.0", []string{"dashboard@1.6.0/k8s-1.29", "metrics@0.7.0/a", "unversioned@/"}},
		{"in the gap of an || range", one, "v1.30.2", []string{"dashboard@1.6.0/k8s-1.29", "metrics@0.6.0/b", "unversioned@/"}},
		{"pre-release matches its release", one, "v1.31.0-beta.1", []string{"dashboard@1.6.0/k8s-1.31", "metrics@0.6.0/b", "unversioned@/"}},
		{"pre-release with build metadata", one, "v1.31.0-beta.1+0123abc", []string{"dashboard@1.6.0/k8s-1.31", "metrics@0.6.0/b", "unversioned@/"}},
		{"vendor suffix", one, "v1.32.1-eks-2024", []string{"dashboard@1.6.0/k8s-1.31", "metrics@0.7.0/a", "unversioned@/"}},
		{"second channel newer where it fits", two, "v1.30.0", []string{"dashboard@1.7.0/next", "metrics@0.7.0/next", "unversioned@/"}},
		// Equal versions: the release listed first, in the first channel, wins.
		{"equal versions keep channel order", two, "v1.28.0", []string{"dashboard@1.5.0/pre-k8s-1.29", "metrics@0.7.0/a", "unversioned@/"}},
		{"no releases", nil, "v1.30.0", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v, err := ServerVersion(tt.server)
			if err != nil {
				t.Fatalf("ServerVersion(%q): %v", tt.server, err)
			}
			got := picks(Select(tt.releases, v))
			if diff := cmp.Diff(got, tt.want); diff != "" {
				t.Errorf("Select at %s (-got +want):\n%s", tt.server, diff)
			}
		})
	}
}

func TestSelectStripsPreRelease(t *testing.T) {
	t.Parallel()
	// Select strips what a caller forgot to: 1.31.0-beta.1 sorts below
	// 1.31.0 in semver and would miss ">=1.31.0".
	got := picks(Select(loadTestdata(t, "ranges.yaml"), semver.MustParse("1.31.0-beta.1")))
	want := []string{"dashboard@1.6.0/k8s-1.31", "metrics@0.6.0/b", "unversioned@/"}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("Select (-got +want):\n%s", diff)
	}
}

func TestSelectUnparseableRange(t *testing.T) {
	t.Parallel()
	// Releases built by hand skip Load's checks; a bad range never matches.
	releases := []*Addon{{Name: "x", KubernetesVersion: ">=banana"}}
	if got := Select(releases, semver.MustParse("1.30.0")); len(got) != 0 {
		t.Errorf("got %v, want nothing", picks(got))
	}
}

func TestServerVersion(t *testing.T) {
	t.Parallel()
	tests := []struct {
		gitVersion string
		want       string
		wantErr    bool
	}{
		{"v1.37.2", "1.37.2", false},
		{"v1.31.0-beta.1+abc", "1.31.0", false},
		{"v1.30.2-eks-1234567", "1.30.2", false},
		{"1.29", "1.29.0", false},
		{"v0.0.0-master+$Format:%H$", "", true},
		{"", "", true},
		{"vbanana", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.gitVersion, func(t *testing.T) {
			t.Parallel()
			got, err := ServerVersion(tt.gitVersion)
			if tt.wantErr {
				if err == nil {
					t.Errorf("got %s, want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("got %v, want %s", err, tt.want)
			}
			if got.String() != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
}

func TestUnfit(t *testing.T) {
	t.Parallel()
	v := func(s string) *semver.Version {
		sv := semver.MustParse(s)
		return &sv
	}
	rel := func(name, version, id, kubernetesVersion string) *Addon {
		return &Addon{Name: name, Version: v(version), ID: id, KubernetesVersion: kubernetesVersion}
	}
	releases := []*Addon{
		rel("etcd", "0.1.0", "k8s-1.29", ">=1.29.0 <1.38.0"),
		rel("etcd", "0.3.0", "k8s-1.29", ">=1.29.0 <1.38.0"),
		rel("apiserver", "0.1.0", "k8s-1.29", ">=1.29.0 <1.30.0"),
		rel("apiserver", "0.3.0", "k8s-1.30", ">=1.30.0 <1.38.0"),
		rel("apiserver", "0.2.0", "k8s-1.29", ">=1.29.0 <1.30.0"),
		rel("open", "1.0.0", "", ""),
	}
	tests := []struct {
		name    string
		version string
		want    []string
	}{
		{"every addon fits", "1.37.5", nil},
		{"past every range: the cliff", "1.38.0", []string{
			`apiserver: no release fits Kubernetes 1.38.0: the channels offer 0.3.0 (k8s-1.30) for >=1.30.0 <1.38.0, 0.2.0 (k8s-1.29) for >=1.29.0 <1.30.0; the addon is left as it is until a channel offers a release for Kubernetes 1.38`,
			`etcd: no release fits Kubernetes 1.38.0: the channels offer 0.3.0 (k8s-1.29) for >=1.29.0 <1.38.0; the addon is left as it is until a channel offers a release for Kubernetes 1.38`,
		}},
		{"pre-release of the next minor", "1.38.0-beta.0", []string{
			`apiserver: no release fits Kubernetes 1.38.0: the channels offer 0.3.0 (k8s-1.30) for >=1.30.0 <1.38.0, 0.2.0 (k8s-1.29) for >=1.29.0 <1.30.0; the addon is left as it is until a channel offers a release for Kubernetes 1.38`,
			`etcd: no release fits Kubernetes 1.38.0: the channels offer 0.3.0 (k8s-1.29) for >=1.29.0 <1.38.0; the addon is left as it is until a channel offers a release for Kubernetes 1.38`,
		}},
		{"below every range of one addon", "1.28.0", []string{
			`apiserver: no release fits Kubernetes 1.28.0: the channels offer 0.3.0 (k8s-1.30) for >=1.30.0 <1.38.0, 0.2.0 (k8s-1.29) for >=1.29.0 <1.30.0; the addon is left as it is until a channel offers a release for Kubernetes 1.28`,
			`etcd: no release fits Kubernetes 1.28.0: the channels offer 0.3.0 (k8s-1.29) for >=1.29.0 <1.38.0; the addon is left as it is until a channel offers a release for Kubernetes 1.28`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var got []string
			for _, n := range Unfit(releases, semver.MustParse(tt.version)) {
				got = append(got, n.Name+": "+n.Error())
			}
			if diff := cmp.Diff(got, tt.want); diff != "" {
				t.Errorf("Unfit at %s (-got +want):\n%s", tt.version, diff)
			}
		})
	}
}
