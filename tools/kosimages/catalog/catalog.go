package catalog

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/kos-sdn/kos/tools/images"
)

// Registry is the registry part of every KOS image's name. Nothing is pushed
// there or pulled from it: nodes get the images by import.
const Registry = "kos.example.com"

// The names of the KOS images, between Registry and the tag.
const (
	APIServer         = "kos-apiserver"
	ControllerManager = "kos-controller-manager"
	Agent             = "kos-agent"
	Etcd              = "etcd"
)

// Components are the images of this module's commands. Each is shipped by
// the addon of the same name and tagged with that addon's version.
var Components = []string{APIServer, ControllerManager, Agent}

// module is the path of this module, whose commands the images hold.
const module = "github.com/kos-sdn/kos"

// Image says what one component image holds.
type Image struct {
	// Name is the image's name, one of Components.
	Name string
	// Packages are main packages of this module, built into images.BinDir;
	// the first is the entrypoint.
	Packages []string
	// HostPrograms are programs of the building machine, copied at their
	// host paths with the shared libraries they load.
	HostPrograms []string
	// HostFiles are data files of the building machine, copied at their
	// host paths.
	HostFiles []string
}

// Spec returns what the component image name holds.
func Spec(name string) (Image, error) {
	switch name {
	case APIServer:
		// kos-pki is the init container of the etcd and kos-apiserver
		// pods, and kos-etcd-backup the backup CronJob of kos-etcd (from
		// 0.3.0); one image serves them all.
		return Image{Name: name, Packages: []string{module + "/cmd/kos-apiserver", module + "/cmd/kos-pki", module + "/cmd/kos-etcd-backup"}}, nil
	case ControllerManager:
		return Image{Name: name, Packages: []string{module + "/cmd/kos-controller-manager"}}, nil
	case Agent:
		// The agent programs Open vSwitch through its command-line
		// clients. From 0.2.0 the pod runs the node's Open vSwitch too,
		// in a container of its own: kos-ovs runs the daemons, and
		// creates their database from the schema with ovsdb-tool, so
		// that nodes need no Open vSwitch package. kos-cni is the CNI
		// plugin the pod's init container installs on the node
		// (kos-cni install /host/opt/cni/bin/kos); it is static, so it
		// runs on the host as it is.
		return Image{
			Name:         name,
			Packages:     []string{module + "/cmd/kos-agent", module + "/cmd/kos-ovs", module + "/cmd/kos-cni"},
			HostPrograms: []string{"ovs-vsctl", "ovs-ofctl", "ovs-appctl", "ovsdb-server", "ovs-vswitchd", "ovsdb-tool"},
			HostFiles:    []string{"/usr/share/openvswitch/vswitch.ovsschema"},
		}, nil
	}
	return Image{}, fmt.Errorf("no component image %q (known: %s)", name, strings.Join(Components, ", "))
}

// Programs returns the paths, inside the image, of the programs it holds:
// its commands in images.BinDir, then its host programs where this machine
// has them.
func (img Image) Programs() ([]string, error) {
	var programs []string
	for _, pkg := range img.Packages {
		programs = append(programs, path.Join(images.BinDir, path.Base(pkg)))
	}
	for _, p := range img.HostPrograms {
		abs, err := exec.LookPath(p)
		if err != nil {
			return nil, fmt.Errorf("image %s needs %s from this machine: %w", img.Name, p, err)
		}
		programs = append(programs, abs)
	}
	return programs, nil
}

// Tag returns the full tag of image name at version, such as
// kos.example.com/kos-agent:0.1.0.
func Tag(name, version string) string {
	return Registry + "/" + name + ":" + version
}

// Options say what to build.
type Options struct {
	// Versions tag the component images: one version for each of
	// Components, by name.
	Versions map[string]string
	// Etcd is the etcd binary (tools/etcd/build.sh builds it); its
	// version, as `etcd --version` says, tags the etcd image.
	Etcd string
	// WorkDir receives the Go binaries; it must stay until the images are
	// written.
	WorkDir string
}

// Build builds every KOS image and the pause image, and returns them by tag.
func Build(ctx context.Context, opts Options) (map[string]v1.Image, error) {
	var errs []error
	for _, name := range Components {
		if opts.Versions[name] == "" {
			errs = append(errs, fmt.Errorf("no version for image %s", name))
		}
	}
	if opts.Etcd == "" {
		errs = append(errs, errors.New("no etcd binary"))
	}
	if opts.WorkDir == "" {
		errs = append(errs, errors.New("no work folder"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("building the KOS images: %w", err)
	}

	// One go build for every command: they share most of their packages.
	var specs []Image
	var pkgs []string
	for _, name := range Components {
		spec, err := Spec(name)
		if err != nil {
			return nil, err
		}
		specs = append(specs, spec)
		pkgs = append(pkgs, spec.Packages...)
	}
	goOpts := images.GoOptions{OutDir: filepath.Join(opts.WorkDir, "bin")}
	built, err := images.BuildGo(ctx, goOpts, pkgs...)
	if err != nil {
		return nil, err
	}
	binaries := map[string]images.File{}
	for i, pkg := range pkgs {
		binaries[pkg] = built[i]
	}

	tagged := map[string]v1.Image{}
	for _, spec := range specs {
		img, err := buildComponent(ctx, spec, binaries)
		if err != nil {
			return nil, err
		}
		tagged[Tag(spec.Name, opts.Versions[spec.Name])] = img
	}

	version, err := EtcdVersion(ctx, opts.Etcd)
	if err != nil {
		return nil, err
	}
	etcd, err := etcdImage(opts.Etcd)
	if err != nil {
		return nil, err
	}
	tagged[Tag(Etcd, version)] = etcd

	pause, err := images.Pause(ctx, goOpts)
	if err != nil {
		return nil, fmt.Errorf("building the pause image: %w", err)
	}
	tagged[images.PauseTag] = pause
	return tagged, nil
}

// buildComponent packs a component image: the host programs and files in a
// layer of their own, which stays the same across versions of the commands,
// then the commands.
func buildComponent(ctx context.Context, spec Image, binaries map[string]images.File) (v1.Image, error) {
	var layers []v1.Layer
	if len(spec.HostPrograms)+len(spec.HostFiles) > 0 {
		files, err := images.HostBinaries(ctx, spec.HostPrograms...)
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", spec.Name, err)
		}
		for _, f := range spec.HostFiles {
			if _, err := os.Stat(f); err != nil {
				return nil, fmt.Errorf("image %s needs %s from this machine: %w", spec.Name, f, err)
			}
			files = append(files, images.File{Path: f, Source: f, Mode: 0o644})
		}
		layer, err := images.Layer(files)
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", spec.Name, err)
		}
		layers = append(layers, layer)
	}
	var files []images.File
	for _, pkg := range spec.Packages {
		files = append(files, binaries[pkg])
	}
	layer, err := images.Layer(files)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", spec.Name, err)
	}
	layers = append(layers, layer)
	cfg := images.Config{
		Entrypoint: []string{files[0].Path},
		Labels:     map[string]string{"org.opencontainers.image.title": spec.Name},
	}
	img, err := images.New(cfg, layers...)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", spec.Name, err)
	}
	return img, nil
}

// etcdImage packs the etcd binary, a static program, as the entrypoint.
func etcdImage(binary string) (v1.Image, error) {
	bin := path.Join(images.BinDir, "etcd")
	layer, err := images.Layer([]images.File{{Path: bin, Source: binary, Mode: 0o755}})
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", Etcd, err)
	}
	img, err := images.New(images.Config{
		Entrypoint: []string{bin},
		Labels:     map[string]string{"org.opencontainers.image.title": Etcd},
	}, layer)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", Etcd, err)
	}
	return img, nil
}

// etcdVersionLine is the line of `etcd --version` that names the version.
var etcdVersionLine = regexp.MustCompile(`(?m)^etcd Version: (\S+)$`)

// EtcdVersion returns the version the etcd binary reports, such as 3.6.4.
func EtcdVersion(ctx context.Context, binary string) (string, error) {
	out, err := exec.CommandContext(ctx, binary, "--version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("asking %s for its version (%s): %w", binary, strings.TrimSpace(string(out)), err)
	}
	m := etcdVersionLine.FindSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("%s --version names no version: %q", binary, out)
	}
	return string(m[1]), nil
}

// Tags returns the tags Build makes for these versions and etcd version,
// sorted.
func Tags(versions map[string]string, etcdVersion string) []string {
	tags := []string{Tag(Etcd, etcdVersion), images.PauseTag}
	for _, name := range Components {
		tags = append(tags, Tag(name, versions[name]))
	}
	slices.Sort(tags)
	return tags
}
