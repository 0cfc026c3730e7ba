package ovsenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/kos-sdn/kos/tools/lane"
	"github.com/kos-sdn/kos/tools/spawner"
)

// Options say how to start an instance.
type Options struct {
	// Dir is the instance's folder. When empty, Start makes a new one
	// under the system's temporary folder and Stop removes it. Keep it
	// short: Unix socket paths in its run dir must fit in 107 bytes.
	Dir string
	// Netns names an existing network namespace to run the daemons in,
	// such as a simulated node's. When empty, Start creates a namespace
	// for the instance alone and Stop deletes it.
	Netns string
	// Detach lets the daemons outlive this program; Attach finds them
	// again from Dir.
	Detach bool
}

// Instance is a running Open vSwitch: an ovsdb-server and an ovs-vswitchd.
type Instance struct {
	// Dir holds conf.db, the logs and RunDir.
	Dir string
	// RunDir holds the daemons' sockets and pid files; it is what
	// OVS_RUNDIR must name for tools to reach this instance.
	RunDir string
	// Netns is the network namespace the daemons run in.
	Netns *Netns

	// What Start created, and so Stop removes; remembered in stateFile so
	// that Attach knows too.
	state   instanceState
	db      *spawner.Process
	vswitch *spawner.Process
}

// instanceState is what Attach needs to know about an instance.
type instanceState struct {
	Netns    string `json:"netns"`
	OwnNetns bool   `json:"ownNetns"`
	OwnDir   bool   `json:"ownDir"`
	Detach   bool   `json:"detach"`
}

const (
	stateFile   = "ovsenv.json"
	dbFile      = "conf.db"
	dbSocket    = "db.sock"
	dbServer    = "ovsdb-server"
	vswitchd    = "ovs-vswitchd"
	readyWithin = 30 * time.Second
)

// Start starts an instance: it creates its folder, database and (unless
// Options.Netns names one) its network namespace, then ovsdb-server and
// ovs-vswitchd, and returns once ovs-vswitchd answers. On failure it removes
// what it created and the error holds the tail of the failing daemon's log.
func Start(ctx context.Context, opts Options) (inst *Instance, err error) {
	if err := lane.Require(lane.Integration, "Open vSwitch"); err != nil {
		return nil, err
	}
	schema, err := findSchema()
	if err != nil {
		return nil, err
	}
	i := &Instance{Dir: opts.Dir, state: instanceState{Detach: opts.Detach}}
	defer func() {
		if err != nil {
			_ = i.Stop()
		}
	}()
	if i.Dir == "" {
		sweepDirs()
		if i.Dir, err = os.MkdirTemp("", ownedName(opts.Detach)+"-"); err != nil {
			return nil, fmt.Errorf("creating the instance folder: %w", err)
		}
		i.state.OwnDir = true
	}
	if i.Dir, err = filepath.Abs(i.Dir); err != nil {
		return nil, fmt.Errorf("resolving the instance folder: %w", err)
	}
	i.RunDir = filepath.Join(i.Dir, "run")
	if err := os.MkdirAll(i.RunDir, 0o755); err != nil {
		return nil, fmt.Errorf("creating the run dir: %w", err)
	}
	if opts.Netns == "" {
		if i.Netns, err = newNetns(ctx, "", opts.Detach); err != nil {
			return nil, err
		}
		i.state.OwnNetns = true
	} else {
		i.Netns = &Netns{Name: opts.Netns}
	}
	i.state.Netns = i.Netns.Name
	if err := i.saveState(); err != nil {
		return nil, err
	}

	dbPath := filepath.Join(i.Dir, dbFile)
	if _, err := run(exec.CommandContext(ctx, "ovsdb-tool", "create", dbPath, schema)); err != nil {
		return nil, fmt.Errorf("creating the OVS database: %w", err)
	}
	if err := i.startDB(ctx, dbPath); err != nil {
		return nil, err
	}
	if err := i.startVSwitchd(ctx); err != nil {
		return nil, err
	}
	return i, nil
}

// Attach returns the instance that Start ran in dir, so that another
// program can use and stop it.
func Attach(dir string) (*Instance, error) {
	data, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		return nil, fmt.Errorf("reading the state of the OVS instance: %w", err)
	}
	i := &Instance{Dir: dir, RunDir: filepath.Join(dir, "run")}
	if err := json.Unmarshal(data, &i.state); err != nil {
		return nil, fmt.Errorf("reading the state of the OVS instance in %s: %w", dir, err)
	}
	i.Netns = &Netns{Name: i.state.Netns}
	i.db = attachDaemon(i.RunDir, dbServer)
	i.vswitch = attachDaemon(i.RunDir, vswitchd)
	return i, nil
}

// attachDaemon returns the daemon that the pid file in runDir names, or nil
// when it does not run.
func attachDaemon(runDir, name string) *spawner.Process {
	pid, err := readPID(filepath.Join(runDir, name+".pid"))
	if err != nil || !spawner.Alive(pid, "") {
		return nil
	}
	return &spawner.Process{Name: name, PID: pid}
}

// Env returns the environment variables that point OVS tools at this
// instance, to add to a command's environment.
func (i *Instance) Env() []string {
	return []string{
		"OVS_RUNDIR=" + i.RunDir,
		"OVS_DBDIR=" + i.Dir,
		"OVS_LOGDIR=" + i.Dir,
	}
}

// Command returns a command that runs an OVS tool (ovs-vsctl, ovs-ofctl,
// ovs-appctl, ...) against this instance. It runs in the caller's network
// namespace: the tools talk to the daemons over the run dir's sockets.
func (i *Instance) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), i.Env()...)
	return cmd
}

// Run runs an OVS tool against this instance and returns its standard
// output, trimmed; the error holds its standard error.
func (i *Instance) Run(ctx context.Context, name string, args ...string) (string, error) {
	return run(i.Command(ctx, name, args...))
}

// RestartVSwitchd stops ovs-vswitchd and starts it again, as a node's
// service manager would. The database and its ports stay; every OpenFlow
// flow is lost.
func (i *Instance) RestartVSwitchd(ctx context.Context) error {
	if err := i.stopDaemon(i.vswitch); err != nil {
		return err
	}
	i.vswitch = nil
	return i.startVSwitchd(ctx)
}

// Stop stops ovs-vswitchd, then ovsdb-server, and removes the namespace and
// the folder if Start created them. It is safe to call more than once.
func (i *Instance) Stop() error {
	var errs []error
	if i.vswitch != nil {
		errs = append(errs, i.stopDaemon(i.vswitch, "--cleanup"))
		i.vswitch = nil
	}
	if i.db != nil {
		errs = append(errs, i.stopDaemon(i.db))
		i.db = nil
	}
	if i.state.OwnNetns && i.Netns != nil {
		errs = append(errs, i.Netns.Delete())
		i.state.OwnNetns = false
	}
	if i.state.OwnDir && i.Dir != "" {
		errs = append(errs, os.RemoveAll(i.Dir))
		i.state.OwnDir = false
	}
	return errors.Join(errs...)
}

// LogTail returns the last n lines of each daemon's log, for test failures.
func (i *Instance) LogTail(n int) string {
	var s string
	for _, name := range []string{dbServer, vswitchd} {
		for _, ext := range []string{".out", ".log"} {
			if t := spawner.Tail(filepath.Join(i.Dir, name+ext), n); t != "" {
				s += fmt.Sprintf("--- %s%s\n%s\n", name, ext, t)
			}
		}
	}
	return s
}

func (i *Instance) startDB(ctx context.Context, dbPath string) error {
	d, err := i.startDaemon(dbServer, dbPath,
		"--remote=punix:"+filepath.Join(i.RunDir, dbSocket))
	if err != nil {
		return err
	}
	i.db = d
	// init writes the root record that ovs-vswitchd needs; --no-wait
	// because there is no ovs-vswitchd yet to wait for.
	return i.waitReady(ctx, d, "ovs-vsctl", "--no-wait", "--timeout=2", "init")
}

func (i *Instance) startVSwitchd(ctx context.Context) error {
	d, err := i.startDaemon(vswitchd, "unix:"+filepath.Join(i.RunDir, dbSocket))
	if err != nil {
		return err
	}
	i.vswitch = d
	if err := i.waitReady(ctx, d, "ovs-appctl", "--timeout=2", "-t", vswitchd, "version"); err != nil {
		return err
	}
	// A write that ovs-vsctl waits for returns once ovs-vswitchd has read
	// the database and configured itself.
	if _, err := i.Run(ctx, "ovs-vsctl", "--timeout=20", "set", "Open_vSwitch", ".", "external_ids:ovsenv-started="+time.Now().UTC().Format(time.RFC3339Nano)); err != nil {
		return fmt.Errorf("waiting for ovs-vswitchd to configure itself: %w\n%s", err, i.LogTail(20))
	}
	return nil
}

// startDaemon starts an OVS daemon of this instance in its namespace. The
// default unixctl socket is kept (ovs-appctl finds it by the pid file).
func (i *Instance) startDaemon(name string, args ...string) (*spawner.Process, error) {
	prog, err := findProgram(name)
	if err != nil {
		return nil, err
	}
	argv := []string{"ip", "netns", "exec", i.Netns.Name, prog}
	argv = append(argv, args...)
	argv = append(argv,
		"--pidfile="+filepath.Join(i.RunDir, name+".pid"),
		"--log-file="+filepath.Join(i.Dir, name+".log"),
		"--no-chdir",
	)
	return startDaemon(name, argv, append(os.Environ(), i.Env()...), filepath.Join(i.Dir, name+".out"), i.state.Detach)
}

// waitReady runs a probe until it succeeds, the daemon dies or time runs
// out. The daemon's own log, beside the output WaitReady shows, says why.
func (i *Instance) waitReady(ctx context.Context, d *spawner.Process, probe ...string) error {
	err := d.WaitReady(ctx, readyWithin, func(ctx context.Context) error {
		_, err := i.Run(ctx, probe[0], probe[1:]...)
		return err
	})
	if err != nil {
		log := filepath.Join(i.Dir, d.Name+".log")
		return fmt.Errorf("%w\nthe end of its own log %s:\n%s", err, log, spawner.Tail(log, 20))
	}
	return nil
}

// stopDaemon asks a daemon to exit through ovs-appctl, and signals it when
// that does not work.
func (i *Instance) stopDaemon(d *spawner.Process, exitArgs ...string) error {
	if d == nil || !d.Running() {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	args := append([]string{"--timeout=5", "-t", d.Name, "exit"}, exitArgs...)
	if _, err := i.Run(ctx, "ovs-appctl", args...); err == nil && d.WaitGone(10*time.Second) {
		return nil
	}
	return d.Stop(5 * time.Second)
}

func (i *Instance) saveState() error {
	data, err := json.Marshal(i.state)
	if err != nil {
		return fmt.Errorf("encoding the instance state: %w", err)
	}
	if err := os.WriteFile(filepath.Join(i.Dir, stateFile), data, 0o644); err != nil {
		return fmt.Errorf("saving the instance state: %w", err)
	}
	return nil
}

// sweepDirs removes the instance folders that processes which died before
// they could stop their instances left in the temporary folder. Errors are
// ignored: another process may be sweeping the same ones.
func sweepDirs() {
	dirs, err := filepath.Glob(filepath.Join(os.TempDir(), "ovsenv-*"))
	if err != nil {
		return
	}
	for _, d := range dirs {
		if ownerGone(filepath.Base(d)) {
			_ = os.RemoveAll(d)
		}
	}
}

// findSchema finds the vswitch database schema that the installed Open
// vSwitch ships.
func findSchema() (string, error) {
	dirs := []string{"/usr/share/openvswitch", "/usr/local/share/openvswitch"}
	if d := os.Getenv("OVS_PKGDATADIR"); d != "" {
		dirs = append([]string{d}, dirs...)
	}
	for _, d := range dirs {
		p := filepath.Join(d, "vswitch.ovsschema")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", errors.New("vswitch.ovsschema not found: install Open vSwitch (tools/deps.sh installs openvswitch-switch)")
}
