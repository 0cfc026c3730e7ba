package images

import (
	"context"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseLDD(t *testing.T) {
	tests := []struct {
		name    string
		out     string
		want    []string
		wantErr string
	}{
		{
			name: "dynamic",
			out: "\tlinux-vdso.so.1 (0x00007ffd0a1f2000)\n" +
				"\tlibssl.so.3 => /lib/x86_64-linux-gnu/libssl.so.3 (0x00007f6df4d86000)\n" +
				"\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007fca3c4f0000)\n" +
				"\t/lib64/ld-linux-x86-64.so.2 (0x00007fca3c6ef000)\n",
			want: []string{"/lib/x86_64-linux-gnu/libssl.so.3", "/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"},
		},
		{name: "static", out: "\tstatically linked\n"},
		{name: "empty"},
		{
			name:    "missing library",
			out:     "\tlibgone.so.1 => not found\n",
			wantErr: "a library is missing: \tlibgone.so.1 => not found",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseLDD(tt.out)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parseLDD: got error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("parseLDD (-want +got):\n%s", diff)
			}
		})
	}
}

func TestHostBinaries(t *testing.T) {
	ctx := context.Background()
	truePath, err := exec.LookPath("true")
	if err != nil {
		t.Fatal(err)
	}
	files, err := HostBinaries(ctx, "true", truePath)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, f := range files {
		if f.Source != f.Path {
			t.Errorf("%s: comes from %s, want from the same path on the host", f.Path, f.Source)
		}
		paths = append(paths, f.Path)
	}
	// true is a dynamic C program: it needs at least the C library and
	// the dynamic loader named in its ELF header.
	abs, err := filepath.Abs(truePath)
	if err != nil {
		t.Fatal(err)
	}
	has := func(pred func(string) bool) bool { return slices.ContainsFunc(paths, pred) }
	if !has(func(p string) bool { return p == abs }) ||
		!has(func(p string) bool { return strings.HasPrefix(filepath.Base(p), "libc.so") }) ||
		!has(func(p string) bool { return strings.HasPrefix(filepath.Base(p), "ld-linux") }) {
		t.Errorf("HostBinaries(true): got %v, want true itself, libc and the dynamic loader", paths)
	}
	if !slices.IsSorted(paths) || len(slices.Compact(slices.Clone(paths))) != len(paths) {
		t.Errorf("HostBinaries(true): got %v, want sorted and without duplicates", paths)
	}
	// And the files make a layer.
	if _, err := Layer(files); err != nil {
		t.Errorf("Layer of HostBinaries(true): %v", err)
	}
}

func TestHostBinariesStatic(t *testing.T) {
	files, err := BuildGo(context.Background(), GoOptions{OutDir: t.TempDir()}, pausePackage)
	if err != nil {
		t.Fatal(err)
	}
	got, err := HostBinaries(context.Background(), files[0].Source)
	if err != nil {
		t.Fatal(err)
	}
	want := []File{{Path: files[0].Source, Source: files[0].Source}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("HostBinaries of a static program (-want +got):\n%s", diff)
	}
}

func TestHostBinariesMissing(t *testing.T) {
	if _, err := HostBinaries(context.Background(), "/nonexistent/kos-program"); err == nil {
		t.Error("HostBinaries of a missing program: got no error")
	}
}
