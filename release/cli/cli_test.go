package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("apiVersion: kos.example.com/v1alpha1\nkind: ReleaseConfig\netcd:\n  storage:\n    size: 100Mi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dup := filepath.Join(dir, "dup.yaml")
	if err := os.WriteFile(dup, []byte("apiVersion: kos.example.com/v1alpha1\nkind: ReleaseConfig\nregistry: a.example.org\nregistry: b.example.org\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		{"no out", []string{"render"}, 2, "", "error: give --out (see 'kos-release render --help')"},
		{"unknown flag", []string{"render", "--outt", dir}, 2, "", "unknown flag: --outt"},
		{"bad configuration", []string{"render", "--config", bad, "--out", filepath.Join(dir, "tree")}, 1, "", `etcd.storage.size: Invalid value: "100Mi"`},
		{"duplicate key, on one line", []string{"render", "--config", dup, "--out", dir}, 1, "", `error: ` + dup + `: reading the release configuration: yaml: unmarshal errors:; line 4: key "registry" already set in map` + "\n"},
		{"missing configuration", []string{"render", "--config", filepath.Join(dir, "none.yaml"), "--out", dir}, 1, "", "none.yaml: no such file"},
		{"render", []string{"render", "--out", filepath.Join(dir, "tree")}, 0, "wrote " + filepath.Join(dir, "tree", "bootstrap-channel.yaml"), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := Main(context.Background(), tt.args, &stdout, &stderr)
			if code != tt.wantCode {
				t.Errorf("exit code %d, want %d; stderr: %s", code, tt.wantCode, stderr.String())
			}
			if !strings.Contains(stdout.String(), tt.wantStdout) {
				t.Errorf("stdout %q, want it to contain %q", stdout.String(), tt.wantStdout)
			}
			if !strings.Contains(stderr.String(), tt.wantStderr) {
				t.Errorf("stderr %q, want it to contain %q", stderr.String(), tt.wantStderr)
			}
		})
	}
}
