package images

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestPause(t *testing.T) {
	img, err := Pause(context.Background(), GoOptions{OutDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"/pause"}, cf.Config.Entrypoint); diff != "" {
		t.Errorf("entrypoint (-want +got):\n%s", diff)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("got %d layers, want 1", len(layers))
	}
	entries := readLayer(t, layers[0])
	if len(entries) != 1 || entries[0].Name != "pause" || entries[0].Mode != 0o755 || entries[0].Type != tar.TypeReg {
		t.Fatalf("layer: got %v, want only /pause, executable", names(entries))
	}
	assertStatic(t, "/pause", []byte(entries[0].Content))
}

func TestGoImage(t *testing.T) {
	opts := GoOptions{OutDir: t.TempDir(), LDFlags: "-X main.unused=1"}
	img, err := GoImage(context.Background(), opts, Config{Cmd: []string{"--help"}}, "./tools/images/pause/")
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	want := Config{Entrypoint: []string{BinDir + "/pause"}, Cmd: []string{"--help"}}
	got := Config{Entrypoint: cf.Config.Entrypoint, Cmd: cf.Config.Cmd}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	entries := readLayer(t, layers[0])
	if diff := cmp.Diff([]string{"usr/", "usr/local/", "usr/local/bin/", "usr/local/bin/pause"}, names(entries)); diff != "" {
		t.Errorf("layer entries (-want +got):\n%s", diff)
	}
	assertStatic(t, "pause", []byte(entries[len(entries)-1].Content))
}

func TestBuildGoErrors(t *testing.T) {
	ctx := context.Background()
	if _, err := BuildGo(ctx, GoOptions{}, pausePackage); err == nil {
		t.Error("BuildGo without an output folder: got no error")
	}
	_, err := BuildGo(ctx, GoOptions{OutDir: t.TempDir()}, "github.com/kos-sdn/kos/tools/images/nonexistent")
	if err == nil || !strings.Contains(err.Error(), "go build") {
		t.Errorf("BuildGo of a missing package: got error %v, want one from go build", err)
	}
}

func names(entries []header) []string {
	var out []string
	for _, e := range entries {
		out = append(out, e.Name)
	}
	return out
}

// assertStatic fails unless data is a linux ELF executable with no
// interpreter (dynamic loader), as CGO_ENABLED=0 builds are.
func assertStatic(t *testing.T, name string, data []byte) {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("%s: not an ELF file: %v", name, err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s: has a dynamic loader, want a static binary", name)
		}
	}
	if f.Type != elf.ET_EXEC {
		t.Errorf("%s: ELF type %v, want an executable", name, f.Type)
	}
}
