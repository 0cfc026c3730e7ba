package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BuildsEnv names a folder that the test programs of one run share for the
// commands Build builds (tools/lanes.sh makes one per lane and removes it
// afterwards): the first program that asks for a command builds it there,
// and the others wait for it and run the same binary, instead of each
// linking its own (kos-apiserver alone is 10 s of CPU and 120 MB a link,
// in ten packages of the integration lane). Whoever sets it removes the
// folder; the tree must not change while the programs run.
const BuildsEnv = "KOS_TEST_BUILDS"

// buildTimeout bounds one build of a command: a cold build of one that
// imports client-go takes a few minutes on a busy two-core machine.
const buildTimeout = 10 * time.Minute

// builds holds the commands built for this program under Main: each package
// is built once, into dir, which Main removes when the tests end.
var builds struct {
	mu sync.Mutex
	// main says that Main runs the program, so that something removes
	// dir.
	main bool
	// dir is made on first use.
	dir  string
	bins map[string]*build
}

// build is one package built for the program.
type build struct {
	once sync.Once
	bin  string
	err  error
}

// Build builds the main package pkg of the KOS module, named by its folder
// relative to the module's root (such as "cmd/channels"), and returns the
// path of the binary, which has the folder's name. It fails t when the
// build does. The build runs the go command on PATH, as make test does (a
// -trimpath test binary knows no GOROOT), in the module's root
// (tools/reporoot), with the environment's GOFLAGS.
//
// Under Main a test program builds each package once, into a folder of its
// own that Main removes when the tests end; with $KOS_TEST_BUILDS set, once
// for every program into that folder; elsewhere every call builds into
// t.TempDir, which goes when t ends: a package whose subtests build what
// later subtests run needs Main.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	pkg, err := modulePackage(pkg)
	if err != nil {
		t.Fatal(err)
	}
	bin, err := programBuild(pkg)
	if errors.Is(err, errNoMain) {
		bin, err = buildInto(t.Context(), t.TempDir(), pkg)
	}
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

var errNoMain = errors.New("testenv.Main does not run this program")

// modulePackage returns pkg, a folder of the module, cleaned.
func modulePackage(pkg string) (string, error) {
	clean := path.Clean(strings.TrimPrefix(pkg, "./"))
	if path.IsAbs(clean) || clean == "." || clean == ".." || strings.HasPrefix(clean, "../") {
		return "", fmt.Errorf("building %q: want a folder of the module, such as cmd/channels", pkg)
	}
	return clean, nil
}

// programBuild returns the binary of pkg (cleaned by modulePackage) built
// once for the program, or once for every program in $KOS_TEST_BUILDS, or
// errNoMain when neither Main nor $KOS_TEST_BUILDS is there: nothing would
// remove it.
func programBuild(pkg string) (string, error) {
	builds.mu.Lock()
	shared := os.Getenv(BuildsEnv)
	if !builds.main && shared == "" {
		builds.mu.Unlock()
		return "", errNoMain
	}
	if shared == "" && builds.dir == "" {
		dir, err := os.MkdirTemp("", "kos-test-bin-")
		if err != nil {
			builds.mu.Unlock()
			return "", fmt.Errorf("creating a folder for built commands: %w", err)
		}
		builds.dir = dir
	}
	if builds.bins == nil {
		builds.bins = map[string]*build{}
	}
	b := builds.bins[pkg]
	if b == nil {
		b = &build{}
		builds.bins[pkg] = b
	}
	dir := filepath.Join(builds.dir, filepath.FromSlash(pkg))
	builds.mu.Unlock()
	b.once.Do(func() {
		// Not the asking test's context: the binary serves the tests
		// after it too.
		ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
		defer cancel()
		if shared != "" {
			b.bin, b.err = sharedBuild(ctx, shared, pkg)
			return
		}
		b.bin, b.err = buildInto(ctx, dir, pkg)
	})
	return b.bin, b.err
}

// sharedBuild returns the binary of pkg in the folder shared, building it
// there unless another program already has. A lock file per package,
// held while building, keeps the others from running a half-written
// binary or building it too.
func sharedBuild(ctx context.Context, shared, pkg string) (string, error) {
	dir := filepath.Join(shared, filepath.FromSlash(pkg))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("creating %s: %w", dir, err)
	}
	lock, err := os.OpenFile(dir+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", fmt.Errorf("opening the build lock of %s: %w", pkg, err)
	}
	// Closing the file releases the lock.
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return "", fmt.Errorf("locking the build of %s: %w", pkg, err)
	}
	bin := filepath.Join(dir, path.Base(pkg))
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	// Built aside and renamed, so that a program killed while building
	// leaves no half-written binary for the next.
	partial, err := os.MkdirTemp(dir, ".build-")
	if err != nil {
		return "", fmt.Errorf("creating a folder to build %s in: %w", pkg, err)
	}
	defer os.RemoveAll(partial)
	built, err := buildInto(ctx, partial, pkg)
	if err != nil {
		return "", err
	}
	if err := os.Rename(built, bin); err != nil {
		return "", fmt.Errorf("moving the build of %s into place: %w", pkg, err)
	}
	return bin, nil
}

// buildInto builds the package pkg (cleaned by modulePackage) into dir.
func buildInto(ctx context.Context, dir, pkg string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("creating %s: %w", dir, err)
	}
	bin := filepath.Join(dir, path.Base(pkg))
	ctx, cancel := context.WithTimeout(ctx, buildTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./"+pkg)
	cmd.Dir = root
	// The go command of the tree, never one it would download.
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s: %w\n%s", pkg, err, out)
	}
	return bin, nil
}

// removeBuilds removes what programBuild built, when Main ends; a Build
// after it builds into its test's folder.
func removeBuilds() error {
	builds.mu.Lock()
	defer builds.mu.Unlock()
	builds.main = false
	builds.bins = nil
	if builds.dir == "" {
		return nil
	}
	if err := os.RemoveAll(builds.dir); err != nil {
		return fmt.Errorf("removing the built commands: %w", err)
	}
	builds.dir = ""
	return nil
}
