package registry_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/kos-sdn/kos/tools/registry"
	"github.com/kos-sdn/kos/tools/spawner"
)

// starterEnv, when set to a folder, makes the test binary a starter
// program instead: it starts a detached registry there, prints its host
// and exits, as `localenv up` does.
const starterEnv = "KOS_REGISTRY_TEST_START_DETACHED"

func TestMain(m *testing.M) {
	if dir := os.Getenv(starterEnv); dir != "" {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		r, err := registry.Start(ctx, registry.Options{Dir: dir, Detach: true})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println(r.Host())
		os.Exit(0)
	}
	os.Exit(m.Run())
}

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

// TestIntegrationDetachAttach starts a detached registry from another
// program, which exits at once; the registry keeps serving, Attach finds
// it from its folder, and stopping the attached registry stops it.
func TestIntegrationDetachAttach(t *testing.T) {
	dir := t.TempDir()
	if _, err := registry.Attach(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Attach on an empty folder: got %v, want an error matching os.ErrNotExist", err)
	}

	starter := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^$")
	starter.Env = append(os.Environ(), starterEnv+"="+dir)
	out, err := starter.Output()
	if err != nil {
		t.Fatalf("the starter program failed: %v\n%s", err, out)
	}
	host := strings.TrimSpace(string(out))

	r, err := registry.Attach(dir)
	if err != nil {
		t.Fatal(err)
	}
	// Whatever happens below, the registry must not outlive the test.
	t.Cleanup(func() {
		if spawner.Alive(r.PID(), "") {
			_ = r.Stop()
		}
	})
	if r.Host() != host {
		t.Errorf("attached Host() = %s, the starter printed %s", r.Host(), host)
	}
	if !r.Running() {
		t.Fatalf("the registry (pid %d) stopped with its starter; its log:\n%s", r.PID(), spawner.Tail(r.LogFile(), 15))
	}
	if got, want := r.Dir(), dir; got != want {
		t.Errorf("Dir() = %s, want %s", got, want)
	}
	if _, err := registry.Start(t.Context(), registry.Options{Dir: dir}); err == nil {
		t.Error("a second Start in the folder of a running registry succeeded, want an error")
	}

	// It serves after its starter is gone.
	img, err := random.Image(512, 1)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.ParseReference(host+"/test/detached:v1", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, remote.WithContext(t.Context())); err != nil {
		t.Fatalf("pushing %s: %v", ref, err)
	}

	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	if spawner.Alive(r.PID(), "") {
		t.Errorf("the registry (pid %d) still runs after Stop", r.PID())
	}
	again, err := registry.Attach(dir)
	if err != nil {
		t.Fatal(err)
	}
	if again.Running() {
		t.Error("Attach after Stop finds the registry running")
	}
	if err := again.Stop(); err != nil {
		t.Errorf("stopping a stopped registry: %v", err)
	}
	// Its storage stays: a registry started there again serves the image.
	r2 := registry.StartT(t, registry.Options{Dir: dir, Address: host})
	ref2, err := name.ParseReference(r2.Host()+"/test/detached:v1", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := remote.Head(ref2, remote.WithContext(t.Context())); err != nil {
		t.Errorf("the restarted registry lost %s: %v", ref2, err)
	}
}
