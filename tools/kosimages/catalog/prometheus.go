package catalog

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/kos-sdn/kos/tools/images"
	"github.com/kos-sdn/kos/tools/prombuild"
)

// Prometheus names the Prometheus image that PushPrometheus pushes. It is
// not a KOS image and no manifest names it: kos-monitoring names the
// upstream quay.io/prometheus/prometheus, and a cluster that cannot pull
// that one is given this one by a release configuration's images
// (kos-release).
const Prometheus = "prometheus"

// PrometheusProgram is where the Prometheus image holds its program, and its
// entrypoint, as in the upstream image.
const PrometheusProgram = "/bin/prometheus"

// prometheusVersionLine is the line of `prometheus --version` that names
// the version, such as "prometheus, version 3.16.0 (branch: ...)".
var prometheusVersionLine = regexp.MustCompile(`(?m)^prometheus, version ([0-9]+\.[0-9]+\.[0-9]+(?:-[0-9A-Za-z.]+)?)`)

// PrometheusVersion reads the version out of `prometheus --version`: the
// upstream version, without a distribution's suffix (Debian's "+ds"),
// which no image tag may hold.
func PrometheusVersion(versionOutput string) (string, error) {
	m := prometheusVersionLine.FindStringSubmatch(versionOutput)
	if m == nil {
		return "", fmt.Errorf("prometheus --version names no version: %q", strings.TrimSpace(versionOutput))
	}
	return m[1], nil
}

// PrometheusBinary returns the host path of the Prometheus the image packs:
// the one tools/prometheus/build.sh builds from the Go module proxy, at the
// version kos-monitoring's manifest runs, static and with Kubernetes
// service discovery (prombuild).
func PrometheusBinary(ctx context.Context) (string, error) {
	return prombuild.Binary(ctx, "prometheus")
}

// PrometheusImage packs the Prometheus PrometheusBinary returns into an
// image, at PrometheusProgram and as its entrypoint, and returns it with
// its version. The program is static, so the image holds nothing else: no
// shell, no web UI assets (the HTTP API, which the tests and Grafana use,
// needs none), no user database (the manifest names the user by number).
func PrometheusImage(ctx context.Context) (v1.Image, string, error) {
	binary, err := PrometheusBinary(ctx)
	if err != nil {
		return nil, "", fmt.Errorf("image %s: %w", Prometheus, err)
	}
	out, err := exec.CommandContext(ctx, binary, "--version").CombinedOutput()
	if err != nil {
		return nil, "", fmt.Errorf("image %s: asking %s for its version (%s): %w", Prometheus, binary, strings.TrimSpace(string(out)), err)
	}
	version, err := PrometheusVersion(string(out))
	if err != nil {
		return nil, "", fmt.Errorf("image %s: %w", Prometheus, err)
	}
	layer, err := images.Layer([]images.File{{Path: PrometheusProgram, Source: binary}})
	if err != nil {
		return nil, "", fmt.Errorf("image %s: %w", Prometheus, err)
	}
	img, err := images.New(images.Config{
		Entrypoint: []string{PrometheusProgram},
		WorkingDir: "/prometheus",
		Labels: map[string]string{
			"org.opencontainers.image.title":   Prometheus,
			"org.opencontainers.image.version": version,
		},
	}, layer)
	if err != nil {
		return nil, "", fmt.Errorf("image %s: %w", Prometheus, err)
	}
	return img, version, nil
}

// PushPrometheus pushes PrometheusImage to repository ("HOST[:PORT][/PREFIX]")
// as repository/prometheus:VERSION and returns that reference pinned by
// digest. Insecure is as PushOptions.Insecure.
func PushPrometheus(ctx context.Context, repository string, insecure bool) (string, error) {
	img, version, err := PrometheusImage(ctx)
	if err != nil {
		return "", err
	}
	ref, err := name.NewTag(strings.TrimSuffix(repository, "/")+"/"+Prometheus+":"+version, nameOptions(insecure)...)
	if err != nil {
		return "", fmt.Errorf("image %s: %w", Prometheus, err)
	}
	if err := remote.Write(ref, img, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return "", fmt.Errorf("pushing %s: %w", ref, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return "", fmt.Errorf("image %s: %w", Prometheus, err)
	}
	return ref.String() + "@" + digest.String(), nil
}
