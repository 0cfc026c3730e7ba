package images

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func TestNew(t *testing.T) {
	bottom, err := Layer([]File{{Path: "/etc/bottom", Data: []byte("1")}})
	if err != nil {
		t.Fatal(err)
	}
	top, err := Layer([]File{{Path: "/usr/local/bin/app", Data: []byte("#!"), Mode: 0o755}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		cfg  Config
		want v1.Config
		arch string
	}{
		{
			name: "defaults",
			cfg:  Config{Entrypoint: []string{"/usr/local/bin/app"}},
			want: v1.Config{Entrypoint: []string{"/usr/local/bin/app"}, Env: []string{DefaultPath}},
			arch: runtime.GOARCH,
		},
		{
			name: "everything",
			cfg: Config{
				Entrypoint: []string{"/usr/local/bin/app", "serve"}, Cmd: []string{"--port=8080"},
				Env: []string{"A=1"}, WorkingDir: "/work", User: "65532:65532",
				Labels: map[string]string{"app": "x"}, Architecture: "arm64",
			},
			want: v1.Config{
				Entrypoint: []string{"/usr/local/bin/app", "serve"}, Cmd: []string{"--port=8080"},
				Env: []string{DefaultPath, "A=1"}, WorkingDir: "/work", User: "65532:65532",
				Labels: map[string]string{"app": "x"},
			},
			arch: "arm64",
		},
		{
			name: "own PATH",
			cfg:  Config{Env: []string{"PATH=/bin"}},
			want: v1.Config{Env: []string{"PATH=/bin"}},
			arch: runtime.GOARCH,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			img, err := New(tt.cfg, bottom, top)
			if err != nil {
				t.Fatal(err)
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, cf.Config); diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
			if cf.OS != "linux" || cf.Architecture != tt.arch {
				t.Errorf("platform: got %s/%s, want linux/%s", cf.OS, cf.Architecture, tt.arch)
			}
			layers, err := img.Layers()
			if err != nil {
				t.Fatal(err)
			}
			if got, want := digests(t, layers...), digests(t, bottom, top); !cmp.Equal(got, want) {
				t.Errorf("layers: got %v, want %v (bottom first)", got, want)
			}
			if len(cf.RootFS.DiffIDs) != 2 || len(cf.History) != 2 {
				t.Errorf("config: got %d diff IDs and %d history entries, want 2 of each", len(cf.RootFS.DiffIDs), len(cf.History))
			}
		})
	}
}

func digests(t *testing.T, layers ...v1.Layer) []string {
	t.Helper()
	var out []string
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, d.String())
	}
	return out
}

func TestWrite(t *testing.T) {
	layer, err := Layer([]File{{Path: "/hello", Data: []byte("hello")}})
	if err != nil {
		t.Fatal(err)
	}
	one, err := New(Config{Entrypoint: []string{"/hello"}}, layer)
	if err != nil {
		t.Fatal(err)
	}
	two, err := New(Config{Entrypoint: []string{"/hello"}, Cmd: []string{"two"}}, layer)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "images.tar")
	tagged := map[string]v1.Image{
		"kos.example.com/one:v1": one,
		"kos.example.com/two:v1": two,
		"kos.example.com/one:v2": one,
	}
	if err := Write(path, tagged); err != nil {
		t.Fatal(err)
	}

	// The tarball's manifest.json is what `ctr images import` and `docker
	// load` read: one entry per image, every tag of it, its config and
	// layers.
	var manifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(tarEntry(t, path, "manifest.json"), &manifest); err != nil {
		t.Fatalf("parsing manifest.json: %v", err)
	}
	tags := map[string]bool{}
	for _, m := range manifest {
		if len(m.Layers) != 1 {
			t.Errorf("image %v: got %d layers, want 1", m.RepoTags, len(m.Layers))
		}
		for _, tag := range m.RepoTags {
			tags[tag] = true
		}
	}
	if len(manifest) != 2 || len(tags) != 3 {
		t.Errorf("manifest.json: got %d images tagged %v, want 2 images with 3 tags", len(manifest), tags)
	}

	for tag, want := range tagged {
		ref, err := name.NewTag(tag)
		if err != nil {
			t.Fatal(err)
		}
		got, err := tarball.ImageFromPath(path, &ref)
		if err != nil {
			t.Fatalf("reading %s back: %v", tag, err)
		}
		gotDigest, err := got.ConfigName()
		if err != nil {
			t.Fatal(err)
		}
		wantDigest, err := want.ConfigName()
		if err != nil {
			t.Fatal(err)
		}
		if gotDigest != wantDigest {
			t.Errorf("%s: got config %s, want %s", tag, gotDigest, wantDigest)
		}
	}
}

func TestWriteRejectsShortTags(t *testing.T) {
	layer, err := Layer([]File{{Path: "/hello", Data: []byte("hello")}})
	if err != nil {
		t.Fatal(err)
	}
	img, err := New(Config{}, layer)
	if err != nil {
		t.Fatal(err)
	}
	// A tag without a registry would silently mean docker.io.
	for _, tag := range []string{"hello:v1", "kos.example.com/hello", "Kos/Hello:v1"} {
		if err := Write(filepath.Join(t.TempDir(), "x.tar"), map[string]v1.Image{tag: img}); err == nil {
			t.Errorf("Write with tag %q: got no error", tag)
		}
	}
}

// tarEntry returns the content of the entry called name in the tar file at
// path.
func tarEntry(t *testing.T, path, name string) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			t.Fatalf("%s holds no %s", path, name)
		}
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimPrefix(hdr.Name, "./") == name {
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			return data
		}
	}
}
