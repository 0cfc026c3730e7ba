package cni

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// InstallCommand is the argument that makes kos-cni install itself rather
// than serve a CNI command: `kos-cni install /host/opt/cni/bin/kos`, as the
// kos-agent DaemonSet's init container runs it. A runtime runs a CNI plugin
// without arguments, so the two never meet.
const InstallCommand = "install"

// Install copies the program at src to dst, such as a node's CNI binary
// folder, so that a runtime that runs dst meanwhile runs either the old or
// the new program, whole: it writes a temporary file beside dst, flushes it
// and renames it over dst.
func Install(src, dst string) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("opening %s: %w", src, err)
	}
	defer in.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".tmp-")
	if err != nil {
		return fmt.Errorf("creating a temporary file beside %s: %w", dst, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := io.Copy(tmp, in); err != nil {
		return fmt.Errorf("copying %s to %s: %w", src, tmp.Name(), err)
	}
	if err := tmp.Chmod(0o755); err != nil {
		return fmt.Errorf("making %s executable: %w", tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("flushing %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("closing %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return fmt.Errorf("renaming %s to %s: %w", tmp.Name(), dst, err)
	}
	return nil
}

// installSelf installs the running program at dst.
func installSelf(dst string) error {
	if dst == "" {
		return errors.New("usage: kos-cni install <path>, such as /host/opt/cni/bin/kos")
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding this program: %w", err)
	}
	return Install(self, dst)
}
