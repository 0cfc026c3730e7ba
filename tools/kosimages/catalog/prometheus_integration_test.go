package catalog

import (
	"io/fs"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/kos-sdn/kos/tools/images"
	"github.com/kos-sdn/kos/tools/registry"
)

// TestIntegrationPrometheusImage pushes the Prometheus image to a real
// registry, pulls it by the pinned reference PushPrometheus returned,
// unpacks it and runs its entrypoint there with chroot, with nothing but
// what the image holds: it reports the version the image is tagged with.
// It holds the program and exactly the libraries ldd names for it.
func TestIntegrationPrometheusImage(t *testing.T) {
	ctx := t.Context()
	if _, err := exec.LookPath(PrometheusProgram); err != nil {
		t.Fatalf("prometheus is not installed (tools/deps.sh installs it): %v", err)
	}
	reg := registry.StartT(t, registry.Options{Address: "127.0.0.1"})
	repo := reg.Host() + "/kos-test"
	pinned, err := PushPrometheus(ctx, repo, false)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.NewDigest(pinned)
	if err != nil {
		t.Fatalf("PushPrometheus returned %q: %v", pinned, err)
	}
	tag, _, _ := strings.Cut(pinned, "@")
	version := strings.TrimPrefix(tag, repo+"/"+Prometheus+":")
	if version == tag || version == "" {
		t.Fatalf("PushPrometheus returned %q, want %s/%s:VERSION@sha256:...", pinned, repo, Prometheus)
	}
	img, err := remote.Image(ref, remote.WithContext(ctx))
	if err != nil {
		t.Fatalf("pulling %s: %v", ref, err)
	}
	if diff := cmp.Diff([]string{PrometheusProgram}, imageEntrypoint(t, img)); diff != "" {
		t.Errorf("entrypoint (-want +got):\n%s", diff)
	}

	files, err := images.HostBinaries(ctx, PrometheusProgram)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, f := range files {
		want = append(want, f.Path)
	}
	root := filepath.Join(t.TempDir(), "rootfs")
	unpack(t, img, root)
	var got []string
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(root, p)
		got = append(got, "/"+filepath.ToSlash(rel))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("files of the image (-want +got):\n%s", diff)
	}

	out := chroot(t, root, nil, nil, PrometheusProgram, "--version")
	if v, err := PrometheusVersion(out); err != nil || v != version {
		t.Errorf("prometheus --version in the image says %q (%v), want version %s", out, err, version)
	}
}
