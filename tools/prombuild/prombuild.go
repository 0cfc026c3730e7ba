// Package prombuild finds the Prometheus and promtool that
// tools/prometheus/build.sh builds from the Go module proxy, at the version
// kos-monitoring's manifest runs, for the tests that run them: the image the
// monitoring cluster test pushes, the dashboards' and alerts' checks.
// Debian's package will not do: it is older, and built without the
// Kubernetes service discovery the manifest's configuration uses.
package prombuild

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/kos-sdn/kos/tools/reporoot"
)

// BinDirEnv names the folder of a build of tools/prometheus/build.sh
// (tools/test.sh sets it); without it, Binary runs the script.
const BinDirEnv = "KOS_PROMETHEUS_BIN_DIR"

// Binary returns the path of name ("prometheus" or "promtool") in the
// folder $KOS_PROMETHEUS_BIN_DIR names, or else in the one
// tools/prometheus/build.sh prints (it builds on its first run, a few
// minutes, and caches in .cache/prometheus/ after).
func Binary(ctx context.Context, name string) (string, error) {
	dir := os.Getenv(BinDirEnv)
	if dir == "" {
		root, err := reporoot.Find()
		if err != nil {
			return "", err
		}
		var stdout, stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "tools", "prometheus", "build.sh"))
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("building Prometheus with tools/prometheus/build.sh (%s): %w", strings.TrimSpace(stderr.String()), err)
		}
		lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
		dir = lines[len(lines)-1]
	}
	binary := filepath.Join(dir, name)
	if _, err := os.Stat(binary); err != nil {
		return "", fmt.Errorf("finding %s of tools/prometheus/build.sh: %w", name, err)
	}
	return binary, nil
}
