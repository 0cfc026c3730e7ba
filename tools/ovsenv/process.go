package ovsenv

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kos-sdn/kos/tools/spawner"
)

// daemon is one OVS daemon of an instance.
type daemon struct {
	name string // ovsdb-server or ovs-vswitchd; also the ovs-appctl target
	pid  int
	// done is closed when this program has reaped the process; it is nil
	// for a daemon found by Attach, which another program started.
	done chan struct{}
}

// startDaemon starts argv with env, its output going to outPath. An owned
// daemon is killed when this program dies; a detached one gets a session of
// its own and outlives it.
func startDaemon(name string, argv, env []string, outPath string, detach bool) (*daemon, error) {
	out, err := os.OpenFile(outPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("creating the output file of %s: %w", name, err)
	}
	// The child holds its own copy of the descriptor.
	defer out.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Stdout = out
	cmd.Stderr = out
	if detach {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	} else {
		// A process group of its own keeps a Ctrl-C aimed at the caller
		// from killing the daemon before Stop can end it in order.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	}
	if err := spawner.Start(cmd); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	d := &daemon{name: name, pid: cmd.Process.Pid, done: make(chan struct{})}
	// Waiting reaps the child, so that it does not linger as a zombie.
	go func() {
		_ = cmd.Wait()
		close(d.done)
	}()
	return d, nil
}

// running reports whether the daemon is alive.
func (d *daemon) running() bool {
	if d.done != nil {
		select {
		case <-d.done:
			return false
		default:
			return true
		}
	}
	return alive(d.pid)
}

// waitGone waits up to timeout for the daemon to exit.
func (d *daemon) waitGone(timeout time.Duration) bool {
	if d.done != nil {
		select {
		case <-d.done:
			return true
		case <-time.After(timeout):
			return false
		}
	}
	deadline := time.Now().Add(timeout)
	for alive(d.pid) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// kill ends the daemon with SIGTERM, then SIGKILL, and waits until it is gone.
func (d *daemon) kill() error {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		if err := syscall.Kill(d.pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("signalling %s (pid %d): %w", d.name, d.pid, err)
		}
		if d.waitGone(5 * time.Second) {
			return nil
		}
	}
	return fmt.Errorf("%s (pid %d) still runs after SIGKILL", d.name, d.pid)
}

// alive reports whether pid is a live process. A zombie counts as gone: a
// daemon that another program started and did not reap stays one for a while.
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name, which may itself
	// hold spaces or parentheses.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || len(stat) < i+3 {
		return false
	}
	return stat[i+2] != 'Z' && stat[i+2] != 'X'
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

// tail returns the last n lines of a file, for error messages.
func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
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
