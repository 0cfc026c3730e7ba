package testenv

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kos-sdn/kos/tools/spawner"
)

// process is one control-plane process the environment started. The exported
// fields are what the state file remembers, so that Attach can find the
// process again from another program.
type process struct {
	Name    string   `json:"name"`
	PID     int      `json:"pid"`
	Binary  string   `json:"binary"`
	Args    []string `json:"args"`
	URL     string   `json:"url"`
	PeerURL string   `json:"peerURL,omitempty"`
	LogFile string   `json:"logFile"`

	// done is closed when the process has exited and been reaped; it is nil
	// for a process found by Attach, which this program cannot wait for.
	done    chan struct{}
	waitErr error
}

// startProcess starts binary with args, its output going to DIR/<name>.log
// and its pid to DIR/<name>.pid. An owned process is killed when this program
// dies; a detached one runs in its own session and outlives it.
func startProcess(dir, name, binary string, args []string, detach bool) (*process, error) {
	logPath := filepath.Join(dir, name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("creating the log of %s: %w", name, err)
	}
	// The child holds its own copy of the descriptor.
	defer logFile.Close()

	cmd := exec.Command(binary, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.Dir = dir
	cmd.SysProcAttr = sysProcAttr(detach)
	if err := spawner.Start(cmd); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{
		Name:    name,
		PID:     cmd.Process.Pid,
		Binary:  binary,
		Args:    args,
		LogFile: logPath,
		done:    make(chan struct{}),
	}
	// Waiting reaps the child and tells a readiness wait that it died. A
	// detached child outlives this goroutine and is reaped by init instead.
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	if err := os.WriteFile(filepath.Join(dir, name+".pid"), []byte(strconv.Itoa(p.PID)+"\n"), 0o644); err != nil {
		_ = p.stop(0)
		return nil, fmt.Errorf("writing the pid file of %s: %w", name, err)
	}
	return p, nil
}

// running reports whether the process is still alive.
func (p *process) running() bool {
	if p.done != nil {
		select {
		case <-p.done:
			return false
		default:
			return true
		}
	}
	return alive(p.PID, p.Binary)
}

// exitError says how an owned process ended; for others it says only that it
// is gone.
func (p *process) exitError() error {
	if p.done != nil && p.waitErr != nil {
		return p.waitErr
	}
	return errors.New("not running")
}

// stop sends SIGTERM, and SIGKILL when the process is still there after
// grace. It returns once the process is gone, and removes its pid file.
func (p *process) stop(grace time.Duration) error {
	defer os.Remove(filepath.Join(filepath.Dir(p.LogFile), p.Name+".pid"))
	if !p.running() {
		return nil
	}
	if err := syscall.Kill(p.PID, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stopping %s (pid %d): %w", p.Name, p.PID, err)
	}
	if p.waitGone(grace) {
		return nil
	}
	if err := syscall.Kill(p.PID, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("killing %s (pid %d): %w", p.Name, p.PID, err)
	}
	if !p.waitGone(10 * time.Second) {
		return fmt.Errorf("%s (pid %d) still runs after SIGKILL", p.Name, p.PID)
	}
	return nil
}

// waitGone waits up to timeout for the process to exit.
func (p *process) waitGone(timeout time.Duration) bool {
	if p.done != nil {
		select {
		case <-p.done:
			return true
		case <-time.After(timeout):
			return false
		}
	}
	deadline := time.Now().Add(timeout)
	for {
		if !p.running() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// alive reports whether pid is a live process running binary. A zombie
// counts as gone, and so does a pid the system has reused for another program.
func alive(pid int, binary string) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name, which may itself
	// hold spaces or parentheses.
	if i := bytes.LastIndexByte(stat, ')'); i < 0 || len(stat) < i+3 || stat[i+2] == 'Z' || stat[i+2] == 'X' {
		return false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	argv0, _, _ := bytes.Cut(cmdline, []byte{0})
	return string(argv0) == binary
}

// logTail returns the last lines of a log file, for error messages.
func logTail(path string, lines int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	all := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// ports hands out free TCP ports on 127.0.0.1 below 32768, where Linux's
// ephemeral range starts, so that no outgoing connection can take a port
// between picking and binding it.
type ports struct {
	taken map[int]bool
}

// pick returns preferred when it is free (so that a restarted environment
// keeps its addresses), else a random free port.
func (ps *ports) pick(preferred int) (int, error) {
	if ps.taken == nil {
		ps.taken = map[int]bool{}
	}
	if preferred > 0 && !ps.taken[preferred] && portFree(preferred) {
		ps.taken[preferred] = true
		return preferred, nil
	}
	for range 200 {
		port := 10000 + rand.IntN(32768-10000)
		if !ps.taken[port] && portFree(port) {
			ps.taken[port] = true
			return port, nil
		}
	}
	return 0, errors.New("no free port on 127.0.0.1 between 10000 and 32767")
}

func portFree(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// urlPort returns the port of a URL such as http://127.0.0.1:2379, or 0.
func urlPort(u string) int {
	i := strings.LastIndexByte(u, ':')
	if i < 0 {
		return 0
	}
	port, err := strconv.Atoi(strings.TrimRight(u[i+1:], "/"))
	if err != nil {
		return 0
	}
	return port
}
