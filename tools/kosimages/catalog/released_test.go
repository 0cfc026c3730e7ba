package catalog

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/kos-sdn/kos/tools/images"
	"github.com/kos-sdn/kos/tools/registry"
)

// TestReleases checks that each release's commit is in this checkout's
// history and holds that release's manifests as they are today, byte for
// byte: the commit the images are built from is the one that released
// them.
func TestReleases(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	for version, commit := range Releases {
		t.Run(version, func(t *testing.T) {
			if err := HasCommit(t.Context(), root, commit); err != nil {
				t.Fatal(err)
			}
			files, err := exec.CommandContext(t.Context(), "git", "-C", root, "ls-tree", "-r", "--name-only", commit, "--", "addons").Output()
			if err != nil {
				t.Fatal(err)
			}
			var manifests []string
			for _, f := range strings.Fields(string(files)) {
				if strings.HasPrefix(filepath.Base(f), version+".") || strings.HasPrefix(filepath.Base(f), version+"-") {
					manifests = append(manifests, f)
				}
			}
			if len(manifests) == 0 {
				t.Fatalf("commit %s holds no manifest of release %s", commit, version)
			}
			// The commit against the working tree.
			args := append([]string{"-C", root, "diff", "--stat", commit, "--"}, manifests...)
			if out, err := exec.CommandContext(t.Context(), "git", args...).CombinedOutput(); err != nil || len(out) > 0 {
				t.Errorf("release %s's manifests differ from commit %s's (%v):\n%s", version, commit, err, out)
			}
		})
	}
}

func TestBuildReleasedUnknown(t *testing.T) {
	_, err := BuildReleased(t.Context(), ReleasedOptions{Root: t.TempDir(), Version: "9.9.9"})
	if err == nil || !strings.Contains(err.Error(), `no commit known for release "9.9.9"`) {
		t.Errorf("got %v, want an error that names the release", err)
	}
}

func TestHasCommitShallow(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	shallow := t.TempDir()
	// A clone of the newest commit only: file:// so that --depth holds.
	if out, err := exec.CommandContext(t.Context(), "git", "clone", "--quiet", "--depth=1", "--no-checkout", "file://"+root, shallow).CombinedOutput(); err != nil {
		t.Fatalf("git clone --depth=1: %v\n%s", err, out)
	}
	err = HasCommit(t.Context(), shallow, Releases["0.1.0"])
	if err == nil || !strings.Contains(err.Error(), "a shallow clone: fetch the whole history (git fetch --unshallow)") {
		t.Errorf("got %v, want an error that says the clone is shallow", err)
	}
}

// TestIntegrationPushArchive pushes the images named in a docker-format
// tarball to a real registry and pulls them back by the references it
// returned.
func TestIntegrationPushArchive(t *testing.T) {
	ctx := t.Context()
	reg := registry.StartT(t, registry.Options{Address: "127.0.0.1"})
	repo := reg.Host() + "/kos-test"
	built := map[string]v1.Image{}
	for _, n := range []string{Agent, APIServer} {
		layer, err := images.Layer([]images.File{{Path: "/" + n, Source: "released.go", Mode: 0o644}})
		if err != nil {
			t.Fatal(err)
		}
		img, err := images.New(images.Config{Labels: map[string]string{"name": n}}, layer)
		if err != nil {
			t.Fatal(err)
		}
		built[Tag(n, "0.0.9-test")] = img
	}
	archive := filepath.Join(t.TempDir(), "kos.tar")
	if err := images.Write(archive, built); err != nil {
		t.Fatal(err)
	}

	pushed, err := PushArchive(ctx, archive, repo, false, Agent)
	if err != nil {
		t.Fatal(err)
	}
	if len(pushed) != 1 {
		t.Errorf("pushed %v, want %s only", pushed, Agent)
	}
	want, err := built[Tag(Agent, "0.0.9-test")].Digest()
	if err != nil {
		t.Fatal(err)
	}
	if got := pushed[Tag(Agent, "0.0.9-test")]; got != repo+"/"+Agent+":0.0.9-test@"+want.String() {
		t.Errorf("PushArchive said %s, want %s/%s:0.0.9-test@%s", got, repo, Agent, want)
	}
	ref, err := name.ParseReference(pushed[Tag(Agent, "0.0.9-test")])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := remote.Image(ref, remote.WithContext(ctx)); err != nil {
		t.Errorf("pulling %s: %v", ref, err)
	}

	if _, err := PushArchive(ctx, archive, repo, false, ControllerManager); err == nil || !strings.Contains(err.Error(), "holds no image "+ControllerManager) {
		t.Errorf("pushing an image the tarball lacks: got %v, want an error naming it", err)
	}
}
