package ovsenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/kos-sdn/kos/tools/spawner"
)

// startDaemon starts argv with env, its output appended to outPath. An
// owned daemon is killed when this program dies; a detached one gets a
// session of its own and outlives it.
func startDaemon(name string, argv, env []string, outPath string, detach bool) (*spawner.Process, error) {
	return spawner.Run(spawner.Options{Name: name, Binary: argv[0], Args: argv[1:], Env: env, LogFile: outPath, Detach: detach})
}

// readPID reads a pid file.
func readPID(path string) (int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return 0, fmt.Errorf("reading pid file %s: %w", path, err)
	}
	return pid, nil
}

// findProgram finds an OVS program on PATH or in the sbin folders that a
// non-root PATH may lack.
func findProgram(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/usr/local/sbin", "/sbin"} {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found: install Open vSwitch (tools/deps.sh installs openvswitch-switch)", name)
}
