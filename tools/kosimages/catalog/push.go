package catalog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/kos-sdn/kos/tools/images"
)

// Pause is the name of the pause image (images.PauseTag) among the images
// Push pushes.
const Pause = "pause"

// Platforms are the platforms Push builds for by default: every image that
// holds only Go binaries is cross-compiled for each.
var Platforms = []string{"linux/amd64", "linux/arm64"}

// PushOptions say what to build and where to push it.
type PushOptions struct {
	// Repository is where the images go, "HOST[:PORT][/PREFIX]": image NAME
	// is pushed as Repository/NAME:TAG, with the tag Build gives it.
	Repository string
	// Insecure allows plain http (and unverified https) for a registry of
	// any name. Without it go-containerregistry still speaks plain http to
	// a registry on a loopback or private (RFC 1918) address.
	Insecure bool
	// Versions tag the component images: one version for each of
	// Components, by name (as Options.Versions).
	Versions map[string]string
	// Etcd is the etcd binary for this machine's architecture (as
	// Options.Etcd); its version tags the etcd image.
	Etcd string
	// EtcdByArch are etcd binaries for other architectures, by GOARCH. One
	// missing for a platform is built from EtcdModule.
	EtcdByArch map[string]string
	// EtcdModule is the Go module etcd is built from for other
	// architectures; "" means this checkout's tools/etcd, which builds Etcd.
	EtcdModule string
	// Images are the names of the images to push (of Components, Etcd and
	// Pause); nil means all of them.
	Images []string
	// Platforms are the "linux/ARCH" platforms to build for; nil means
	// Platforms. An image that copies programs of this machine (kos-agent)
	// is built only for this machine's platform.
	Platforms []string
	// WorkDir receives the binaries; it may be removed once Push returns.
	WorkDir string
	// Progress, when set, is told about each image pushed.
	Progress io.Writer
}

// Push builds the KOS images (those of Build, or opts.Images) for
// opts.Platforms and pushes each to opts.Repository as an image index
// listing one image per platform. It returns, for the tag of each image as
// Build names it (kos.example.com/NAME:TAG), the pushed reference pinned by
// digest: Repository/NAME:TAG@sha256:... .
func Push(ctx context.Context, opts PushOptions) (map[string]string, error) {
	plan, err := planPush(opts)
	if err != nil {
		return nil, fmt.Errorf("pushing the KOS images: %w", err)
	}
	indexes, err := buildIndexes(ctx, opts, plan)
	if err != nil {
		return nil, err
	}
	pushed := map[string]string{}
	for _, p := range plan.images {
		ref, err := name.NewTag(opts.Repository+"/"+p.name+":"+p.version, nameOptions(opts.Insecure)...)
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", p.name, err)
		}
		idx := indexes[p.name]
		if err := remote.WriteIndex(ref, idx, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
			return nil, fmt.Errorf("pushing %s: %w", ref, err)
		}
		digest, err := idx.Digest()
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", p.name, err)
		}
		pinned := ref.String() + "@" + digest.String()
		pushed[p.tag] = pinned
		if opts.Progress != nil {
			fmt.Fprintf(opts.Progress, "pushed %s (%s)\n", pinned, strings.Join(p.platforms, ", "))
		}
	}
	return pushed, nil
}

// nameOptions are the options image references are parsed with.
func nameOptions(insecure bool) []name.Option {
	opts := []name.Option{name.StrictValidation}
	if insecure {
		opts = append(opts, name.Insecure)
	}
	return opts
}

// pushPlan is what Push builds: each image with the platforms it is built
// for, and each architecture with the Go packages built for it.
type pushPlan struct {
	images []pushImage
	// packages are the Go main packages to build, by GOARCH.
	packages map[string][]string
}

type pushImage struct {
	name, version string
	// tag is the image's tag as Build names it.
	tag string
	// spec is the component's; zero for etcd and pause.
	spec      Image
	platforms []string
}

// HostPlatform is this machine's platform, the only one an image of host
// programs is built for.
var HostPlatform = "linux/" + runtime.GOARCH

// planPush checks opts and decides what to build for which platform.
func planPush(opts PushOptions) (*pushPlan, error) {
	var errs []error
	if opts.Repository == "" {
		errs = append(errs, errors.New("no repository"))
	} else if _, err := name.NewRepository(opts.Repository+"/"+Pause, nameOptions(opts.Insecure)...); err != nil {
		errs = append(errs, fmt.Errorf("repository %q: %w", opts.Repository, err))
	}
	if opts.WorkDir == "" {
		errs = append(errs, errors.New("no work folder"))
	}
	platforms := opts.Platforms
	if platforms == nil {
		platforms = Platforms
	}
	for _, p := range platforms {
		if os, arch, ok := strings.Cut(p, "/"); !ok || os != "linux" || arch == "" || strings.Contains(arch, "/") {
			errs = append(errs, fmt.Errorf("platform %q: want linux/ARCH", p))
		}
	}
	all := append(slices.Clone(Components), Etcd, Pause)
	selected := opts.Images
	if selected == nil {
		selected = all
	}
	plan := &pushPlan{packages: map[string][]string{}}
	for _, n := range selected {
		p := pushImage{name: n, platforms: platforms}
		switch {
		case slices.Contains(Components, n):
			spec, err := Spec(n)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			p.spec, p.version = spec, opts.Versions[n]
			if p.version == "" {
				errs = append(errs, fmt.Errorf("no version for image %s", n))
			}
			if len(spec.HostPrograms) > 0 {
				// Programs of this machine run only on its architecture.
				if !slices.Contains(platforms, HostPlatform) {
					errs = append(errs, fmt.Errorf("image %s copies programs of this machine, so it is built only for %s, which is not among the platforms %v", n, HostPlatform, platforms))
				}
				p.platforms = []string{HostPlatform}
			}
			for _, platform := range p.platforms {
				arch := path.Base(platform)
				plan.packages[arch] = append(plan.packages[arch], spec.Packages...)
			}
		case n == Etcd:
			// Its version is the binary's, asked when it is built.
			if opts.Etcd == "" {
				errs = append(errs, errors.New("no etcd binary"))
			}
		case n == Pause:
			pauseName, pauseVersion, _ := strings.Cut(strings.TrimPrefix(images.PauseTag, Registry+"/"), ":")
			p.name, p.version = pauseName, pauseVersion
		default:
			errs = append(errs, fmt.Errorf("no image %q (known: %s)", n, strings.Join(all, ", ")))
			continue
		}
		plan.images = append(plan.images, p)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return plan, nil
}

// buildIndexes builds every planned image for each of its platforms and
// returns one index per image name. It completes the plan's etcd version
// and tags.
func buildIndexes(ctx context.Context, opts PushOptions, plan *pushPlan) (map[string]v1.ImageIndex, error) {
	// One go build per architecture: the commands share most packages.
	binaries := map[string]map[string]images.File{}
	for _, arch := range slices.Sorted(maps.Keys(plan.packages)) {
		pkgs := slices.Compact(slices.Sorted(slices.Values(plan.packages[arch])))
		built, err := images.BuildGo(ctx, images.GoOptions{OutDir: filepath.Join(opts.WorkDir, "bin-"+arch), Arch: arch}, pkgs...)
		if err != nil {
			return nil, err
		}
		binaries[arch] = map[string]images.File{}
		for i, pkg := range pkgs {
			binaries[arch][pkg] = built[i]
		}
	}

	indexes := map[string]v1.ImageIndex{}
	for i := range plan.images {
		p := &plan.images[i]
		byArch := map[string]v1.Image{}
		for _, platform := range p.platforms {
			arch := path.Base(platform)
			img, err := buildFor(ctx, opts, p, arch, binaries[arch])
			if err != nil {
				return nil, err
			}
			byArch[arch] = img
		}
		if p.name == Etcd {
			version, err := EtcdVersion(ctx, opts.Etcd)
			if err != nil {
				return nil, err
			}
			p.version = version
		}
		p.tag = Registry + "/" + p.name + ":" + p.version
		idx, err := index(byArch)
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", p.name, err)
		}
		indexes[p.name] = idx
	}
	return indexes, nil
}

// buildFor builds image p for arch.
func buildFor(ctx context.Context, opts PushOptions, p *pushImage, arch string, binaries map[string]images.File) (v1.Image, error) {
	var img v1.Image
	var err error
	switch p.name {
	case Etcd:
		binary := opts.Etcd
		if arch != runtime.GOARCH {
			if binary, err = etcdFor(ctx, opts, arch); err != nil {
				return nil, err
			}
		}
		img, err = etcdImage(binary)
	case Pause:
		img, err = images.Pause(ctx, images.GoOptions{OutDir: filepath.Join(opts.WorkDir, "pause-"+arch), Arch: arch})
	default:
		img, err = buildComponent(ctx, p.spec, binaries)
	}
	if err != nil {
		return nil, err
	}
	return withArch(img, arch)
}

// withArch sets the architecture an image's config claims: Build makes
// images for this machine's.
func withArch(img v1.Image, arch string) (v1.Image, error) {
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("reading an image config: %w", err)
	}
	if cf.Architecture == arch && cf.OS == "linux" {
		return img, nil
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", arch
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("setting the architecture of an image: %w", err)
	}
	return img, nil
}

// index lists the images, one per architecture, in a manifest list of the
// same (docker) media types as the images themselves.
func index(byArch map[string]v1.Image) (v1.ImageIndex, error) {
	idx := mutate.IndexMediaType(empty.Index, types.DockerManifestList)
	for _, arch := range slices.Sorted(maps.Keys(byArch)) {
		img := byArch[arch]
		mt, err := img.MediaType()
		if err != nil {
			return nil, err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add: img,
			Descriptor: v1.Descriptor{
				MediaType: mt,
				Platform:  &v1.Platform{OS: "linux", Architecture: arch},
			},
		})
	}
	return idx, nil
}

// etcdFor returns the etcd binary for arch: opts.EtcdByArch's, else one
// built from opts.EtcdModule (the module tools/etcd/build.sh builds Etcd
// from, so that both are the same version) into the work folder.
func etcdFor(ctx context.Context, opts PushOptions, arch string) (string, error) {
	if binary := opts.EtcdByArch[arch]; binary != "" {
		return binary, nil
	}
	module := opts.EtcdModule
	if module == "" {
		root := images.ModuleRoot()
		if root == "" {
			return "", fmt.Errorf("no etcd binary for %s, and no checkout to build one from (set EtcdModule)", arch)
		}
		module = filepath.Join(root, "tools", "etcd")
	}
	out := filepath.Join(opts.WorkDir, "etcd-"+arch, "etcd")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w", "-o", out, "go.etcd.io/etcd/server/v3")
	cmd.Dir = module
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local", "GOFLAGS=-mod=mod", "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	if said, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building etcd for %s in %s (%s): %w", arch, module, strings.TrimSpace(string(said)), err)
	}
	return out, nil
}
