package release

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/kos-sdn/kos/tools/kosimages/catalog"
)

// kosImage is an image name of the KOS registry in a manifest: not part of
// a longer name (such as the label key role.kos.example.com/workload), with
// a repository path and a tag. Group 1 is what precedes it, 2 the image.
var kosImage = regexp.MustCompile(`(^|[^A-Za-z0-9.-])(` + regexp.QuoteMeta(catalog.Registry) + `/[a-z0-9]+(?:[._/-][a-z0-9]+)*:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})`)

// checkRegistry checks a registry to publish for: a repository prefix such
// as registry.example.com/kos, without a tag.
func checkRegistry(registry string) error {
	if registry == "" {
		return errors.New("no registry")
	}
	if strings.HasPrefix(registry, catalog.Registry+"/") || registry == catalog.Registry {
		return fmt.Errorf("registry %q: give the registry the images were pushed to, not %s", registry, catalog.Registry)
	}
	if _, err := name.NewRepository(strings.TrimSuffix(registry, "/")+"/image", name.StrictValidation); err != nil {
		return fmt.Errorf("registry %q: %w", registry, err)
	}
	return nil
}

// imageNamer renames the KOS images of manifests, remembering each.
type imageNamer struct {
	opts Options
	// written maps each image seen to its new name.
	written map[string]string
	pinned  map[string]bool
}

func newImageNamer(opts Options) *imageNamer {
	return &imageNamer{opts: opts, written: map[string]string{}, pinned: map[string]bool{}}
}

// rewrite renames every KOS image of a manifest.
func (n *imageNamer) rewrite(ctx context.Context, data []byte) ([]byte, error) {
	var errs []error
	out := kosImage.ReplaceAllFunc(data, func(m []byte) []byte {
		sub := kosImage.FindSubmatch(m)
		renamed, err := n.rename(ctx, string(sub[2]))
		if err != nil {
			errs = append(errs, err)
			return m
		}
		return append(append([]byte(nil), sub[1]...), renamed...)
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// rename returns the new name of image (kos.example.com/NAME:TAG).
func (n *imageNamer) rename(ctx context.Context, image string) (string, error) {
	if got, ok := n.written[image]; ok {
		return got, nil
	}
	renamed := strings.TrimSuffix(n.opts.Registry, "/") + strings.TrimPrefix(image, catalog.Registry)
	if pinned, ok := n.opts.Digests[image]; ok {
		if !strings.Contains(pinned, "@sha256:") {
			return "", fmt.Errorf("the digest given for %s, %q, is no reference pinned by digest", image, pinned)
		}
		renamed = pinned
		n.pinned[image] = true
	} else if n.opts.Resolve {
		digest, err := n.resolve(ctx, renamed)
		if err != nil {
			return "", err
		}
		if digest != "" {
			renamed += "@" + digest
			n.pinned[image] = true
		}
	}
	n.written[image] = renamed
	return renamed, nil
}

// resolve asks the registry for the digest of ref; "" when it has no such
// image.
func (n *imageNamer) resolve(ctx context.Context, ref string) (string, error) {
	opts := []name.Option{name.StrictValidation}
	if n.opts.Insecure {
		opts = append(opts, name.Insecure)
	}
	tag, err := name.NewTag(ref, opts...)
	if err != nil {
		return "", fmt.Errorf("image %s: %w", ref, err)
	}
	desc, err := remote.Head(tag, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain))
	var terr *transport.Error
	if errors.As(err, &terr) && terr.StatusCode == http.StatusNotFound {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("resolving %s: %w", ref, err)
	}
	return desc.Digest.String(), nil
}

// unpinned lists the images written by tag only, sorted.
func (n *imageNamer) unpinned() []string {
	var out []string
	for _, image := range slices.Sorted(maps.Keys(n.written)) {
		if !n.pinned[image] {
			out = append(out, image)
		}
	}
	return out
}
