package apicheck

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/blang/semver/v4"
	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kos-sdn/kos/channels"
	"github.com/kos-sdn/kos/tools/addons/bundle"
)

// TestAlternativesGrantTheSame checks that the releases the local channel
// puts in place of the bootstrap channel's (etcd as one member, the agent on
// the userspace datapath) have the same ServiceAccounts and RBAC, so that
// TestIntegrationRBAC, which applies the bootstrap channel's, covers them.
func TestAlternativesGrantTheSame(t *testing.T) {
	ctx := context.Background()
	fetcher := channels.NewFetcher()
	load := func(names ...string) []*channels.Addon {
		var releases []*channels.Addon
		for _, name := range names {
			loaded, err := channels.Load(ctx, fetcher, filepath.Join(repoRoot, name))
			if err != nil {
				t.Fatalf("loading %s: %v", name, err)
			}
			releases = append(releases, loaded...)
		}
		return releases
	}
	bootstrap := load("bootstrap-channel.yaml")
	local := load("addons/local-channel.yaml", "bootstrap-channel.yaml")
	for _, v := range []string{"1.29.0", "1.34.0"} {
		version := semver.MustParse(v)
		want := identityObjects(t, fetcher, channels.Select(bootstrap, version))
		got := identityObjects(t, fetcher, channels.Select(local, version))
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("Kubernetes %s: ServiceAccounts and RBAC of the local channel's picks differ from the bootstrap channel's (-bootstrap +local):\n%s", v, diff)
		}
	}
}

// identityObjects returns the objects of the releases that channels applies
// before any other (namespaces, ServiceAccounts, RBAC), as it applies them.
func identityObjects(t *testing.T, fetcher *channels.Fetcher, releases []*channels.Addon) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, a := range releases {
		data, err := fetcher.FetchManifest(context.Background(), a)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := channels.DecodeObjects(data)
		if err != nil {
			t.Fatalf("decoding %s: %v", a.Manifest, err)
		}
		channels.StampLabels(objs, a.Selector)
		for _, u := range objs {
			if channels.PhaseOf(u.GroupVersionKind().GroupKind()) <= channels.PhaseIdentity {
				out = append(out, u.Object)
			}
		}
	}
	return out
}

// TestImages checks the images of every release: the KOS components' are
// tagged with the release's version, as `make images` builds them, and every
// image is pulled only when the node lacks it, since the images are imported
// into the nodes rather than pulled from a registry.
func TestImages(t *testing.T) {
	ctx := context.Background()
	b, err := bundle.Load(ctx, repoRoot, bundle.Channels)
	if err != nil {
		t.Fatal(err)
	}
	fetcher := channels.NewFetcher()
	for _, f := range b.Folders {
		for _, a := range f.Releases {
			data, err := fetcher.FetchManifest(ctx, a)
			if err != nil {
				t.Fatal(err)
			}
			objs, err := channels.DecodeObjects(data)
			if err != nil {
				t.Fatal(err)
			}
			for _, u := range objs {
				containers, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
				inits, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "initContainers")
				for _, c := range append(containers, inits...) {
					c := c.(map[string]any)
					image, _ := c["image"].(string)
					where := fmt.Sprintf("%s: %s, container %v", b.Rel(a.Manifest), describeObject(u), c["name"])
					if repo, tag, _ := strings.Cut(image, ":"); strings.HasPrefix(repo, "kos.example.com/kos-") && tag != a.VersionString() {
						t.Errorf("%s: image %s, want the tag %s of the release", where, image, a.VersionString())
					}
					if p := c["imagePullPolicy"]; p != "IfNotPresent" {
						t.Errorf("%s: imagePullPolicy %v, want IfNotPresent", where, p)
					}
				}
			}
		}
	}
}
