package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLiveReleases checks that the live upgrade goes from the release
// before the newest to the newest, whichever addon has them, so that it
// follows the bundle as releases are added.
func TestLiveReleases(t *testing.T) {
	for _, tc := range []struct {
		name             string
		addons           map[string][]string // addon folder → versions
		wantOld, wantNew string
		wantErrContains  string
	}{
		{"two releases", map[string][]string{"a": {"0.2.0", "0.3.0"}}, "0.2.0", "0.3.0", ""},
		{"across addons, unsorted", map[string][]string{"a": {"0.3.0", "0.1.0"}, "b": {"0.4.0", "0.3.0"}}, "0.3.0", "0.4.0", ""},
		{"a newer addon alone", map[string][]string{"a": {"0.2.0", "0.3.0"}, "b": {"0.4.0"}}, "0.3.0", "0.4.0", ""},
		{"one release", map[string][]string{"a": {"0.1.0"}}, "", "", "an upgrade needs two"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for addon, versions := range tc.addons {
				var index strings.Builder
				index.WriteString("kind: Addons\nmetadata:\n  name: " + addon + "\nspec:\n  addons:\n")
				for _, v := range versions {
					index.WriteString("  - name: " + addon + "\n    version: " + v + "\n    manifest: " + v + ".yaml\n")
				}
				dir := filepath.Join(root, "addons", addon)
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, "addon.yaml"), []byte(index.String()), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			old, latest, err := liveReleases(root)
			if tc.wantErrContains != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErrContains) {
					t.Fatalf("liveReleases: got %v, want an error containing %q", err, tc.wantErrContains)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if old.String() != tc.wantOld || latest.String() != tc.wantNew {
				t.Errorf("liveReleases: got %s → %s, want %s → %s", old, latest, tc.wantOld, tc.wantNew)
			}
		})
	}
}
