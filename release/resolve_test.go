package release

import (
	"context"
	"io"
	"log"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/kos-sdn/kos/addons"
	"github.com/kos-sdn/kos/release/api"
)

// TestResolvePinsPushedImages renders a release for an in-process registry
// that has one of the KOS images: that one is pinned by its digest, the
// others keep their tags.
func TestResolvePinsPushedImages(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	img, err := random.Image(1024, 1)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.NewTag(host + "/kos/kos-agent:" + Version)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}
	digest, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	cfg := &api.ReleaseConfig{APIVersion: api.APIVersion, Kind: api.Kind, Registry: host + "/kos"}
	out := t.TempDir()
	if _, err := WriteTree(context.Background(), TreeOptions{Source: addons.FS, Out: out, Config: cfg, Modules: modules(t), Resolve: RegistryResolver(context.Background(), false)}); err != nil {
		t.Fatal(err)
	}
	tr := loadTree(t, out)
	for file, u := range tr.find("DaemonSet", "kos-agent") {
		if got, want := container(t, podSpec(t, u), "kos-agent").Image, host+"/kos/kos-agent:"+Version+"@"+digest.String(); got != want {
			t.Errorf("%s: kos-agent's image is %s, want %s", file, got, want)
		}
	}
	for file, u := range tr.find("Deployment", "kos-controller-manager") {
		if got, want := container(t, podSpec(t, u), "kos-controller-manager").Image, host+"/kos/kos-controller-manager:"+Version; got != want {
			t.Errorf("%s: kos-controller-manager's image is %s, want %s (the registry lacks it)", file, got, want)
		}
	}
}
