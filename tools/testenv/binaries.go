package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/kos-sdn/kos/tools/reporoot"
)

// BinDirEnv names the environment variable that points at a folder holding
// the etcd and kube-apiserver binaries; when it is unset, tools/kube/build.sh
// builds them (once) and says where they are.
const BinDirEnv = "KOS_KUBE_BIN_DIR"

// RepoRoot returns the root folder of the KOS repository (reporoot.Find).
func RepoRoot() (string, error) { return reporoot.Find() }

// FindBinaries returns the folder holding the programs names: binDir, else
// $KOS_KUBE_BIN_DIR when it holds them all, else the folder
// tools/kube/build.sh builds them into. The build's progress goes to stderr
// so that a cold first build, which takes minutes, is not silent.
func FindBinaries(ctx context.Context, binDir string, names []string) (string, error) {
	if binDir == "" {
		binDir = os.Getenv(BinDirEnv)
		// A folder made for fewer components than these (by make test,
		// say) is no reason to fail: build.sh adds the others to its
		// cache.
		if binDir != "" && checkBinaries(binDir, names) != nil {
			binDir = ""
		}
	}
	if binDir == "" {
		root, err := RepoRoot()
		if err != nil {
			return "", fmt.Errorf("locating tools/kube/build.sh (or set %s): %w", BinDirEnv, err)
		}
		script := filepath.Join(root, "tools", "kube", "build.sh")
		var stdout bytes.Buffer
		cmd := exec.CommandContext(ctx, "bash", append([]string{script}, names...)...)
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
	if err := checkBinaries(abs, names); err != nil {
		return "", fmt.Errorf("control-plane binaries in %s: %w", abs, err)
	}
	return abs, nil
}

// checkBinaries returns an error for each of names that is not an
// executable file in dir.
func checkBinaries(dir string, names []string) error {
	var errs []error
	for _, name := range names {
		info, err := os.Stat(filepath.Join(dir, name))
		switch {
		case err != nil:
			errs = append(errs, err)
		case info.IsDir() || info.Mode()&0o111 == 0:
			errs = append(errs, fmt.Errorf("%s is not an executable file", filepath.Join(dir, name)))
		}
	}
	return errors.Join(errs...)
}
