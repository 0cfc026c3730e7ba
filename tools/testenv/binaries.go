package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// BinDirEnv names the environment variable that points at a folder holding
// the etcd and kube-apiserver binaries; when it is unset, tools/kube/build.sh
// builds them (once) and says where they are.
const BinDirEnv = "KOS_KUBE_BIN_DIR"

// modulePath is the module whose root RepoRoot looks for.
const modulePath = "github.com/kos-sdn/kos"

// requiredBinaries are the programs Start runs.
var requiredBinaries = []string{"etcd", "kube-apiserver"}

// RepoRoot returns the root folder of the KOS repository: the folder of this
// package's source two levels up when the binary was built from a checkout,
// else the nearest folder above the working directory whose go.mod declares
// the KOS module.
func RepoRoot() (string, error) {
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		root := filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
		if isRepoRoot(root) {
			return root, nil
		}
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("finding the repository root: %w", err)
	}
	for {
		if isRepoRoot(dir) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of module %s above the working directory", modulePath)
		}
		dir = parent
	}
}

func isRepoRoot(dir string) bool {
	data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if fields := strings.Fields(line); len(fields) == 2 && fields[0] == "module" {
			return fields[1] == modulePath
		}
	}
	return false
}

// findBinaries returns the folder holding etcd and kube-apiserver: binDir,
// else $KOS_KUBE_BIN_DIR, else the folder tools/kube/build.sh builds them
// into. The build's progress goes to stderr so that a cold first build, which
// takes minutes, is not silent.
func findBinaries(ctx context.Context, binDir string) (string, error) {
	if binDir == "" {
		binDir = os.Getenv(BinDirEnv)
	}
	if binDir == "" {
		root, err := RepoRoot()
		if err != nil {
			return "", fmt.Errorf("locating tools/kube/build.sh (or set %s): %w", BinDirEnv, err)
		}
		script := filepath.Join(root, "tools", "kube", "build.sh")
		var stdout bytes.Buffer
		cmd := exec.CommandContext(ctx, "bash", append([]string{script}, requiredBinaries...)...)
		cmd.Stdout = &stdout
		cmd.Stderr = os.Stderr
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("building the control plane with %s: %w", script, err)
		}
		lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
		binDir = strings.TrimSpace(lines[len(lines)-1])
		if binDir == "" {
			return "", fmt.Errorf("%s printed no folder", script)
		}
	}
	abs, err := filepath.Abs(binDir)
	if err != nil {
		return "", fmt.Errorf("resolving %s: %w", binDir, err)
	}
	var errs []error
	for _, name := range requiredBinaries {
		info, err := os.Stat(filepath.Join(abs, name))
		switch {
		case err != nil:
			errs = append(errs, err)
		case info.IsDir() || info.Mode()&0o111 == 0:
			errs = append(errs, fmt.Errorf("%s is not an executable file", filepath.Join(abs, name)))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return "", fmt.Errorf("control-plane binaries in %s: %w", abs, err)
	}
	return abs, nil
}
