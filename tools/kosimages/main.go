// Command kosimages builds every KOS image without a container engine (see
// package tools/kosimages/catalog), writes them into one docker-format
// tarball and, when asked, imports them into a node's containerd, or pushes
// them to a registry as multi-platform images:
//
//	go run ./tools/kosimages [--out .cache/images/kos.tar] [--import CONTAINERD_ADDRESS|localenv]
//	go run ./tools/kosimages --push REGISTRY[/PREFIX] [--insecure] [--platform linux/amd64,linux/arm64]
//
// The component images are tagged with the versions of the newest releases
// in addons/, so that the manifests and the images agree; --version overrides
// one. --import localenv imports them into the node of the local cluster
// (go run ./tools/localenv up --cluster).
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/kos-sdn/kos/tools/cluster"
	"github.com/kos-sdn/kos/tools/images"
	"github.com/kos-sdn/kos/tools/kosimages/catalog"
	"github.com/kos-sdn/kos/tools/testenv"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// config is the command line, parsed.
type config struct {
	root     string
	out      string
	addons   string
	etcd     string
	address  string
	versions map[string]string
	// push is the repository to push to, "" for the tarball.
	push      string
	insecure  bool
	platforms string
}

// versionFlags collects --version NAME=VERSION.
type versionFlags map[string]string

func (v versionFlags) String() string {
	var pairs []string
	for _, k := range slices.Sorted(maps.Keys(v)) {
		pairs = append(pairs, k+"="+v[k])
	}
	return strings.Join(pairs, ",")
}

func (v versionFlags) Set(s string) error {
	name, version, ok := strings.Cut(s, "=")
	if !ok || version == "" {
		return fmt.Errorf("want IMAGE=VERSION, got %q", s)
	}
	if !slices.Contains(catalog.Components, name) {
		return fmt.Errorf("no image %q (known: %s)", name, strings.Join(catalog.Components, ", "))
	}
	v[name] = version
	return nil
}

// run runs the command and returns its exit code: 0 when done, 1 when a step
// failed, 2 for a wrong command line.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		return 2
	}
	if cfg.push != "" {
		err = push(ctx, cfg, stdout)
	} else {
		err = build(ctx, cfg, stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "kosimages: %v\n", err)
		return 1
	}
	return 0
}

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	cfg := &config{versions: map[string]string{}}
	flags := flag.NewFlagSet("kosimages", flag.ContinueOnError)
	flags.SetOutput(stderr)
	flags.Usage = func() {
		fmt.Fprint(flags.Output(), `Usage: kosimages [flags]

Builds the KOS images (kos-apiserver with kos-pki and kos-etcd-backup,
kos-controller-manager, kos-agent with the Open vSwitch clients, etcd, and the
pause image) without a container engine, into one docker-format tarball that
ctr, docker and podman load.

With --push REGISTRY[/PREFIX] it writes no tarball: it pushes every image to
REGISTRY/PREFIX/NAME:TAG instead, each as an image index (a multi-platform
image). The images that hold only Go binaries (kos-apiserver,
kos-controller-manager, etcd, pause) are cross-compiled for every --platform;
kos-agent, which carries this machine's Open vSwitch programs, is built for
this machine's platform only (its index lists that one). Plain http is used
for a registry on a loopback or private (RFC 1918) address, and for any
other with --insecure. Credentials come from the docker config
(~/.docker/config.json), as docker login writes it. It prints each pushed
image pinned by digest.

Flags:
`)
		flags.PrintDefaults()
	}
	flags.StringVar(&cfg.root, "root", "", "the repository root; empty means the one this command is built from, else the nearest above the working directory")
	flags.StringVar(&cfg.out, "out", "", "the tarball to write; empty means ROOT/.cache/images/kos.tar")
	flags.StringVar(&cfg.addons, "addons", "", "the addon folder whose newest releases give the component images their versions; empty means ROOT/addons")
	flags.StringVar(&cfg.etcd, "etcd", "", "the etcd binary to pack; empty means the one tools/etcd/build.sh builds")
	flags.StringVar(&cfg.address, "import", "", "the socket of a containerd to import the images into (namespace k8s.io), or "+importLocalenv+" for the node of the local cluster in ROOT/.cache/localenv; empty imports nothing")
	flags.StringVar(&cfg.push, "push", "", "REGISTRY[/PREFIX]: push the images there instead of writing a tarball")
	flags.BoolVar(&cfg.insecure, "insecure", false, "with --push: allow plain http (and unverified https) to the registry")
	flags.StringVar(&cfg.platforms, "platform", strings.Join(catalog.Platforms, ","), "with --push: the comma-separated platforms to build the images of Go binaries for")
	flags.Var(versionFlags(cfg.versions), "version", "IMAGE=VERSION: tag a component image with VERSION instead of its addon's newest version (repeatable)")
	if err := flags.Parse(args); err != nil {
		return nil, err
	}
	if flags.NArg() > 0 {
		fmt.Fprintf(stderr, "kosimages: unexpected arguments %q\n", flags.Args())
		flags.Usage()
		return nil, errors.New("unexpected arguments")
	}
	if cfg.push != "" && cfg.address != "" {
		fmt.Fprintln(stderr, "kosimages: --push and --import exclude each other")
		return nil, errors.New("--push with --import")
	}
	return cfg, nil
}

// complete fills in the defaults that depend on the repository root.
func (cfg *config) complete() error {
	if cfg.root == "" {
		root, err := testenv.RepoRoot()
		if err != nil {
			return fmt.Errorf("%w (or pass --root)", err)
		}
		cfg.root = root
	}
	if cfg.out == "" {
		cfg.out = filepath.Join(cfg.root, ".cache", "images", "kos.tar")
	}
	if cfg.addons == "" {
		cfg.addons = filepath.Join(cfg.root, "addons")
	}
	return nil
}

// push builds the images for every platform and pushes them, saying what it
// pushed.
func push(ctx context.Context, cfg *config, stdout io.Writer) error {
	began := time.Now()
	if err := cfg.complete(); err != nil {
		return err
	}
	versions, err := resolveVersions(cfg.addons, cfg.versions)
	if err != nil {
		return err
	}
	if cfg.etcd == "" {
		if cfg.etcd, err = buildEtcd(ctx, cfg.root); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Join(cfg.root, ".cache"), 0o755); err != nil {
		return fmt.Errorf("creating the cache folder: %w", err)
	}
	work, err := os.MkdirTemp(filepath.Join(cfg.root, ".cache"), ".kosimages-push-")
	if err != nil {
		return fmt.Errorf("creating a work folder: %w", err)
	}
	defer os.RemoveAll(work)
	pushed, err := catalog.Push(ctx, catalog.PushOptions{
		Repository: strings.TrimSuffix(cfg.push, "/"),
		Insecure:   cfg.insecure,
		Versions:   versions,
		Etcd:       cfg.etcd,
		EtcdModule: filepath.Join(cfg.root, "tools", "etcd"),
		Platforms:  strings.Split(cfg.platforms, ","),
		WorkDir:    work,
		Progress:   stdout,
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "pushed %d images to %s in %s\n", len(pushed), cfg.push, time.Since(began).Round(100*time.Millisecond))
	return nil
}

// build builds, writes and imports the images, saying what it did.
func build(ctx context.Context, cfg *config, stdout io.Writer) error {
	began := time.Now()
	if err := cfg.complete(); err != nil {
		return err
	}
	versions, err := resolveVersions(cfg.addons, cfg.versions)
	if err != nil {
		return err
	}
	// Where to import, before minutes of building that it could waste.
	if cfg.address == importLocalenv {
		if cfg.address, err = localenvContainerd(cfg.root); err != nil {
			return err
		}
	}
	if cfg.etcd == "" {
		if cfg.etcd, err = buildEtcd(ctx, cfg.root); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Dir(cfg.out), 0o755); err != nil {
		return fmt.Errorf("creating the output folder: %w", err)
	}
	work, err := os.MkdirTemp(filepath.Dir(cfg.out), ".kosimages-")
	if err != nil {
		return fmt.Errorf("creating a work folder: %w", err)
	}
	defer os.RemoveAll(work)

	tagged, err := catalog.Build(ctx, catalog.Options{Versions: versions, Etcd: cfg.etcd, WorkDir: work})
	if err != nil {
		return err
	}
	// Written aside and renamed, so that a failed run leaves the last good
	// tarball in place.
	tmp := filepath.Join(work, "images.tar")
	if err := images.Write(tmp, tagged); err != nil {
		return err
	}
	if err := os.Rename(tmp, cfg.out); err != nil {
		return fmt.Errorf("moving the tarball into place: %w", err)
	}
	for _, tag := range slices.Sorted(maps.Keys(tagged)) {
		fmt.Fprintln(stdout, tag)
	}
	fmt.Fprintf(stdout, "wrote %d images to %s in %s\n", len(tagged), cfg.out, time.Since(began).Round(100*time.Millisecond))
	if cfg.address != "" {
		if err := images.Import(ctx, cfg.address, cfg.out); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "imported them into the containerd at %s\n", cfg.address)
	}
	return nil
}

// importLocalenv is the --import value that names the local cluster's node.
const importLocalenv = "localenv"

// localenvContainerd returns the socket of the containerd of the local
// cluster's node, which tools/localenv runs from ROOT/.cache/localenv.
func localenvContainerd(root string) (string, error) {
	dir := filepath.Join(root, ".cache", "localenv")
	env, err := cluster.Attach(dir)
	if err != nil {
		return "", fmt.Errorf("finding the local cluster (start it with go run ./tools/localenv up --cluster): %w", err)
	}
	if len(env.Nodes) == 0 {
		return "", fmt.Errorf("the local environment in %s runs no node: start it with go run ./tools/localenv up --cluster", dir)
	}
	return env.Nodes[0].ContainerdAddress, nil
}

// resolveVersions returns the versions to tag the component images with: the
// overrides, and for the others their addons' newest versions. The addons are
// read only when an image needs them.
func resolveVersions(addons string, overrides map[string]string) (map[string]string, error) {
	versions := maps.Clone(overrides)
	for _, name := range catalog.Components {
		if versions[name] != "" {
			continue
		}
		fromAddons, err := catalog.AddonVersions(addons)
		if err != nil {
			return nil, fmt.Errorf("versioning the images (or give each with --version): %w", err)
		}
		for _, name := range catalog.Components {
			if versions[name] == "" {
				versions[name] = fromAddons[name]
			}
		}
		break
	}
	return versions, nil
}

// buildEtcd builds etcd with tools/etcd/build.sh (once; it caches the
// binary) and returns its path.
func buildEtcd(ctx context.Context, root string) (string, error) {
	script := filepath.Join(root, "tools", "etcd", "build.sh")
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", script)
	cmd.Stdout = &out
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building etcd with %s: %w", script, err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	dir := strings.TrimSpace(lines[len(lines)-1])
	if dir == "" {
		return "", fmt.Errorf("%s printed no folder", script)
	}
	return filepath.Join(dir, "etcd"), nil
}
