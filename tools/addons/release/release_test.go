package release_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/kos-sdn/kos/channels"
	"github.com/kos-sdn/kos/channels/cli"
	"github.com/kos-sdn/kos/tools/addons/bundle"
	"github.com/kos-sdn/kos/tools/addons/release"
	"github.com/kos-sdn/kos/tools/registry"
	"github.com/kos-sdn/kos/tools/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// imageLine is an image field of a manifest, and its value.
var imageLine = regexp.MustCompile(`(?m)^\s*(?:- )?image:\s*["']?([^"'\s]+)`)

// repoRoot is the repository whose addons the tests publish.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// thirdPartyImages returns the images the repository's manifests name
// outside kos.example.com/ (kos-monitoring's Prometheus and Grafana), which a
// release leaves as they are.
func thirdPartyImages(t *testing.T) map[string]bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "..", "..", "addons", "*", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range imageLine.FindAllSubmatch(data, -1) {
			if !strings.HasPrefix(string(m[1]), "kos.example.com/") {
				out[string(m[1])] = true
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("no manifest in addons/ names an image outside kos.example.com/: is kos-monitoring gone?")
	}
	return out
}

// checkTree loads every channel of a written tree, as channels does, checks
// each manifest's hash (FetchManifest verifies it) and that its images are
// all in registry. It returns the releases by channel.
func checkTree(t *testing.T, out, registry string) map[string][]*channels.Addon {
	t.Helper()
	ctx := t.Context()
	fetcher := channels.NewFetcher()
	loaded := map[string][]*channels.Addon{}
	thirdParty := thirdPartyImages(t)
	for _, ch := range bundle.Channels {
		releases, err := channels.Load(ctx, fetcher, "file://"+filepath.Join(out, ch.Path))
		if err != nil {
			t.Fatalf("loading the published %s: %v", ch.Path, err)
		}
		loaded[ch.Path] = releases
		for _, a := range releases {
			data, err := fetcher.FetchManifest(ctx, a)
			if err != nil {
				t.Errorf("%s: %v", ch.Path, err)
				continue
			}
			images := imageLine.FindAllSubmatch(data, -1)
			if len(images) == 0 {
				t.Errorf("%s names no image", a.Manifest)
			}
			for _, m := range images {
				if !strings.HasPrefix(string(m[1]), registry+"/") && !thirdParty[string(m[1])] {
					t.Errorf("%s names the image %s, not one in %s", a.Manifest, m[1], registry)
				}
			}
			if bytes.Contains(data, []byte(" kos.example.com/")) {
				t.Errorf("%s still names kos.example.com/ images", a.Manifest)
			}
		}
	}
	return loaded
}

// TestWrite writes a release for a registry, with a digest for one image and
// settings, and checks the tree: the repository's releases, each hash right,
// every image in the registry, the settings applied, the repository
// unchanged.
func TestWrite(t *testing.T) {
	root := repoRoot(t)
	before, err := os.ReadFile(filepath.Join(root, "bootstrap-channel.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	const reg = "registry.example.net:5000/kos"
	digest := "sha256:" + strings.Repeat("ab", 32)
	repoReleases, err := channels.Load(t.Context(), channels.NewFetcher(), filepath.Join(root, "bootstrap-channel.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// Pin the etcd image, which every kos-etcd release names.
	etcdImage := ""
	for _, a := range repoReleases {
		data, err := os.ReadFile(a.Manifest)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range imageLine.FindAllSubmatch(data, -1) {
			if strings.HasPrefix(string(m[1]), "kos.example.com/etcd:") {
				etcdImage = string(m[1])
			}
		}
	}
	if etcdImage == "" {
		t.Fatal("no manifest names kos.example.com/etcd")
	}
	pinned := reg + "/etcd:" + strings.TrimPrefix(etcdImage, "kos.example.com/etcd:") + "@" + digest
	var settings []release.Setting
	for _, s := range []string{"kos-etcd.storage=10Gi", "kos-apiserver.replicas=3"} {
		got, err := release.ParseSetting(s)
		if err != nil {
			t.Fatal(err)
		}
		settings = append(settings, got)
	}

	out := t.TempDir()
	result, err := release.Write(t.Context(), release.Options{
		Root:     root,
		Out:      out,
		Registry: reg,
		Digests:  map[string]string{etcdImage: pinned},
		Settings: settings,
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := result.Images[etcdImage]; got != pinned {
		t.Errorf("etcd's image written as %s, want %s", got, pinned)
	}
	if slices.Contains(result.Unpinned, etcdImage) || len(result.Unpinned) != len(result.Images)-1 {
		t.Errorf("unpinned images %v of %v: want all but %s", result.Unpinned, result.Images, etcdImage)
	}

	loaded := checkTree(t, out, reg)
	// The same releases as the repository's channel, with other hashes.
	published := loaded["bootstrap-channel.yaml"]
	if len(published) != len(repoReleases) {
		t.Fatalf("the published channel lists %d releases, the repository's %d", len(published), len(repoReleases))
	}
	for i, a := range published {
		r := repoReleases[i]
		path := strings.TrimPrefix(a.Manifest, "file://")
		relPub, _ := filepath.Rel(out, path)
		relRepo, _ := filepath.Rel(root, r.Manifest)
		if a.Name != r.Name || a.VersionString() != r.VersionString() || a.ID != r.ID || relPub != relRepo || a.KubernetesVersion != r.KubernetesVersion {
			t.Errorf("release %d: published %s %s %s %s, repository %s %s %s %s", i, a.Name, a.VersionString(), a.ID, relPub, r.Name, r.VersionString(), r.ID, relRepo)
		}
		if a.ManifestHash == r.ManifestHash {
			t.Errorf("%s: the published hash is the repository's, though its images were renamed", relPub)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		switch a.Name {
		case "kos-etcd":
			if !strings.Contains(string(data), "storage: 10Gi") || !strings.Contains(string(data), pinned) {
				t.Errorf("%s: no storage: 10Gi or no %s", relPub, pinned)
			}
		case "kos-apiserver":
			if !strings.Contains(string(data), "replicas: 3") {
				t.Errorf("%s: no replicas: 3", relPub)
			}
		}
	}

	after, err := os.ReadFile(filepath.Join(root, "bootstrap-channel.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(before), string(after)); diff != "" {
		t.Errorf("the repository's bootstrap-channel.yaml changed (-before +after):\n%s", diff)
	}
}

// TestWriteFlavour writes the local flavour and checks that its
// bootstrap-channel.yaml holds every addon's releases for one kind of
// cluster (kos-etcd's and kos-agent's from the local folders, the others
// from the bootstrap channel's), that no local channel is written, and that
// the optional monitoring channel still is; Write has linted them.
func TestWriteFlavour(t *testing.T) {
	root := repoRoot(t)
	out := t.TempDir()
	if _, err := release.Write(t.Context(), release.Options{Root: root, Out: out, Registry: "r.example.net/kos", Flavour: "local"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(out, "addons", "local-channel.yaml")); !os.IsNotExist(err) {
		t.Errorf("the local flavour wrote addons/local-channel.yaml (%v): its releases belong in bootstrap-channel.yaml", err)
	}
	if _, err := os.Stat(filepath.Join(out, "addons", "monitoring-channel.yaml")); err != nil {
		t.Errorf("the local flavour wrote no monitoring channel: %v", err)
	}
	releases, err := channels.Load(t.Context(), channels.NewFetcher(), filepath.Join(out, "bootstrap-channel.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	folders := map[string]map[string]bool{}
	for _, a := range releases {
		if folders[a.Name] == nil {
			folders[a.Name] = map[string]bool{}
		}
		folders[a.Name][filepath.Base(filepath.Dir(a.Manifest))] = true
	}
	want := map[string]map[string]bool{
		"kos-etcd":               {"kos-etcd-single-node": true},
		"kos-apiserver":          {"kos-apiserver": true},
		"kos-controller-manager": {"kos-controller-manager": true},
		"kos-agent":              {"kos-agent-userspace": true},
	}
	if diff := cmp.Diff(folders, want); diff != "" {
		t.Errorf("the folders of each addon's releases in the local bootstrap channel (-got +want):\n%s", diff)
	}
	if problems := channels.Lint(releases); len(problems) > 0 {
		t.Errorf("the local bootstrap channel does not lint: %v", problems)
	}
}

// TestWriteRefuses checks the options Write refuses before writing.
func TestWriteRefuses(t *testing.T) {
	root := repoRoot(t)
	tests := []struct {
		name    string
		opts    release.Options
		wantErr string
	}{
		{"no registry", release.Options{Root: root, Out: t.TempDir()}, "no registry"},
		{"the placeholder registry", release.Options{Root: root, Out: t.TempDir(), Registry: "kos.example.com"}, "not kos.example.com"},
		{"unknown version", release.Options{Root: root, Out: t.TempDir(), Registry: "r.example.net/kos", Version: "9.9.9"}, "no addon has a release of version 9.9.9"},
		{"into the repository", release.Options{Root: root, Out: filepath.Dir(root), Registry: "r.example.net/kos"}, "holds the repository"},
		{"digest without digest", release.Options{Root: root, Out: t.TempDir(), Registry: "r.example.net/kos", Digests: map[string]string{"kos.example.com/etcd:3.6.4": "r.example.net/kos/etcd:3.6.4"}}, "no reference pinned by digest"},
		{"unknown setting", release.Options{Root: root, Out: t.TempDir(), Registry: "r.example.net/kos", Settings: []release.Setting{{Addon: "kos-etcd", Key: "replicas", Value: "5"}}}, "no setting kos-etcd.replicas"},
		{"unknown flavour", release.Options{Root: root, Out: t.TempDir(), Registry: "r.example.net/kos", Flavour: "tiny"}, `no flavour "tiny" (flavours: standard, local)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := release.Write(t.Context(), tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Write: %v, want an error saying %q", err, tt.wantErr)
			}
		})
	}
	for _, s := range []string{"kos-etcd.storage", "kos-etcd.storage=-1Gi", "kos-apiserver.replicas=0", "nothing=1", "kos-agent.replicas=2"} {
		if _, err := release.ParseSetting(s); err == nil {
			t.Errorf("ParseSetting(%q) accepted it", s)
		}
	}
}

// TestIntegrationResolve pushes an image for one the manifests name into a
// real registry, and checks that Write pins it by the digest the registry
// has, and leaves the others, which the registry lacks, by tag.
func TestIntegrationResolve(t *testing.T) {
	root := repoRoot(t)
	reg := registry.StartT(t, registry.Options{Address: "127.0.0.1"})
	prefix := reg.Host() + "/kos"

	// Find what the published tree will name, then push one of them.
	dry, err := release.Write(t.Context(), release.Options{Root: root, Out: t.TempDir(), Registry: prefix})
	if err != nil {
		t.Fatal(err)
	}
	var source string
	for image := range dry.Images {
		if strings.Contains(image, "/etcd:") {
			source = image
		}
	}
	if source == "" {
		t.Fatalf("no etcd image among %v", dry.Images)
	}
	img, err := random.Image(512, 1)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.NewTag(dry.Images[source])
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, remote.WithContext(t.Context())); err != nil {
		t.Fatal(err)
	}
	digest, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}

	out := t.TempDir()
	result, err := release.Write(t.Context(), release.Options{Root: root, Out: out, Registry: prefix, Resolve: true})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := result.Images[source], ref.String()+"@"+digest.String(); got != want {
		t.Errorf("%s written as %s, want %s", source, got, want)
	}
	if slices.Contains(result.Unpinned, source) || len(result.Unpinned) != len(result.Images)-1 {
		t.Errorf("unpinned %v, want every image but %s", result.Unpinned, source)
	}
	checkTree(t, out, prefix)
}

// TestIntegrationPlanFromFile plans the published channel from a file://
// location with our channels command on a real control plane: it fetches
// every manifest, checks its hash and dry-runs each object with
// server-side apply, on a cluster without KOS.
func TestIntegrationPlanFromFile(t *testing.T) {
	env := testenv.Shared(t)
	out := t.TempDir()
	if _, err := release.Write(t.Context(), release.Options{Root: repoRoot(t), Out: out, Registry: "registry.example.net/kos"}); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	args := []string{"--kubeconfig", env.Kubeconfig, "apply", "channel", "file://" + filepath.Join(out, "bootstrap-channel.yaml")}
	if code := cli.Main(context.Background(), args, &stdout, &stderr); code != 0 {
		t.Fatalf("channels %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, stdout.String(), stderr.String())
	}
	for _, addon := range []string{"kos-etcd", "kos-apiserver", "kos-controller-manager", "kos-agent"} {
		if !strings.Contains(stdout.String(), addon) {
			t.Errorf("the plan does not mention %s:\n%s", addon, stdout.String())
		}
	}
}
