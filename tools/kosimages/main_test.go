package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kos-sdn/kos/tools/kosimages/catalog"
)

func TestCommandLine(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStderr string
	}{
		{name: "help", args: []string{"--help"}, wantCode: 0, wantStderr: "Usage: kosimages [flags]"},
		{name: "unknown image", args: []string{"--version", "kube-apiserver=1.0.0"}, wantCode: 2, wantStderr: `no image "kube-apiserver"`},
		{name: "no version", args: []string{"--version", "kos-agent"}, wantCode: 2, wantStderr: `want IMAGE=VERSION, got "kos-agent"`},
		{name: "arguments", args: []string{"build"}, wantCode: 2, wantStderr: `unexpected arguments ["build"]`},
		{
			name:       "no addons to version by",
			args:       []string{"--addons", "testdata/none", "--version", "kos-agent=0.1.0", "--etcd", "/nonexistent/etcd", "--out", "/nonexistent/kos.tar"},
			wantCode:   1,
			wantStderr: "kosimages: versioning the images (or give each with --version): no addons in testdata/none",
		},
		{
			name:       "no local cluster",
			args:       []string{"--root", "testdata/none", "--import", "localenv", "--version", "kos-agent=1", "--version", "kos-apiserver=1", "--version", "kos-controller-manager=1"},
			wantCode:   1,
			wantStderr: "kosimages: finding the local cluster (start it with go run ./tools/localenv up --cluster)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(t.Context(), tt.args, &stdout, &stderr)
			if code != tt.wantCode {
				t.Errorf("exit code %d, want %d (stderr: %s)", code, tt.wantCode, stderr.String())
			}
			if !strings.Contains(stderr.String(), tt.wantStderr) {
				t.Errorf("stderr %q does not say %q", stderr.String(), tt.wantStderr)
			}
		})
	}
}

func TestResolveVersions(t *testing.T) {
	all := map[string]string{catalog.APIServer: "1.0.0", catalog.ControllerManager: "2.0.0", catalog.Agent: "3.0.0"}
	// Every image given: the addons are not read.
	got, err := resolveVersions("testdata/none", all)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(all, got); diff != "" {
		t.Errorf("versions (-want +got):\n%s", diff)
	}
	// Overrides win over the addons.
	got, err = resolveVersions("catalog/testdata/addons", map[string]string{catalog.Agent: "9.9.9"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{catalog.APIServer: "0.10.0", catalog.ControllerManager: "1.2.0", catalog.Agent: "9.9.9"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("versions (-want +got):\n%s", diff)
	}
}
