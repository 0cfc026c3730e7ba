package spawner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Options describe a process for Run.
type Options struct {
	// Name names the process in errors and, unless LogFile is set, its log
	// Dir/<Name>.log; with PIDFile, its pid file Dir/<Name>.pid.
	Name string
	// Dir is the process's working folder, where its log and pid file go.
	Dir string
	// Binary and Args are the program and its arguments.
	Binary string
	Args   []string
	// Env is the environment; nil means this program's.
	Env []string
	// LogFile receives the process's output; "" means Dir/<Name>.log,
	// truncated. A LogFile that is given is appended to.
	LogFile string
	// PIDFile writes the pid to Dir/<Name>.pid; Stop removes it.
	PIDFile bool
	// Detach runs the process in a session of its own so that it outlives
	// this program. Otherwise it gets a process group of its own, so that a
	// Ctrl-C aimed at the caller does not kill it before the caller can stop
	// things in order, and on Linux SIGKILL when this program dies.
	Detach bool
}

// Process is a child process that Run started, or that Find describes from
// what a state file remembered. The exported fields are what such a file
// holds.
type Process struct {
	Name   string   `json:"name"`
	PID    int      `json:"pid"`
	Binary string   `json:"binary"`
	Args   []string `json:"args"`
	// LogFile is the path of the process's output.
	LogFile string `json:"logFile"`
	// PIDFile is the pid file Run wrote, if any.
	PIDFile string `json:"pidFile,omitempty"`

	// done is closed when the process has exited and been reaped; it is nil
	// for a process that another program started, which this one cannot
	// wait for.
	done    chan struct{}
	waitErr error
}

// Run starts a process as opts say, from the spawner thread (see Start),
// and reaps it when it exits.
func Run(opts Options) (*Process, error) {
	logPath, flags := opts.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND
	if logPath == "" {
		logPath, flags = filepath.Join(opts.Dir, opts.Name+".log"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC
	}
	logFile, err := os.OpenFile(logPath, flags, 0o644)
	if err != nil {
		return nil, fmt.Errorf("creating the log of %s: %w", opts.Name, err)
	}
	// The child holds its own copy of the descriptor.
	defer logFile.Close()

	cmd := exec.Command(opts.Binary, opts.Args...)
	cmd.Env = opts.Env
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.Dir = opts.Dir
	cmd.SysProcAttr = sysProcAttr(opts.Detach)
	if err := Start(cmd); err != nil {
		return nil, fmt.Errorf("starting %s: %w", opts.Name, err)
	}
	p := &Process{
		Name:    opts.Name,
		PID:     cmd.Process.Pid,
		Binary:  opts.Binary,
		Args:    opts.Args,
		LogFile: logPath,
		done:    make(chan struct{}),
	}
	// Waiting reaps the child and tells a readiness wait that it died. A
	// detached child outlives this goroutine and is reaped by init instead.
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	if opts.PIDFile {
		p.PIDFile = filepath.Join(opts.Dir, opts.Name+".pid")
		if err := os.WriteFile(p.PIDFile, []byte(strconv.Itoa(p.PID)+"\n"), 0o644); err != nil {
			_ = p.Stop(0)
			return nil, fmt.Errorf("writing the pid file of %s: %w", opts.Name, err)
		}
	}
	return p, nil
}

// Running reports whether the process is still alive.
func (p *Process) Running() bool {
	if p.done != nil {
		select {
		case <-p.done:
			return false
		default:
			return true
		}
	}
	return Alive(p.PID, p.Binary)
}

// ExitError says how a process this program started ended; for others it
// says only that it is gone.
func (p *Process) ExitError() error {
	if p.done != nil && p.waitErr != nil {
		return p.waitErr
	}
	return errors.New("not running")
}

// Exited reports whether a process this program started has exited, and
// how it ended: err is what exec.Cmd's Wait returned, nil for exit status
// 0. For a process another program started it reports false.
func (p *Process) Exited() (exited bool, err error) {
	if p.done == nil {
		return false, nil
	}
	select {
	case <-p.done:
		return true, p.waitErr
	default:
		return false, nil
	}
}

// Stop sends SIGTERM, and SIGKILL when the process is still there after
// grace. It returns once the process is gone, and removes its pid file.
func (p *Process) Stop(grace time.Duration) error {
	if p.PIDFile != "" {
		defer os.Remove(p.PIDFile)
	}
	if !p.Running() {
		return nil
	}
	if err := syscall.Kill(p.PID, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stopping %s (pid %d): %w", p.Name, p.PID, err)
	}
	if p.WaitGone(grace) {
		return nil
	}
	if err := syscall.Kill(p.PID, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("killing %s (pid %d): %w", p.Name, p.PID, err)
	}
	if !p.WaitGone(10 * time.Second) {
		return fmt.Errorf("%s (pid %d) still runs after SIGKILL", p.Name, p.PID)
	}
	return nil
}

// WaitGone waits up to timeout for the process to exit, and reports whether
// it did.
func (p *Process) WaitGone(timeout time.Duration) bool {
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
		if !p.Running() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The pace of WaitReady: how long one call of the readiness check may take,
// how long it waits between calls, and how much of the log its errors hold.
const (
	readyCheckTimeout  = 5 * time.Second
	readyCheckInterval = 100 * time.Millisecond
	readyLogLines      = 20
)

// WaitReady calls ready until it returns nil, and fails when the process
// exits first, ctx ends or timeout passes. Each call gets a context that
// ends after five seconds or with ctx; calls are 100 ms apart. An error
// names the process, says why it gave up (with ready's last error) and
// holds the end of the process's log.
func (p *Process) WaitReady(ctx context.Context, timeout time.Duration, ready func(context.Context) error) error {
	deadline := time.Now().Add(timeout)
	for {
		if !p.Running() {
			return fmt.Errorf("%s exited while starting (%v); the end of its log %s:\n%s",
				p.Name, p.ExitError(), p.LogFile, p.LogTail(readyLogLines))
		}
		checkCtx, cancel := context.WithTimeout(ctx, readyCheckTimeout)
		err := ready(checkCtx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s (last check: %v); the end of its log %s:\n%s",
				p.Name, timeout, err, p.LogFile, p.LogTail(readyLogLines))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s to be ready (last check: %v): %w", p.Name, err, ctx.Err())
		case <-time.After(readyCheckInterval):
		}
	}
}

// LogTail returns the last lines of the process's log, for error messages.
func (p *Process) LogTail(lines int) string {
	return Tail(p.LogFile, lines)
}

// Alive reports whether pid is a live process running binary ("" means any
// program). A zombie counts as gone, and so does a pid the system has reused
// for another program.
func Alive(pid int, binary string) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name, which may itself
	// hold spaces or parentheses.
	if i := bytes.LastIndexByte(stat, ')'); i < 0 || len(stat) < i+3 || stat[i+2] == 'Z' || stat[i+2] == 'X' {
		return false
	}
	if binary == "" {
		return true
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	// A process that is exiting has released its memory, and with it its
	// command line, before it becomes a zombie: it is still there (a Stop
	// that took it for gone would return early).
	if len(cmdline) == 0 {
		return true
	}
	argv0, _, _ := bytes.Cut(cmdline, []byte{0})
	return string(argv0) == binary
}

// Tail returns the last lines of a file, for error messages; "" when it
// cannot be read.
func Tail(path string, lines int) string {
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

// CPUTime returns the user and system time a process has used, from
// /proc/<proc>/stat; proc is a pid or "self".
func CPUTime(proc string) (time.Duration, error) {
	data, err := os.ReadFile(filepath.Join("/proc", proc, "stat"))
	if err != nil {
		return 0, fmt.Errorf("reading the CPU time of process %s: %w", proc, err)
	}
	// The fields after the command, which is in parentheses and may hold
	// spaces: utime and stime are the 12th and 13th.
	fields := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
	if len(fields) < 13 {
		return 0, fmt.Errorf("/proc/%s/stat has %d fields after the command, want at least 13", proc, len(fields))
	}
	var ticks int64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parsing /proc/%s/stat: %w", proc, err)
		}
		ticks += n
	}
	// Linux counts in USER_HZ, 100 a second.
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}
