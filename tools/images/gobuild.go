package images

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/kos-sdn/kos/tools/reporoot"
)

// GoOptions say how to build Go binaries.
type GoOptions struct {
	// OutDir receives the binaries; it must be set, and the files must stay
	// there until the layers holding them are written.
	OutDir string
	// Dir is the folder `go build` runs in, which decides the module the
	// packages are resolved in; "" means the root of the module this
	// package's source is in, else the working directory.
	Dir string
	// Arch is the GOARCH to build for; "" means this machine's.
	Arch string
	// LDFlags are extra linker flags, such as -X settings.
	LDFlags string
}

// BinDir is the folder of an image that GoImage puts binaries in.
const BinDir = "/usr/local/bin"

// BuildGo builds static linux binaries (CGO_ENABLED=0, stripped, -trimpath)
// of the main packages pkgs, such as github.com/kos-sdn/kos/cmd/kos-agent or
// ./cmd/kos-agent relative to Dir, into OutDir. It returns one File per
// package, at BinDir/<last element of the package path>.
func BuildGo(ctx context.Context, opts GoOptions, pkgs ...string) ([]File, error) {
	if opts.OutDir == "" {
		return nil, fmt.Errorf("building %s: no output folder", strings.Join(pkgs, " "))
	}
	if len(pkgs) == 0 {
		return nil, nil
	}
	out, err := filepath.Abs(opts.OutDir)
	if err != nil {
		return nil, fmt.Errorf("resolving %s: %w", opts.OutDir, err)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", out, err)
	}
	arch := opts.Arch
	if arch == "" {
		arch = runtime.GOARCH
	}
	ldflags := strings.TrimSpace("-s -w " + opts.LDFlags)
	// -o with a trailing slash names a folder, even for one package.
	args := append([]string{"build", "-trimpath", "-ldflags", ldflags, "-o", out + string(filepath.Separator)}, pkgs...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = opts.Dir
	if cmd.Dir == "" {
		cmd.Dir = moduleRoot()
	}
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	if said, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build %s (%s): %w", strings.Join(pkgs, " "), strings.TrimSpace(string(said)), err)
	}
	files := make([]File, 0, len(pkgs))
	for _, pkg := range pkgs {
		bin := path.Base(strings.TrimSuffix(pkg, "/"))
		files = append(files, File{Path: path.Join(BinDir, bin), Source: filepath.Join(out, bin), Mode: 0o755})
	}
	return files, nil
}

// GoImage builds the main packages (see BuildGo) and returns an image holding
// them in BinDir, in one layer, under cfg. An empty cfg.Entrypoint becomes the
// first package's binary.
func GoImage(ctx context.Context, opts GoOptions, cfg Config, pkgs ...string) (v1.Image, error) {
	if len(pkgs) == 0 {
		return nil, fmt.Errorf("an image of Go binaries needs at least one package")
	}
	files, err := BuildGo(ctx, opts, pkgs...)
	if err != nil {
		return nil, err
	}
	layer, err := Layer(files)
	if err != nil {
		return nil, err
	}
	if len(cfg.Entrypoint) == 0 {
		cfg.Entrypoint = []string{files[0].Path}
	}
	if cfg.Architecture == "" {
		cfg.Architecture = opts.Arch
	}
	return New(cfg, layer)
}

// moduleRoot is the root of the KOS checkout the program runs from
// (reporoot.Find), else "" (the working directory).
func moduleRoot() string {
	root, err := reporoot.Find()
	if err != nil {
		return ""
	}
	return root
}
