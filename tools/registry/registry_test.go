package registry_test

import (
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/kos-sdn/kos/tools/registry"
)

// TestIntegrationPushPull pushes an image to a real registry over plain
// http and pulls it back by tag.
func TestIntegrationPushPull(t *testing.T) {
	r := registry.StartT(t, registry.Options{Address: "127.0.0.1"})

	img, err := random.Image(1024, 2)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.ParseReference(r.Host()+"/test/random:v1", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, remote.WithContext(t.Context())); err != nil {
		t.Fatalf("pushing %s: %v", ref, err)
	}

	got, err := remote.Image(ref, remote.WithContext(t.Context()))
	if err != nil {
		t.Fatalf("pulling %s: %v", ref, err)
	}
	gotDigest, err := got.Digest()
	if err != nil {
		t.Fatal(err)
	}
	wantDigest, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if gotDigest != wantDigest {
		t.Errorf("pulled digest %s, pushed %s", gotDigest, wantDigest)
	}
	layers, err := got.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 2 {
		t.Errorf("pulled %d layers, pushed 2", len(layers))
	}
	for _, l := range layers {
		rc, err := l.Compressed()
		if err != nil {
			t.Fatalf("pulling a layer: %v", err)
		}
		rc.Close()
	}
}

// TestStartRefusesBadAddress checks that an address that is not an IP is
// refused before anything starts.
func TestStartRefusesBadAddress(t *testing.T) {
	for _, addr := range []string{"localhost", "example.com:5000", "127.0.0.1:x"} {
		if _, err := registry.Start(t.Context(), registry.Options{Dir: t.TempDir(), Address: addr}); err == nil {
			t.Errorf("Start(%q) succeeded, want an error", addr)
		}
	}
}

// TestIntegrationFixedPort starts a registry on a port the caller chose.
func TestIntegrationFixedPort(t *testing.T) {
	first := registry.StartT(t, registry.Options{})
	if err := first.Stop(); err != nil {
		t.Fatal(err)
	}
	// The port the first one had is free again.
	r := registry.StartT(t, registry.Options{Address: first.Host()})
	if r.Host() != first.Host() {
		t.Errorf("Host() = %s, want %s", r.Host(), first.Host())
	}
}
