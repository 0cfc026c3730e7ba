package kosinstall

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/kos-sdn/kos/tools/testenv"
)

// The host paths the KOS manifests mount from their node. A local node
// shares the host's file system, so whoever runs KOS there lends them while
// it runs.
const (
	// OVSRunDir is where the agent's DaemonSet finds the node's Open
	// vSwitch; it is lent as a link to the run dir of the node's instance.
	OVSRunDir = "/var/run/openvswitch"
	// VarLib holds the single-node etcd's data (VarLib/etcd); it is lent
	// empty.
	VarLib = "/var/lib/kos"
	// lentMark, in VarLib, holds the folder of the environment the paths
	// are lent to.
	lentMark = ".kos-lent-to"
)

// LendHostPaths lends the node of the environment in envDir the host paths
// its KOS pods mount: OVSRunDir as a link to ovsRunDir, the node's Open
// vSwitch run dir, and an empty VarLib, marked as lent to envDir. Paths lent
// earlier to envDir, or to an environment that no longer runs, are taken
// back first; anything else there is left alone and is an error, as are
// paths lent to another environment that runs.
func LendHostPaths(envDir, ovsRunDir string) error {
	if owner, ok := lentTo(); ok && owner != envDir && running(owner) {
		return fmt.Errorf("%s and %s are lent to the environment in %s, which runs: stop it first (make demo-down, or the test that started it)", VarLib, OVSRunDir, owner)
	} else if ok {
		if _, err := takeBack(owner); err != nil {
			return err
		}
	}
	if _, err := os.Lstat(OVSRunDir); !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s exists on this host (an Open vSwitch of the host?): the node's Open vSwitch needs the path; stop that one or free the path", OVSRunDir)
	}
	if _, err := os.Lstat(VarLib); !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s exists on this host: the single-node etcd of KOS keeps its data there; move it away and run again", VarLib)
	}
	if err := os.MkdirAll(VarLib, 0o755); err != nil {
		return fmt.Errorf("lending %s: %w", VarLib, err)
	}
	if err := os.WriteFile(filepath.Join(VarLib, lentMark), []byte(envDir), 0o644); err != nil {
		return fmt.Errorf("lending %s: %w", VarLib, err)
	}
	if err := os.Symlink(ovsRunDir, OVSRunDir); err != nil {
		return fmt.Errorf("lending %s: %w", OVSRunDir, err)
	}
	return nil
}

// ReturnHostPaths takes back the host paths lent to the environment in
// envDir, if they are: call it once that environment has stopped, so that
// no pod writes there any more. It returns the paths it took back.
func ReturnHostPaths(envDir string) ([]string, error) {
	if owner, ok := lentTo(); !ok || owner != envDir {
		return nil, nil
	}
	return takeBack(envDir)
}

// lentTo returns the environment folder the paths are lent to, if they are.
func lentTo() (string, bool) {
	mark, err := os.ReadFile(filepath.Join(VarLib, lentMark))
	if err != nil {
		return "", false
	}
	return string(mark), true
}

// takeBack removes the link OVSRunDir when it points into envDir, and
// VarLib.
func takeBack(envDir string) ([]string, error) {
	var back []string
	if target, err := os.Readlink(OVSRunDir); err == nil && strings.HasPrefix(target, envDir+string(filepath.Separator)) {
		if err := os.Remove(OVSRunDir); err != nil {
			return back, fmt.Errorf("taking back %s: %w", OVSRunDir, err)
		}
		back = append(back, OVSRunDir)
	}
	if err := os.RemoveAll(VarLib); err != nil {
		return back, fmt.Errorf("taking back %s: %w", VarLib, err)
	}
	return append(back, VarLib), nil
}

// running reports whether the environment in dir still has a process
// running: one whose starter died has none, as its processes die with it.
func running(dir string) bool {
	env, err := testenv.Attach(dir)
	if err != nil {
		return false
	}
	for _, p := range env.Processes() {
		if p.Running {
			return true
		}
	}
	return false
}
