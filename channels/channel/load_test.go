package channel

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kos-sdn/kos/channels/api"
	"github.com/kos-sdn/kos/tools/golden"
)

func TestLoadKOpsChannel(t *testing.T) {
	t.Parallel()
	location := filepath.Join("testdata", "kops-bootstrap-channel.yaml")
	addons, err := Load(context.Background(), NewFetcher(), location)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	golden.CheckJSON(t, "kops-bootstrap-channel.golden.json", addons)

	// The parts a reader of the golden file could miss.
	if got, want := len(addons), 8; got != want {
		t.Fatalf("got %d releases, want %d", got, want)
	}
	coredns := addons[1]
	if got, want := coredns.Manifest, filepath.Join("testdata", "coredns.addons.k8s.io", "k8s-1.12.yaml"); got != want {
		t.Errorf("coredns manifest: got %s, want %s", got, want)
	}
	if got, want := coredns.Namespace, "kube-system"; got != want {
		t.Errorf("coredns namespace: got %s, want %s", got, want)
	}
	if coredns.Prune == nil || len(coredns.Prune.Kinds) != 5 || coredns.Prune.Kinds[3].Group != "apps" {
		t.Errorf("coredns prune kinds: got %+v, want 5 kinds, the fourth in group apps", coredns.Prune)
	}
	if got, want := addons[0].NeedsRollingUpdate, api.NeedsRollingUpdateControlPlane; got != want {
		t.Errorf("kops-controller needsRollingUpdate: got %q, want %q", got, want)
	}
	if !addons[7].NeedsPKI {
		t.Errorf("aws-load-balancer-controller: NeedsPKI lost")
	}
}

func TestLoadVersionsAndDefaults(t *testing.T) {
	t.Parallel()
	addons, err := Load(context.Background(), NewFetcher(), filepath.Join("testdata", "ranges.yaml"))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	type summary struct {
		Name, Version, ID, KubernetesVersion, Manifest string
	}
	var got []summary
	for _, a := range addons {
		got = append(got, summary{a.Name, a.VersionString(), a.ID, a.KubernetesVersion, a.Manifest})
	}
	want := []summary{
		{"dashboard", "1.5.0", "pre-k8s-1.29", "<1.29.0", "testdata/dashboard/pre-k8s-1.29.yaml"},
		// "1.6" is read tolerantly.
		{"dashboard", "1.6.0", "k8s-1.29", ">=1.29.0 <1.31.0", "testdata/dashboard/k8s-1.29.yaml"},
		{"dashboard", "1.6.0", "k8s-1.31", ">=1.31.0", "testdata/dashboard/k8s-1.31.yaml"},
		{"metrics", "0.7.0", "a", "<1.30.0 || >=1.32.0", "testdata/metrics/a.yaml"},
		{"metrics", "0.6.0", "b", "", "testdata/metrics/b.yaml"},
		{"unversioned", "", "", "", "testdata/unversioned.yaml"},
	}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("releases (-got +want):\n%s", diff)
	}
}

func TestLoadEmptySelector(t *testing.T) {
	t.Parallel()
	// Loading allows an addon without selector; pruning refuses it later.
	addons, err := Load(context.Background(), NewFetcher(), filepath.Join("testdata", "no-selector.yaml"))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if got, want := len(addons), 1; got != want {
		t.Fatalf("got %d releases, want %d", got, want)
	}
	if got := addons[0].Selector; len(got) != 0 {
		t.Errorf("selector: got %v, want none", got)
	}
	if got, want := addons[0].Name, "bare"; got != want {
		t.Errorf("name: got %q, want %q (metadata.name)", got, want)
	}
}

func TestLoadErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		file string
		// want are the parts the message must hold, besides the file.
		want []string
	}{
		{"unknown-field.yaml", []string{`unknown field "spec.addons[0].manifestHsh"`}},
		{"version.yaml", []string{`addon "foo"`, `version "one.two"`}},
		{"duplicate.yaml", []string{`"manifest" already set`}},
		{"several.yaml", []string{
			"spec.addons[0]: no name",
			`addon "nomanifest" (spec.addons[1]): no manifest`,
			`addon "badhash" (spec.addons[2]): manifestHash "xyz"`,
			`addon "badroll" (spec.addons[3]): needsRollingUpdate "everything"`,
		}},
		{"two-documents.yaml", []string{"2 YAML documents"}},
		{"empty.yaml", []string{"empty"}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			location := filepath.Join("testdata", "bad", tt.file)
			_, err := Load(context.Background(), NewFetcher(), location)
			if err == nil {
				t.Fatalf("Load(%s): got no error, want one", location)
			}
			msg := err.Error()
			for _, want := range append([]string{location}, tt.want...) {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q does not hold %q", msg, want)
				}
			}
			if strings.Contains(msg, "\n") {
				t.Errorf("error spans several lines: %q", msg)
			}
		})
	}
}

// TestLoadTolerance checks what kOps tolerates: an entry whose
// kubernetesVersion does not parse is skipped with a warning, and the
// legacy needsRollingUpdate "worker" means workers.
func TestLoadTolerance(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	loc := filepath.Join(dir, "channel.yaml")
	data := `kind: Addons
metadata: {name: channel}
spec:
  addons:
  - {name: bar, version: 1.0.0, kubernetesVersion: ">=1.29.0 <banana", manifest: bar-1.yaml}
  - {name: bar, version: 0.9.0, kubernetesVersion: ">=1.29.0", manifest: bar-0.yaml, needsRollingUpdate: worker}
`
	if err := os.WriteFile(loc, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	var warnings []string
	f := NewFetcher()
	f.Warn = func(msg string) { warnings = append(warnings, msg) }
	addons, err := Load(context.Background(), f, loc)
	if err != nil {
		t.Fatal(err)
	}
	if len(addons) != 1 || addons[0].VersionString() != "0.9.0" {
		t.Fatalf("Load returned %v, want only bar 0.9.0", addons)
	}
	if got := addons[0].NeedsRollingUpdate; got != api.NeedsRollingUpdateWorkers {
		t.Errorf("needsRollingUpdate worker read as %q, want %q", got, api.NeedsRollingUpdateWorkers)
	}
	want := []string{`addon "bar" (spec.addons[0]): skipping the entry: kubernetesVersion ">=1.29.0 <banana" is not a semver range such as ">=1.29.0 <1.31.0": Could not get version from string: "<banana"`}
	if diff := cmp.Diff(warnings, want); diff != "" {
		t.Errorf("warnings (-got +want):\n%s", diff)
	}
}

func TestLoadPlainManifest(t *testing.T) {
	t.Parallel()
	location := filepath.Join("testdata", "plain-manifest.yaml")
	content, err := os.ReadFile(location)
	if err != nil {
		t.Fatal(err)
	}
	addons, err := Load(context.Background(), NewFetcher(), location)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	locationSum := sha256.Sum256([]byte(location))
	contentSum := sha256.Sum256(content)
	want := []*Addon{{
		Name:         "manifest-" + hex.EncodeToString(locationSum[:])[:12],
		Namespace:    "kube-system",
		Manifest:     location,
		ManifestHash: hex.EncodeToString(contentSum[:]),
		Channel:      location,
		Inline:       content,
	}}
	if diff := cmp.Diff(addons, want); diff != "" {
		t.Errorf("releases (-got +want):\n%s", diff)
	}
}

func TestVerifyManifest(t *testing.T) {
	t.Parallel()
	data := []byte("kind: ConfigMap\n")
	sum := sha256.Sum256(data)
	good := hex.EncodeToString(sum[:])
	bad := strings.Repeat("0", 64)
	tests := []struct {
		name    string
		hash    string
		wantErr []string
	}{
		{"matching hash", good, nil},
		{"matching hash in upper case", strings.ToUpper(good), nil},
		{"no hash", "", nil},
		{"other hash", bad, []string{good, bad, `"x"`}},
		// Old kOps channels carry SHA-1 hashes.
		{"matching SHA-1", "79bd24e0d3c79604e6c812302b73b6726eccba98", nil},
		{"other SHA-1", strings.Repeat("0", 40), []string{"SHA-1", "79bd24e0d3c79604e6c812302b73b6726eccba98"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := VerifyManifest(&Addon{Name: "x", Manifest: "m.yaml", ManifestHash: tt.hash}, data)
			if tt.wantErr == nil {
				if err != nil {
					t.Errorf("got %v, want no error", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("got no error, want one holding %q", tt.wantErr)
			}
			for _, want := range tt.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not hold %q", err, want)
				}
			}
		})
	}
}
