package ovs

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Answers returns nil when an Open vSwitch runs with its sockets in runDir:
// ovsdb-server accepts a connection on db.sock and ovs-vswitchd on the
// control socket its pid file names. kos-ovs and the agent both ask it of
// the node's own Open vSwitch (one from a package, as kos-agent 0.1.0
// used), so that they agree on adopting it rather than starting another.
func Answers(runDir string) error {
	const timeout = 2 * time.Second
	pid, err := os.ReadFile(filepath.Join(runDir, "ovs-vswitchd.pid"))
	if err != nil {
		return fmt.Errorf("no ovs-vswitchd in %s: %w", runDir, err)
	}
	for _, sock := range []string{"db.sock", "ovs-vswitchd." + strings.TrimSpace(string(pid)) + ".ctl"} {
		conn, err := net.DialTimeout("unix", filepath.Join(runDir, sock), timeout)
		if err != nil {
			return fmt.Errorf("no Open vSwitch answers in %s: %w", runDir, err)
		}
		conn.Close()
	}
	return nil
}
