package nodeovs

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/kos-sdn/kos/components/fabric/ovs"
	"github.com/kos-sdn/kos/components/monitoring"
)

// The names of the daemons, and of their pid files and control sockets in
// the run dir (ovs-appctl -t NAME finds them there).
const (
	dbServer = "ovsdb-server"
	vswitchd = "ovs-vswitchd"
	dbFile   = "conf.db"
	dbSocket = "db.sock"
)

// Config is the configuration of kos-ovs. Build it with Options, or
// directly, and Complete it before New.
type Config struct {
	// RunDir, DBDir and Schema are as in Options.
	RunDir string
	DBDir  string
	Schema string
	// HostRunDir, when set, is the run dir of the node's own Open vSwitch,
	// adopted when it answers at start (see Options).
	HostRunDir string
	// Programs are the Open vSwitch programs to run.
	Programs Programs
	// Underlay, when set, moves the node's underlay address onto a bridge.
	Underlay *UnderlayConfig
	// StartTimeout and StopTimeout bound each daemon's start and stop.
	StartTimeout time.Duration
	StopTimeout  time.Duration
	// FlowRestoreWait, when not zero, has ovs-vswitchd, started on an
	// existing database, keep the datapath's flows and forward on them
	// alone until the agent has put the OpenFlow flows back and removes
	// other_config:flow-restore-wait, or until FlowRestoreWait has passed
	// and kos-ovs removes it, so that an agent that never comes leaves no
	// node without forwarding.
	FlowRestoreWait time.Duration
	// HealthBindAddress is where /healthz and /readyz are served.
	HealthBindAddress string
}

// CompletedConfig is a Config whose defaults are filled in; only Complete
// makes one, so New never runs on a half-set configuration.
type CompletedConfig struct {
	*completedConfig
}

type completedConfig struct {
	Config
}

// Complete fills in the defaults of c.
func (c Config) Complete() CompletedConfig {
	if c.StartTimeout <= 0 {
		c.StartTimeout = 30 * time.Second
	}
	if c.StopTimeout <= 0 {
		c.StopTimeout = 10 * time.Second
	}
	if c.Underlay != nil && c.Underlay.CheckPeriod <= 0 {
		c.Underlay.CheckPeriod = 10 * time.Second
	}
	return CompletedConfig{&completedConfig{Config: c}}
}

// Server runs the node's Open vSwitch.
type Server struct {
	cfg      completedConfig
	env      []string
	underlay *Underlay
	// health serves the checks, which ask the daemons through their
	// control sockets rather than share state with Run.
	health *monitoring.Server
	// adopted is set once Run has adopted the node's own Open vSwitch,
	// before the health checks can see our own daemons missing.
	adopted atomic.Bool
}

// New builds the server and binds its health endpoint. It starts nothing
// else.
func (c CompletedConfig) New() (*Server, error) {
	s := &Server{
		cfg: *c.completedConfig,
		// The tools find the daemons through OVS_RUNDIR; OVS_DBDIR and
		// OVS_LOGDIR keep everything else they might write in the same
		// places.
		env: append(os.Environ(),
			"OVS_RUNDIR="+c.RunDir,
			"OVS_DBDIR="+c.DBDir,
			"OVS_LOGDIR="+c.RunDir,
		),
	}
	if c.Underlay != nil {
		s.underlay = newUnderlay(*c.Underlay, c.DBDir, s.vsctl)
	}
	health, err := monitoring.Listen(c.HealthBindAddress, monitoring.Handler(prometheus.NewRegistry(),
		monitoring.Check{Path: "/healthz", Func: s.answers},
		monitoring.Check{Path: "/readyz", Func: s.ready},
	))
	if err != nil {
		return nil, err
	}
	s.health = health
	return s, nil
}

// HealthAddr returns the address /healthz and /readyz are served on.
func (s *Server) HealthAddr() string { return s.health.Addr() }

// Run runs Open vSwitch until ctx ends or a daemon dies: it prepares the
// database, starts ovsdb-server and ovs-vswitchd, moves the underlay
// address, and serves the health checks. When ctx ends it asks both daemons
// to exit and returns nil; when one dies it stops the other and returns an
// error, so that the container is restarted. Either way the underlay
// address is back on its interface and no daemon or goroutine runs once it
// returns.
func (s *Server) Run(ctx context.Context) error {
	return s.health.ServeWhile(ctx, s.run)
}

func (s *Server) run(ctx context.Context) (err error) {
	if s.cfg.HostRunDir != "" && ovs.Answers(s.cfg.HostRunDir) == nil {
		return s.adopt(ctx)
	}
	for _, dir := range []string{s.cfg.RunDir, s.cfg.DBDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("creating %s: %w", dir, err)
		}
	}
	db := filepath.Join(s.cfg.DBDir, dbFile)
	dbState, err := ensureDatabase(ctx, s.cfg.Programs.DBTool, db, s.cfg.Schema)
	if err != nil {
		return err
	}

	var daemons []*daemon
	defer func() {
		// Stop in reverse order: ovs-vswitchd first, while the database
		// still answers it.
		for _, d := range slices.Backward(daemons) {
			d.stop(func(ctx context.Context) error { return s.appctl(ctx, d.name, "exit") }, s.cfg.StopTimeout)
		}
		if s.underlay != nil {
			err = errors.Join(err, s.underlay.Release())
		}
	}()

	dbd, err := startDaemon(dbServer, s.cfg.Programs.DBServer, append([]string{db,
		"--remote=punix:" + filepath.Join(s.cfg.RunDir, dbSocket),
		// Managers (ovs-vsctl set-manager) are configured in the
		// database, as on a node whose OVS came from a package.
		"--remote=db:Open_vSwitch,Open_vSwitch,manager_options",
	}, s.daemonArgs(dbServer)...), s.env)
	if err != nil {
		return err
	}
	daemons = append(daemons, dbd)
	// init writes the root record that ovs-vswitchd needs; --no-wait
	// because no ovs-vswitchd runs yet to wait for.
	if err := s.waitAnswer(ctx, dbd, func(ctx context.Context) error {
		_, err := s.vsctl(ctx, "--no-wait", "--timeout=2", "init")
		return err
	}); err != nil {
		return err
	}
	// A new database has no bridge whose flows the datapath could keep.
	waitFlows := s.cfg.FlowRestoreWait > 0 && dbState != "created"
	if waitFlows {
		if _, err := s.vsctl(ctx, "--no-wait", "--timeout=5", "set", "Open_vSwitch", ".", "other_config:"+ovs.FlowRestoreWait+"=true"); err != nil {
			return fmt.Errorf("setting %s: %w", ovs.FlowRestoreWait, err)
		}
	}

	vsd, err := startDaemon(vswitchd, s.cfg.Programs.VSwitchd, append([]string{
		"unix:" + filepath.Join(s.cfg.RunDir, dbSocket),
	}, s.daemonArgs(vswitchd)...), s.env)
	if err != nil {
		return err
	}
	daemons = append(daemons, vsd)
	if err := s.waitAnswer(ctx, vsd, func(ctx context.Context) error { return s.appctl(ctx, vswitchd, "version") }); err != nil {
		return err
	}
	klog.InfoS("Open vSwitch answers", "runDir", s.cfg.RunDir, "db", db, "flowRestoreWait", waitFlows)
	var flowsDue <-chan time.Time
	if waitFlows {
		timer := time.NewTimer(s.cfg.FlowRestoreWait)
		defer timer.Stop()
		flowsDue = timer.C
	}

	var check <-chan time.Time
	if s.underlay != nil {
		if err := s.underlay.Ensure(ctx); err != nil {
			return err
		}
		ticker := time.NewTicker(s.cfg.Underlay.CheckPeriod)
		defer ticker.Stop()
		check = ticker.C
	}
	for {
		select {
		case <-ctx.Done():
			klog.InfoS("Stopping Open vSwitch")
			return nil
		case <-dbd.done:
			return dbd.exitError()
		case <-vsd.done:
			return vsd.exitError()
		case <-flowsDue:
			s.endFlowRestoreWait(ctx)
		case <-check:
			if s.underlay.Holds() == nil {
				continue
			}
			if err := s.underlay.Ensure(ctx); err != nil {
				klog.ErrorS(err, "Moving the underlay address onto its bridge again")
			}
		}
	}
}

// adopt leaves the node to its own Open vSwitch, which answers in
// HostRunDir: it starts nothing and moves no address (whoever runs that
// Open vSwitch gave it its underlay), and returns nil when ctx ends or an
// error once that Open vSwitch stops answering, so that the container is
// restarted and runs our own.
func (s *Server) adopt(ctx context.Context) error {
	s.adopted.Store(true)
	klog.InfoS("Adopting the node's own Open vSwitch: running none", "runDir", s.cfg.HostRunDir)
	ticker := time.NewTicker(5 * time.Second)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
			if err := ovs.Answers(s.cfg.HostRunDir); err != nil {
				return fmt.Errorf("the node's own Open vSwitch, adopted, stopped: %w", err)
			}
		}
	}
}

// endFlowRestoreWait removes other_config:flow-restore-wait unless the
// agent has: ovs-vswitchd then forwards on whatever flows it has. A failure
// is logged, not returned: the switch answers, and the agent removes the
// key after its next reconcile.
func (s *Server) endFlowRestoreWait(ctx context.Context) {
	key := "other_config:" + ovs.FlowRestoreWait
	if v, err := s.vsctl(ctx, "--timeout=5", "--if-exists", "get", "Open_vSwitch", ".", key); err != nil || strings.Trim(v, `"`) != "true" {
		return
	}
	if _, err := s.vsctl(ctx, "--timeout=10", "remove", "Open_vSwitch", ".", "other_config", ovs.FlowRestoreWait); err != nil {
		klog.ErrorS(err, "Ending the wait for the agent's flows failed", "key", key)
		return
	}
	klog.InfoS("The agent did not put the flows back in time: forwarding on what there is", "waited", s.cfg.FlowRestoreWait)
}

// daemonArgs are the arguments every daemon gets: its pid file in the run
// dir (where ovs-appctl -t NAME looks), and its log on standard error
// rather than syslog or a file, for the container's log.
func (s *Server) daemonArgs(name string) []string {
	return []string{
		"--pidfile=" + filepath.Join(s.cfg.RunDir, name+".pid"),
		"--no-chdir",
		"-vconsole:info",
		"-vsyslog:off",
	}
}

// waitAnswer runs probe until it succeeds, the daemon exits or the start
// timeout passes.
func (s *Server) waitAnswer(ctx context.Context, d *daemon, probe func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.StartTimeout)
	defer cancel()
	for {
		probeCtx, probeCancel := context.WithTimeout(ctx, 5*time.Second)
		err := probe(probeCtx)
		probeCancel()
		if err == nil {
			return nil
		}
		select {
		case <-d.done:
			return fmt.Errorf("while starting: %w", d.exitError())
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s to answer: %w", d.name, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// vsctl runs ovs-vsctl against the node's OVS.
func (s *Server) vsctl(ctx context.Context, args ...string) (string, error) {
	return run(ctx, s.env, s.cfg.Programs.VSctl, args...)
}

// appctl runs ovs-appctl -t target with args.
func (s *Server) appctl(ctx context.Context, target string, args ...string) error {
	_, err := run(ctx, s.env, s.cfg.Programs.Appctl, append([]string{"--timeout=5", "-t", target}, args...)...)
	return err
}

// answers is /healthz: both daemons answer on their control sockets.
func (s *Server) answers(r *http.Request) error {
	if s.adopted.Load() {
		return ovs.Answers(s.cfg.HostRunDir)
	}
	for _, name := range []string{dbServer, vswitchd} {
		if err := s.appctl(r.Context(), name, "version"); err != nil {
			return err
		}
	}
	return nil
}

// ready is /readyz: both daemons answer and, with an underlay, the bridge
// holds the address.
func (s *Server) ready(r *http.Request) error {
	if err := s.answers(r); err != nil {
		return err
	}
	if s.underlay != nil && !s.adopted.Load() {
		return s.underlay.Holds()
	}
	return nil
}
