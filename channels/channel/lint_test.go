package channel

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/blang/semver/v4"
	"github.com/google/go-cmp/cmp"
)

// lintEntry is one entry of a channel a lint test parses.
type lintEntry struct {
	name, version, id, kubernetesVersion string
}

// lintChannel parses a channel of entries at location, each with its own
// manifest.
func lintChannel(t *testing.T, location string, entries ...lintEntry) []*Addon {
	t.Helper()
	var b strings.Builder
	b.WriteString("kind: Addons\nmetadata: {name: test}\nspec:\n  addons:\n")
	for _, e := range entries {
		fmt.Fprintf(&b, "  - name: %s\n    manifest: %s-%s-%s.yaml\n    manifestHash: \"%s\"\n    selector: {k8s-addon: %s}\n", e.name, e.name, e.version, e.id, strings.Repeat("0", 64), e.name)
		if e.version != "" {
			fmt.Fprintf(&b, "    version: %s\n", e.version)
		}
		if e.id != "" {
			fmt.Fprintf(&b, "    id: %s\n", e.id)
		}
		if e.kubernetesVersion != "" {
			fmt.Fprintf(&b, "    kubernetesVersion: %q\n", e.kubernetesVersion)
		}
	}
	addons, err := Parse(location, []byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	return addons
}

func TestLint(t *testing.T) {
	t.Parallel()
	type found struct{ Addon, Rule string }
	tests := []struct {
		name     string
		channels [][]lintEntry
		want     []found
		// message is a problem's whole message, when the case checks one.
		message string
	}{{
		name: "the time bomb: an open-ended old release outlives a capped new one",
		channels: [][]lintEntry{{
			{"dns", "0.1.0", "k8s-1.29", ">=1.29.0"},
			{"dns", "0.2.0", "k8s-1.29", ">=1.29.0 <1.38.0"},
		}},
		want: []found{{"dns", LintDowngrade}},
		message: "on Kubernetes 1.38.0 channels and kOps's channels choose 0.1.0 (k8s-1.29, >=1.29.0) of /c/0.yaml, " +
			"older than 0.2.0 (k8s-1.29, >=1.29.0 <1.38.0) of /c/0.yaml, which they choose on Kubernetes 1.37.99: " +
			"a cluster upgraded to 1.38.0 would go back to the older release (and a new one would get it); " +
			"end the older release's kubernetesVersion range where the newer one's ends",
	}, {
		name: "capped ranges",
		channels: [][]lintEntry{{
			{"dns", "0.1.0", "k8s-1.29", ">=1.29.0 <1.38.0"},
			{"dns", "0.2.0", "k8s-1.29", ">=1.29.0 <1.38.0"},
			{"dns", "0.3.0", "k8s-1.30", ">=1.30.0 <1.40.0"},
		}},
	}, {
		name: "one release per range of one version",
		channels: [][]lintEntry{{
			{"api", "0.1.0", "k8s-1.29", ">=1.29.0 <1.30.0"},
			{"api", "0.1.0", "k8s-1.30", ">=1.30.0 <1.38.0"},
			{"api", "0.2.0", "k8s-1.29", ">=1.29.0 <1.30.0"},
			{"api", "0.2.0", "k8s-1.30", ">=1.30.0 <1.38.0"},
		}},
	}, {
		name: "a newer release dropping an old Kubernetes is no downgrade",
		channels: [][]lintEntry{{
			{"dns", "0.1.0", "k8s-1.20", ">=1.20.0 <1.30.0"},
			{"dns", "0.2.0", "k8s-1.25", ">=1.25.0 <1.40.0"},
		}},
	}, {
		name: "a downgrade by range alone, kOps's pick the same",
		channels: [][]lintEntry{{
			{"dns", "0.2.0", "k8s-1.20", ">=1.20.0 <1.30.0"},
			{"dns", "0.1.0", "k8s-1.30", ">=1.30.0"},
		}},
		want: []found{{"dns", LintDowngrade}},
	}, {
		name: "a tie",
		channels: [][]lintEntry{{
			{"dns", "0.2.0", "a", ">=1.29.0 <1.31.0"},
			{"dns", "0.2.0", "b", ">=1.30.0 <1.38.0"},
		}},
		want: []found{{"dns", LintTie}},
	}, {
		name: "newest first: kOps's channels takes the last",
		channels: [][]lintEntry{{
			{"dns", "0.2.0", "k8s-1.29", ">=1.29.0"},
			{"dns", "0.1.0", "k8s-1.29", ">=1.29.0"},
		}},
		want: []found{{"dns", LintKOps}},
	}, {
		name: "variants split across channels",
		channels: [][]lintEntry{{
			{"agent", "0.2.0", "k8s-1.29-userspace", ">=1.29.0 <1.38.0"},
		}, {
			{"agent", "0.2.0", "k8s-1.29", ">=1.29.0 <1.38.0"},
			{"dns", "0.2.0", "k8s-1.29", ">=1.29.0 <1.38.0"},
		}},
		want: []found{{"agent", LintSplit}},
	}, {
		name: "addons of their own in two channels",
		channels: [][]lintEntry{{
			{"dns", "0.2.0", "k8s-1.29", ">=1.29.0 <1.38.0"},
		}, {
			{"monitoring", "0.2.0", "k8s-1.29", ">=1.29.0 <1.38.0"},
		}},
	}, {
		name:     "no version, no range",
		channels: [][]lintEntry{{{"manifest", "", "", ""}}},
	}, {
		name: "an unversioned entry after a versioned one",
		channels: [][]lintEntry{{
			{"dns", "1.0.0", "a", ">=1.29.0 <1.30.0"},
			{"dns", "", "b", ">=1.29.0"},
		}},
		want: []found{{"dns", LintKOps}, {"dns", LintDowngrade}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var releases []*Addon
			for i, entries := range tt.channels {
				releases = append(releases, lintChannel(t, fmt.Sprintf("/c/%d.yaml", i), entries...)...)
			}
			problems := Lint(releases)
			var got []found
			for _, p := range problems {
				got = append(got, found{p.Addon, p.Rule})
			}
			if diff := cmp.Diff(got, tt.want); diff != "" {
				t.Errorf("Lint (-got +want):\n%s\nproblems: %q", diff, problems)
			}
			if tt.message != "" && len(problems) > 0 {
				if diff := cmp.Diff(problems[0].Message, tt.message); diff != "" {
					t.Errorf("message (-got +want):\n%s", diff)
				}
			}
		})
	}
}

// TestLintBundle lints the repository's channels as they are applied: each
// alone, and the optional monitoring channel with the bootstrap channel.
// The local channel given before the bootstrap channel splits kos-etcd and
// kos-agent, which is why `make release FLAVOR=local` writes one channel.
func TestLintBundle(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	load := func(paths ...string) []*Addon {
		var out []*Addon
		for _, p := range paths {
			addons, err := Load(context.Background(), NewFetcher(), filepath.Join(root, p))
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, addons...)
		}
		return out
	}
	for _, set := range [][]string{
		{"bootstrap-channel.yaml"},
		{"addons/local-channel.yaml"},
		{"addons/monitoring-channel.yaml"},
		{"bootstrap-channel.yaml", "addons/monitoring-channel.yaml"},
	} {
		t.Run(strings.Join(set, " "), func(t *testing.T) {
			t.Parallel()
			if problems := Lint(load(set...)); len(problems) > 0 {
				t.Errorf("Lint found problems:\n%s", lintLines(problems))
			}
		})
	}
	t.Run("local and bootstrap together", func(t *testing.T) {
		t.Parallel()
		got := map[string]bool{}
		for _, p := range Lint(load("addons/local-channel.yaml", "bootstrap-channel.yaml")) {
			if p.Rule != LintSplit {
				t.Errorf("unexpected problem: %s", p)
				continue
			}
			got[p.Addon] = true
		}
		if diff := cmp.Diff(got, map[string]bool{"kos-agent": true, "kos-etcd": true}); diff != "" {
			t.Errorf("addons split (-got +want):\n%s", diff)
		}
	})
}

func lintLines(problems []LintProblem) string {
	var b strings.Builder
	for _, p := range problems {
		b.WriteString(p.String() + "\n")
	}
	return b.String()
}

func TestLintUpgradePath(t *testing.T) {
	t.Parallel()
	entry := func(version, kubernetesVersion, upgradesFrom string) string {
		e := fmt.Sprintf("  - {name: dns, version: %s, manifest: dns-%s.yaml, manifestHash: \"%s\", kubernetesVersion: %q, selector: {k8s-addon: dns}", version, version, strings.Repeat("0", 64), kubernetesVersion)
		if upgradesFrom != "" {
			e += ", upgradesFrom: " + upgradesFrom
		}
		return e + "}\n"
	}
	tests := []struct {
		name    string
		entries []string
		want    []string
	}{{
		name: "the release to go through fits wherever the jump does",
		entries: []string{
			entry("0.1.0", ">=1.29.0 <1.40.0", ""),
			entry("0.2.0", ">=1.29.0 <1.40.0", ""),
			entry("0.3.0", ">=1.29.0 <1.40.0", "0.2.0"),
		},
	}, {
		name: "nothing older listed: nothing to go through",
		entries: []string{
			entry("0.3.0", ">=1.29.0 <1.40.0", "0.2.0"),
		},
	}, {
		name: "the release in between is missing",
		entries: []string{
			entry("0.1.0", ">=1.29.0 <1.40.0", ""),
			entry("0.3.0", ">=1.29.0 <1.40.0", "0.2.0"),
		},
		want: []string{"dns: upgrade-path: 0.3.0 (>=1.29.0 <1.40.0) of /c/0.yaml upgrades from 0.2.0 or later (upgradesFrom), and the channels list older releases, but on Kubernetes 1.29.0 no release from 0.2.0 below 0.3.0 fits: a cluster with an older one installed cannot upgrade; list a release in between for that Kubernetes version"},
	}, {
		name: "the release in between ends before the jump does",
		entries: []string{
			entry("0.1.0", ">=1.29.0 <1.38.0", ""),
			entry("0.2.0", ">=1.29.0 <1.38.0", ""),
			entry("0.3.0", ">=1.29.0 <1.40.0", "0.2.0"),
		},
		want: []string{"dns: upgrade-path: 0.3.0 (>=1.29.0 <1.40.0) of /c/0.yaml upgrades from 0.2.0 or later (upgradesFrom), and the channels list older releases, but on Kubernetes 1.38.0 no release from 0.2.0 below 0.3.0 fits: a cluster with an older one installed cannot upgrade; list a release in between for that Kubernetes version"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			releases, err := Parse("/c/0.yaml", []byte("kind: Addons\nmetadata: {name: test}\nspec:\n  addons:\n"+strings.Join(tt.entries, "")))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, p := range Lint(releases) {
				got = append(got, p.String())
			}
			if diff := cmp.Diff(got, tt.want); diff != "" {
				t.Errorf("Lint (-got +want):\n%s", diff)
			}
		})
	}
}

func TestLoadUpgradesFrom(t *testing.T) {
	t.Parallel()
	channel := func(entry string) []byte {
		return []byte("kind: Addons\nmetadata: {name: test}\nspec:\n  addons:\n  - {name: dns, manifest: dns.yaml, selector: {k8s-addon: dns}, " + entry + "}\n")
	}
	tests := []struct {
		entry   string
		want    string
		wantErr string
	}{
		{entry: "version: 0.3.0, upgradesFrom: 0.2.0", want: "0.2.0"},
		{entry: "version: 0.3.0, upgradesFrom: \"0.2\"", want: "0.2.0"},
		{entry: "version: 0.3.0", want: ""},
		{entry: "version: 0.3.0, upgradesFrom: \">=0.2.0\"", wantErr: `upgradesFrom ">=0.2.0" is not a semantic version such as 0.2.0`},
		{entry: "upgradesFrom: 0.2.0", wantErr: `upgradesFrom "0.2.0" needs the release to have a version`},
		{entry: "version: 0.3.0, upgradesFrom: 0.3.0", wantErr: "upgradesFrom 0.3.0 is not below the release's version 0.3.0"},
	}
	for _, tt := range tests {
		t.Run(tt.entry, func(t *testing.T) {
			t.Parallel()
			got, err := Parse("/c/0.yaml", channel(tt.entry))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Parse: %v, want an error with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			from := ""
			if got[0].UpgradesFrom != nil {
				from = got[0].UpgradesFrom.String()
			}
			if from != tt.want {
				t.Errorf("UpgradesFrom = %q, want %q", from, tt.want)
			}
		})
	}
}

func TestLintRangeEnds(t *testing.T) {
	t.Parallel()
	releases := lintChannel(t, "/c/0.yaml",
		lintEntry{"capped-next", "0.1.0", "k8s-1.29", ">=1.29.0 <1.38.0"},
		lintEntry{"capped-now", "0.1.0", "k8s-1.29", ">=1.29.0 <1.37.0"},
		lintEntry{"open", "0.1.0", "", ">=1.29.0"},
		lintEntry{"later", "0.1.0", "k8s-1.29", ">=1.29.0 <1.37.0"},
		lintEntry{"later", "0.2.0", "k8s-1.37", ">=1.37.0 <1.40.0"},
	)
	problems, warnings := LintRangeEnds(releases, semver.MustParse("1.37.4"))
	var got []string
	for _, p := range problems {
		got = append(got, "problem "+p.String())
	}
	for _, w := range warnings {
		got = append(got, "warning "+w.String())
	}
	want := []string{
		"problem capped-now: end: no release fits Kubernetes 1.37, the newest minor: the channels offer 0.1.0 (k8s-1.29) for >=1.29.0 <1.37.0; a cluster on it gets no release of the addon; claim it in a release tested there",
		"warning capped-next: end: no release fits Kubernetes 1.38, the next minor: a cluster upgraded to it will get no release of the addon (channels then fails, naming it) until a release tested there claims it",
	}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("LintRangeEnds (-got +want):\n%s", diff)
	}
}
