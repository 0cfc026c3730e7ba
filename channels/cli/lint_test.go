package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLint runs channels lint on a clean channel, a time-bombed one, and a
// location that does not load: exit 0, 1 and 2.
func TestLint(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string) string {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	entry := func(version, kubernetesVersion string) string {
		return "  - {name: dns, version: " + version + ", id: k8s-1.29, manifest: dns.yaml, manifestHash: \"" + strings.Repeat("0", 64) + "\", kubernetesVersion: \"" + kubernetesVersion + "\", selector: {k8s-addon: dns}}\n"
	}
	head := "kind: Addons\nmetadata: {name: dns}\nspec:\n  addons:\n"
	clean := write("clean.yaml", head+entry("0.1.0", ">=1.29.0 <1.38.0")+entry("0.2.0", ">=1.29.0 <1.38.0"))
	clean2 := write("clean2.yaml", head+entry("0.2.0", ">=1.29.0 <1.38.0"))
	bomb := write("bomb.yaml", head+entry("0.1.0", ">=1.29.0")+entry("0.2.0", ">=1.29.0 <1.38.0"))
	tests := []struct {
		name                   string
		args                   []string
		wantCode               int
		wantStdout, wantStderr string
	}{
		{"clean", []string{clean}, 0, clean + ": ok\n", ""},
		{"time bomb", []string{bomb}, 1, "dns: downgrade: on Kubernetes 1.38.0 channels and kOps's channels choose 0.1.0 (k8s-1.29, >=1.29.0) of " + bomb, "error: 1 problem(s) in " + bomb + "\n"},
		{"split", []string{clean, clean2}, 1, "dns: split: 0.1.0 (k8s-1.29, >=1.29.0 <1.38.0) of " + clean + " and 0.2.0 (k8s-1.29, >=1.29.0 <1.38.0) of " + clean2 + " both fit Kubernetes 1.29.0 but are in different channels", "error: 1 problem(s) in "},
		{"ranges end at the next minor: a warning", []string{clean, "--kubernetes-version=1.37"}, 0, clean + ": ok\n", "warning: dns: end: no release fits Kubernetes 1.38, the next minor: a cluster upgraded to it will get no release of the addon"},
		{"ranges end at the newest minor: a problem", []string{clean, "--kubernetes-version=1.38.2"}, 1, "dns: end: no release fits Kubernetes 1.38, the newest minor: the channels offer 0.2.0 (k8s-1.29) for >=1.29.0 <1.38.0;", "error: 1 problem(s) in "},
		{"range ends not checked", []string{clean, "--kubernetes-version="}, 0, clean + ": ok\n", ""},
		{"bad kubernetes version", []string{clean, "--kubernetes-version=banana"}, 2, "", `--kubernetes-version "banana" is not a version`},
		{"does not load", []string{filepath.Join(dir, "missing.yaml")}, 2, "", "error: reading channel: "},
		{"no channel", nil, 2, "", "give at least one channel location"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := Main(context.Background(), append([]string{"lint"}, tt.args...), &stdout, &stderr)
			if code != tt.wantCode {
				t.Errorf("exit code %d, want %d; stdout:\n%s\nstderr:\n%s", code, tt.wantCode, stdout.String(), stderr.String())
			}
			if !strings.Contains(stdout.String(), tt.wantStdout) {
				t.Errorf("stdout is\n%s\nwant it to contain\n%s", stdout.String(), tt.wantStdout)
			}
			if !strings.Contains(stderr.String(), tt.wantStderr) {
				t.Errorf("stderr is\n%s\nwant it to contain\n%s", stderr.String(), tt.wantStderr)
			}
		})
	}
}
