package release

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// RegistryResolver returns a Resolver that asks each image's registry for
// its digest, with the credentials of ~/.docker/config.json; insecure
// allows plain http (always allowed for loopback and private addresses).
// It asks once per reference.
func RegistryResolver(ctx context.Context, insecure bool) Resolver {
	seen := map[string]string{}
	return func(ref string) (string, error) {
		if d, ok := seen[ref]; ok {
			return d, nil
		}
		opts := []name.Option{name.StrictValidation}
		if insecure {
			opts = append(opts, name.Insecure)
		}
		tag, err := name.NewTag(ref, opts...)
		if err != nil {
			return "", fmt.Errorf("image %s: %w", ref, err)
		}
		desc, err := remote.Head(tag, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain))
		var terr *transport.Error
		switch {
		case errors.As(err, &terr) && terr.StatusCode == http.StatusNotFound:
			seen[ref] = ""
			return "", nil
		case err != nil:
			return "", fmt.Errorf("resolving %s: %w", ref, err)
		}
		seen[ref] = desc.Digest.String()
		return seen[ref], nil
	}
}
