package catalog

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"io"
	"maps"
	"path"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/kos-sdn/kos/tools/images"
	"github.com/kos-sdn/kos/tools/registry"
)

// TestIntegrationPush pushes images to a real registry, then pulls them by
// tag: an image of Go binaries is an index of one image per platform, each
// holding its command built for that architecture; the agent image, which
// carries this machine's programs, lists this machine's platform only.
// The pause image stands for the images of Go binaries: cross-building
// kos-apiserver, kos-controller-manager and etcd for arm64 takes minutes
// on a cold cache (go run ./tools/kosimages --push does it).
func TestIntegrationPush(t *testing.T) {
	ctx := t.Context()
	reg := registry.StartT(t, registry.Options{Address: "127.0.0.1"})
	repo := reg.Host() + "/kos-test"
	versions := map[string]string{APIServer: "0.0.1-test", ControllerManager: "0.0.2-test", Agent: "0.0.3-test"}

	pushed, err := Push(ctx, PushOptions{
		Repository: repo,
		Versions:   versions,
		Images:     []string{Agent, Pause},
		WorkDir:    t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	wantTags := []string{Tag(Agent, versions[Agent]), images.PauseTag}
	if diff := cmp.Diff(wantTags, slices.Sorted(maps.Keys(pushed))); diff != "" {
		t.Fatalf("pushed tags (-want +got):\n%s", diff)
	}

	for _, tt := range []struct {
		name, version string
		binary        string
		platforms     []string
	}{
		{Pause, "1", "/pause", []string{"linux/amd64", "linux/arm64"}},
		{Agent, versions[Agent], path.Join(images.BinDir, Agent), []string{HostPlatform}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ref, err := name.NewTag(repo + "/" + tt.name + ":" + tt.version)
			if err != nil {
				t.Fatal(err)
			}
			idx, err := remote.Index(ref, remote.WithContext(ctx))
			if err != nil {
				t.Fatalf("pulling %s: %v", ref, err)
			}
			digest, err := idx.Digest()
			if err != nil {
				t.Fatal(err)
			}
			if got, want := pushed[Registry+"/"+tt.name+":"+tt.version], ref.String()+"@"+digest.String(); got != want {
				t.Errorf("Push said %s, the registry has %s", got, want)
			}
			manifest, err := idx.IndexManifest()
			if err != nil {
				t.Fatal(err)
			}
			var platforms []string
			for _, desc := range manifest.Manifests {
				platforms = append(platforms, desc.Platform.String())
				img, err := idx.Image(desc.Digest)
				if err != nil {
					t.Fatalf("pulling the %s image: %v", desc.Platform, err)
				}
				cf, err := img.ConfigFile()
				if err != nil {
					t.Fatal(err)
				}
				if cf.OS+"/"+cf.Architecture != desc.Platform.String() {
					t.Errorf("the %s image's config says %s/%s", desc.Platform, cf.OS, cf.Architecture)
				}
				if got := binaryMachine(t, img, tt.binary); got != machines[desc.Platform.Architecture] {
					t.Errorf("%s in the %s image is for %s, want %s", tt.binary, desc.Platform, got, machines[desc.Platform.Architecture])
				}
			}
			if diff := cmp.Diff(tt.platforms, platforms); diff != "" {
				t.Errorf("platforms of %s (-want +got):\n%s", ref, diff)
			}
		})
	}
}

// machines are the ELF machines of the architectures the tests push.
var machines = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// binaryMachine finds file in the image's layers, top first, and returns the
// machine its ELF header names.
func binaryMachine(t *testing.T, img v1.Image, file string) elf.Machine {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range slices.Backward(layers) {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatalf("pulling a layer: %v", err)
		}
		tr := tar.NewReader(rc)
		for {
			hdr, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("reading a layer: %v", err)
			}
			if "/"+path.Clean(hdr.Name) != file {
				continue
			}
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			rc.Close()
			f, err := elf.NewFile(bytes.NewReader(data))
			if err != nil {
				t.Fatalf("%s is not an ELF program: %v", file, err)
			}
			return f.Machine
		}
		rc.Close()
	}
	t.Fatalf("no layer holds %s", file)
	return 0
}
