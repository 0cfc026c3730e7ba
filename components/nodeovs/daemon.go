package nodeovs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"
)

// Programs are the paths of the Open vSwitch programs kos-ovs runs.
type Programs struct {
	DBServer string // ovsdb-server
	VSwitchd string // ovs-vswitchd
	DBTool   string // ovsdb-tool
	VSctl    string // ovs-vsctl
	Appctl   string // ovs-appctl
}

// FindPrograms finds the Open vSwitch programs on PATH or in the sbin
// folders that a PATH may lack.
func FindPrograms() (Programs, error) {
	var p Programs
	var errs []error
	for name, dst := range map[string]*string{
		"ovsdb-server": &p.DBServer,
		"ovs-vswitchd": &p.VSwitchd,
		"ovsdb-tool":   &p.DBTool,
		"ovs-vsctl":    &p.VSctl,
		"ovs-appctl":   &p.Appctl,
	} {
		path, err := findProgram(name)
		if err != nil {
			errs = append(errs, err)
		}
		*dst = path
	}
	return p, errors.Join(errs...)
}

// RunTool runs the Open vSwitch program name (found as kos-ovs finds its
// own) against the instance whose files are in runDir (OVS_RUNDIR,
// OVS_DBDIR and OVS_LOGDIR), with at most a minute to finish, and returns
// its standard output; the error holds what it said on standard error.
func RunTool(ctx context.Context, runDir, name string, args ...string) (string, error) {
	program, err := findProgram(name)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	env := append(os.Environ(), "OVS_RUNDIR="+runDir, "OVS_DBDIR="+runDir, "OVS_LOGDIR="+runDir)
	return run(ctx, env, program, args...)
}

func findProgram(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/usr/local/sbin", "/sbin", "/usr/bin"} {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found on PATH or in the sbin folders", name)
}

// daemon is an Open vSwitch daemon running in the foreground as a child of
// this process.
type daemon struct {
	name string
	cmd  *exec.Cmd
	// done is closed once the process has exited; err then holds how.
	done chan struct{}
	err  error
}

// startDaemon starts program as the daemon name, its output on this
// process's standard error (the container's log). It gets SIGKILL when this
// process dies, so that a kos-ovs that dies leaves no daemon behind.
func startDaemon(name, program string, args, env []string) (*daemon, error) {
	cmd := exec.Command(program, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	d := &daemon{name: name, cmd: cmd, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// The parent-death signal comes when the thread that started
		// the child ends, not the process: start and wait on a thread
		// of its own, which lives as long as the child.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		d.err = cmd.Wait()
		close(d.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	klog.InfoS("Started", "daemon", name, "pid", cmd.Process.Pid)
	return d, nil
}

// exited reports whether the daemon has exited.
func (d *daemon) exited() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// exitError says how the daemon ended; call it once done is closed.
func (d *daemon) exitError() error {
	if d.err == nil {
		return fmt.Errorf("%s exited", d.name)
	}
	return fmt.Errorf("%s exited: %w", d.name, d.err)
}

// stop asks the daemon to exit through ask (ovs-appctl -t NAME exit), waits
// up to timeout, then sends SIGTERM and, after another timeout, SIGKILL. It
// returns once the daemon has exited.
func (d *daemon) stop(ask func(context.Context) error, timeout time.Duration) {
	if d.exited() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := ask(ctx); err != nil {
		klog.InfoS("Could not ask to exit; signalling", "daemon", d.name, "err", err)
	}
	for _, sig := range []syscall.Signal{0, syscall.SIGTERM, syscall.SIGKILL} {
		how := "asked"
		if sig != 0 {
			_ = d.cmd.Process.Signal(sig)
			how = sig.String()
		}
		select {
		case <-d.done:
			klog.InfoS("Stopped", "daemon", d.name, "by", how)
			return
		case <-time.After(timeout):
		}
	}
	<-d.done
}

// run runs program with args and env, and returns its standard output,
// trimmed; the error holds what it said on standard error.
func run(ctx context.Context, env []string, program string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, program, args...)
	cmd.Env = env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := filepath.Base(program) + " " + strings.Join(args, " ")
		if said := strings.TrimSpace(stderr.String()); said != "" {
			msg += " (" + said + ")"
		}
		return "", fmt.Errorf("%s: %w", msg, err)
	}
	return strings.TrimSpace(string(out)), nil
}
