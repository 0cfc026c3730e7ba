package images

import (
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Config says how a container of an image runs.
type Config struct {
	// Entrypoint is the program and its first arguments.
	Entrypoint []string
	// Cmd holds the default arguments after Entrypoint.
	Cmd []string
	// Env holds NAME=value pairs; DefaultPath is added when none sets PATH.
	Env []string
	// WorkingDir is the working directory; "" means /.
	WorkingDir string
	// User is the user (and group) the process runs as; "" means root.
	User string
	// Labels are the image's labels.
	Labels map[string]string
	// Architecture is the GOARCH the image is for; "" means this machine's.
	Architecture string
}

// DefaultPath is the PATH of an image whose Config sets none.
const DefaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// New returns a linux image of the layers, bottom first, on an empty base.
func New(cfg Config, layers ...v1.Layer) (v1.Image, error) {
	img := empty.Image
	for _, l := range layers {
		var err error
		img, err = mutate.Append(img, mutate.Addendum{
			Layer:   l,
			History: v1.History{CreatedBy: "kos tools/images", Created: v1.Time{Time: epoch}},
		})
		if err != nil {
			return nil, fmt.Errorf("adding a layer: %w", err)
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("reading the image config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS = "linux"
	cf.Architecture = cfg.Architecture
	if cf.Architecture == "" {
		cf.Architecture = runtime.GOARCH
	}
	cf.Created = v1.Time{Time: epoch}
	env := slices.Clone(cfg.Env)
	if !slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "PATH=") }) {
		env = append([]string{DefaultPath}, env...)
	}
	cf.Config = v1.Config{
		Entrypoint: cfg.Entrypoint,
		Cmd:        cfg.Cmd,
		Env:        env,
		WorkingDir: cfg.WorkingDir,
		User:       cfg.User,
		Labels:     maps.Clone(cfg.Labels),
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("setting the image config: %w", err)
	}
	return img, nil
}

// Write writes images, keyed by their tags (such as
// kos.example.com/kos-agent:v0.1.0), into one docker-format tarball at path,
// as `docker save` would; ctr, docker and podman load it.
func Write(path string, tagged map[string]v1.Image) error {
	refs := make(map[name.Reference]v1.Image, len(tagged))
	for _, tag := range slices.Sorted(maps.Keys(tagged)) {
		ref, err := name.NewTag(tag, name.StrictValidation)
		if err != nil {
			return fmt.Errorf("image tag %q: %w", tag, err)
		}
		refs[ref] = tagged[tag]
	}
	if err := tarball.MultiRefWriteToFile(path, refs); err != nil {
		return fmt.Errorf("writing images to %s: %w", path, err)
	}
	return nil
}
