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
)

// Prometheus names the Prometheus image that PushPrometheus pushes. It is
// not a KOS image and no manifest names it: kos-monitoring names the
// upstream quay.io/prometheus/prometheus, and a cluster that cannot pull
// that one is given this one by a release configuration's images
// (kos-release).
const Prometheus = "prometheus"

// PrometheusProgram is the program the Prometheus image runs: Debian's
// package prometheus (tools/deps.sh installs it), linked against the C
// library, which the image carries with it.
const PrometheusProgram = "/usr/bin/prometheus"

// prometheusVersionLine is the line of `prometheus --version` that names
// the version, such as "prometheus, version 2.42.0+ds (branch: ...)".
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

// PrometheusImage packs this machine's Prometheus (PrometheusProgram) and
// the shared libraries it loads into an image for this machine's platform,
// with the program as its entrypoint, and returns it with its version. The
// image holds nothing else: no shell, no web UI assets (the HTTP API, which
// the tests and Grafana use, needs none), no user database (the manifest
// names the user by number).
func PrometheusImage(ctx context.Context) (v1.Image, string, error) {
	files, err := images.HostBinaries(ctx, PrometheusProgram)
	if err != nil {
		return nil, "", fmt.Errorf("image %s: %w", Prometheus, err)
	}
	out, err := exec.CommandContext(ctx, PrometheusProgram, "--version").CombinedOutput()
	if err != nil {
		return nil, "", fmt.Errorf("image %s: asking %s for its version (%s): %w", Prometheus, PrometheusProgram, strings.TrimSpace(string(out)), err)
	}
	version, err := PrometheusVersion(string(out))
	if err != nil {
		return nil, "", fmt.Errorf("image %s: %w", Prometheus, err)
	}
	layer, err := images.Layer(files)
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
