package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kos-sdn/kos/tools/reporoot"
)

// copyBundle copies the repository's addons and channel files into a new
// folder and returns it.
func copyBundle(t *testing.T) string {
	t.Helper()
	src, err := reporoot.Find()
	if err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	err = filepath.WalkDir(filepath.Join(src, "addons"), func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		return copyFile(path, filepath.Join(dst, rel))
	})
	if err != nil {
		t.Fatal(err)
	}
	// go.mod: the rendered manifests name its module versions.
	for _, f := range []string{"bootstrap-channel.yaml", "go.mod"} {
		if err := copyFile(filepath.Join(src, f), filepath.Join(dst, f)); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

func copyFile(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, data, 0o644)
}

func TestRun(t *testing.T) {
	tests := []struct {
		name string
		args []string
		// change breaks the copy of the bundle.
		change     func(t *testing.T, root string)
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		{name: "no command", args: nil, wantCode: 2, wantStderr: "Usage: addons"},
		{name: "unknown command", args: []string{"fix"}, wantCode: 2, wantStderr: "Usage: addons"},
		{name: "verify ok", args: []string{"--base=", "verify"}, wantCode: 0, wantStdout: "addons verify: ok"},
		{name: "generate with nothing to do", args: []string{"generate"}, wantCode: 0, wantStdout: "the addon bundle is up to date"},
		{
			name: "verify a rendered manifest edited by hand",
			args: []string{"--base=", "verify"},
			change: func(t *testing.T, root string) {
				path := filepath.Join(root, "addons", "kos-controller-manager", "0.4.0.yaml")
				data, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, bytes.Replace(data, []byte("--network-config=true"), []byte("--network-config=false"), 1), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			wantCode:   1,
			wantStderr: "addons/kos-controller-manager/0.4.0.yaml is not what addons/source/kos-controller-manager/base renders: run make addons",
		},
		{
			name: "generate renders a changed source",
			args: []string{"generate"},
			change: func(t *testing.T, root string) {
				path := filepath.Join(root, "addons", "source", "kos-controller-manager", "base", "kos-controller-manager.yaml")
				data, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, bytes.Replace(data, []byte("cpu: 100m"), []byte("cpu: 150m"), 1), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			wantCode:   0,
			wantStdout: "rendered addons/kos-controller-manager/0.4.0.yaml\naddons/kos-controller-manager/addon.yaml: added the manifestHash of 0.4.0.yaml\n",
		},
		{
			name: "verify an edited release",
			args: []string{"--base=", "verify"},
			change: func(t *testing.T, root string) {
				path := filepath.Join(root, "addons", "kos-agent", "0.1.0.yaml")
				data, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, append(data, "# edited\n"...), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			wantCode:   1,
			wantStderr: "addons/kos-agent/0.1.0.yaml changed after release kos-agent 0.1.0 (k8s-1.29) was made",
		},
		{
			name: "verify a stale channel",
			args: []string{"--base=", "verify"},
			change: func(t *testing.T, root string) {
				if err := os.WriteFile(filepath.Join(root, "bootstrap-channel.yaml"), []byte("kind: Addons\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			wantCode:   1,
			wantStderr: "bootstrap-channel.yaml is out of date with addons/*/addon.yaml: run make addons\naddons verify: 1 problem(s) in the addon bundle\n",
		},
		{name: "release help", args: []string{"release", "--help"}, wantCode: 0, wantStderr: "kos-etcd.storage: size of each etcd member's volume"},
		{name: "release without a registry", args: []string{"release", "--out", "/nonexistent"}, wantCode: 2, wantStderr: "give --registry and --out"},
		{name: "release with an unknown setting", args: []string{"release", "--registry", "r.example.net/kos", "--out", "/nonexistent", "--set", "kos-agent.replicas=3"}, wantCode: 2, wantStderr: "no setting kos-agent.replicas"},
		{
			name:       "release",
			args:       []string{"release", "--registry", "r.example.net/kos", "--resolve=false", "--out", "OUT", "--set", "kos-apiserver.replicas=3"},
			wantCode:   0,
			wantStdout: "wrote bootstrap-channel.yaml",
			wantStderr: "is named by tag only, r.example.net/kos/",
		},
		{
			name:       "verify against a revision of no repository",
			args:       []string{"--base=HEAD", "verify"},
			wantCode:   1,
			wantStderr: "pass --base=REV, or --base= to skip comparing releases with git",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := copyBundle(t)
			if tt.change != nil {
				tt.change(t, root)
			}
			args := []string{"--root=" + root}
			for _, a := range tt.args {
				if a == "OUT" { // a folder of the test's
					a = t.TempDir()
				}
				args = append(args, a)
			}
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), args, &stdout, &stderr)
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
