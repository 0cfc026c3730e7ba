package catalog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Releases are the commits the released versions of the KOS addons were
// made from, by version. A release's images are what its commit's own
// tooling builds from its commit's tree (BuildReleased), not today's
// programs tagged with an old version.
var Releases = map[string]string{
	// The last commit of the first wave. The 0.1.0 manifests last
	// changed in 206efe1; nothing the images hold (cmd/, components/,
	// tools/images, tools/kosimages, go.mod) changed after it.
	"0.1.0": "2212c21c52e6864de2b2303dbe9852d05453f155",
	// The last commit of the second wave (cf83361): 0.2.0 as users got
	// it, before the third wave's agent (MTU from the underlay, the
	// tunnel filter, the CNI server) went into the tree that builds
	// 0.3.0.
	"0.2.0": "cf83361052d6aaf75f9b1a8f313d6cae607ce4f5",
	// The last commit of the third wave (6433994): 0.3.0 as users got
	// it, before the fourth wave's agent (debug listener, node Leases,
	// network configuration) went into the tree, which from here on
	// builds only the newest release, 0.4.0.
	"0.3.0": "6433994067605b6258796b31926b79f0f9f2d335",
}

// ReleasedOptions say which release's images to build.
type ReleasedOptions struct {
	// Root is a git checkout of this repository whose history holds the
	// release's commit.
	Root string
	// Version is the release, one of Releases.
	Version string
	// Cache is the folder of built things: the images are kept in
	// Cache/released/COMMIT, and the release's tools/kube/build.sh keeps
	// its etcd in Cache/kube (as today's does). "" means Root/.cache.
	Cache string
	// Progress, when set, is told what is built.
	Progress io.Writer
}

// BuildReleased returns a docker-format tarball of the images of release
// opts.Version as its commit built them: the commit's tree is copied out
// (git archive) and its own `go run ./tools/kosimages` run there, which
// builds the etcd its tools/kube names too. The tarball is kept as
// Cache/released/COMMIT/kos.tar, so only the first call for a commit
// builds (minutes on a cold Go cache: that commit's Kubernetes libraries
// are compiled too); later calls return it at once.
func BuildReleased(ctx context.Context, opts ReleasedOptions) (string, error) {
	commit, ok := Releases[opts.Version]
	if !ok {
		return "", fmt.Errorf("no commit known for release %q (known: %s)", opts.Version, strings.Join(slices.Sorted(maps.Keys(Releases)), ", "))
	}
	cache := opts.Cache
	if cache == "" {
		cache = filepath.Join(opts.Root, ".cache")
	}
	out := filepath.Join(cache, "released", commit, "kos.tar")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	if err := HasCommit(ctx, opts.Root, commit); err != nil {
		return "", fmt.Errorf("building the images of release %s: %w", opts.Version, err)
	}
	began := time.Now()
	src, err := os.MkdirTemp("", "kos-release-"+opts.Version+"-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(src)
	if err := extract(ctx, opts.Root, commit, src); err != nil {
		return "", fmt.Errorf("building the images of release %s: %w", opts.Version, err)
	}
	// The release's own command, in its own module: its go.mod decides
	// the libraries. The copy has no .git, so nothing stamps the commit.
	cmd := exec.CommandContext(ctx, "go", "run", "./tools/kosimages", "--root", src, "--out", out)
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local", "GOWORK=off", "KOS_CACHE="+cache)
	said, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("building the images of release %s with its own tools/kosimages (commit %s): %w\n%s", opts.Version, commit, err, said)
	}
	if opts.Progress != nil {
		fmt.Fprintf(opts.Progress, "built the images of release %s from commit %.12s in %s:\n%s", opts.Version, commit, time.Since(began).Round(time.Second), said)
	}
	return out, nil
}

// HasCommit returns nil when the git checkout root holds commit, and
// otherwise an error that says how to get it.
func HasCommit(ctx context.Context, root, commit string) error {
	if err := exec.CommandContext(ctx, "git", "-C", root, "cat-file", "-e", commit+"^{commit}").Run(); err == nil {
		return nil
	}
	shallow, err := exec.CommandContext(ctx, "git", "-C", root, "rev-parse", "--is-shallow-repository").Output()
	switch {
	case err != nil:
		return fmt.Errorf("commit %s: %s is not a git checkout: %w", commit, root, err)
	case strings.TrimSpace(string(shallow)) == "true":
		return fmt.Errorf("commit %s is not in %s, a shallow clone: fetch the whole history (git fetch --unshallow)", commit, root)
	}
	return fmt.Errorf("commit %s is not in the history of %s", commit, root)
}

// extract writes the tree of commit into the folder dir.
func extract(ctx context.Context, root, commit, dir string) error {
	archive := exec.CommandContext(ctx, "git", "-C", root, "archive", "--format=tar", commit)
	untar := exec.CommandContext(ctx, "tar", "-x", "-C", dir)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		return err
	}
	untar.Stdin = pipe
	var archiveErr, untarErr strings.Builder
	archive.Stderr, untar.Stderr = &archiveErr, &untarErr
	if err := archive.Start(); err != nil {
		return fmt.Errorf("git archive %s: %w", commit, err)
	}
	if err := untar.Run(); err != nil {
		_ = archive.Wait()
		return fmt.Errorf("extracting commit %s (%s): %w", commit, strings.TrimSpace(untarErr.String()), err)
	}
	if err := archive.Wait(); err != nil {
		return fmt.Errorf("git archive %s (%s): %w", commit, strings.TrimSpace(archiveErr.String()), err)
	}
	return nil
}

// PushArchive pushes images of the docker-format tarball (as BuildReleased
// writes) to repository ("HOST[:PORT][/PREFIX]"): each named NAME, of the
// names given, is pushed as repository/NAME:TAG with the tag it has in the
// tarball. It returns, as Push does, the pushed references pinned by
// digest by the tarball's tags (kos.example.com/NAME:TAG).
func PushArchive(ctx context.Context, archive, repository string, insecure bool, names ...string) (map[string]string, error) {
	manifest, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(archive) })
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", archive, err)
	}
	pushed := map[string]string{}
	var errs []error
	for _, desc := range manifest {
		for _, t := range desc.RepoTags {
			image, version, ok := strings.Cut(strings.TrimPrefix(t, Registry+"/"), ":")
			if !ok || !slices.Contains(names, image) {
				continue
			}
			src, err := name.NewTag(t)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", archive, err)
			}
			img, err := tarball.ImageFromPath(archive, &src)
			if err != nil {
				return nil, fmt.Errorf("reading %s from %s: %w", t, archive, err)
			}
			dst, err := name.NewTag(repository+"/"+image+":"+version, nameOptions(insecure)...)
			if err != nil {
				return nil, fmt.Errorf("image %s: %w", image, err)
			}
			if err := remote.Write(dst, img, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
				return nil, fmt.Errorf("pushing %s: %w", dst, err)
			}
			digest, err := img.Digest()
			if err != nil {
				return nil, fmt.Errorf("image %s: %w", t, err)
			}
			pushed[t] = dst.String() + "@" + digest.String()
		}
	}
	for _, n := range names {
		if !slices.ContainsFunc(slices.Collect(maps.Keys(pushed)), func(t string) bool { return strings.HasPrefix(t, Registry+"/"+n+":") }) {
			errs = append(errs, fmt.Errorf("%s holds no image %s", archive, n))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return pushed, nil
}
