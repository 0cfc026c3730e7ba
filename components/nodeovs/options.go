package nodeovs

import (
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"time"

	cliflag "k8s.io/component-base/cli/flag"
	logsapi "k8s.io/component-base/logs/api/v1"
)

// The defaults of kos-ovs: the host paths the kos-agent DaemonSet mounts,
// and the schema the kos-agent image ships.
const (
	DefaultRunDir            = "/var/run/kos/openvswitch"
	DefaultDBDir             = "/var/lib/kos/openvswitch"
	DefaultSchema            = "/usr/share/openvswitch/vswitch.ovsschema"
	DefaultUnderlayBridge    = "br-ul"
	DefaultHealthBindAddress = "127.0.0.1:9295"
)

// Options are the settings of kos-ovs, as its command line gives them.
type Options struct {
	// RunDir holds the daemons' sockets and pid files: the run dir
	// (OVS_RUNDIR) that OVS's tools and the agent use.
	RunDir string
	// HostRunDir is the run dir of the node's own Open vSwitch: when one
	// answers there at start, kos-ovs adopts it and runs none of its own.
	HostRunDir string
	// DBDir holds the database, conf.db, and the record of the underlay
	// move.
	DBDir string
	// Schema is the vswitch database schema the database is created from
	// and converted to.
	Schema string
	// DatapathType is the datapath of the underlay bridge: "netdev" for
	// the userspace one. Only UnderlayAddress uses it.
	DatapathType string
	// UnderlayAddress is the node's IPv4 address on the underlay; when
	// set, it is moved onto UnderlayBridge (see Underlay).
	UnderlayAddress string
	// UnderlayBridge is the OVS bridge that takes the underlay address.
	UnderlayBridge string
	// UnderlayCheckPeriod is how often to check that the underlay bridge
	// still holds the address, and move it again if not.
	UnderlayCheckPeriod time.Duration
	// StartTimeout bounds how long each daemon may take to answer.
	StartTimeout time.Duration
	// StopTimeout bounds how long each daemon may take to exit when asked.
	StopTimeout time.Duration
	// FlowRestoreWait is how long a restarted ovs-vswitchd waits for the
	// agent to put its flows back before it forwards anyway (see
	// Config.FlowRestoreWait); 0 does not wait. With UnderlayAddress it
	// never waits.
	FlowRestoreWait time.Duration
	// HealthBindAddress is where /healthz and /readyz are served.
	HealthBindAddress string

	// Logs configures logging.
	Logs *logsapi.LoggingConfiguration
}

// NewOptions returns the default settings of kos-ovs.
func NewOptions() *Options {
	return &Options{
		RunDir:              DefaultRunDir,
		DBDir:               DefaultDBDir,
		Schema:              DefaultSchema,
		UnderlayBridge:      DefaultUnderlayBridge,
		UnderlayCheckPeriod: 10 * time.Second,
		StartTimeout:        30 * time.Second,
		StopTimeout:         10 * time.Second,
		FlowRestoreWait:     time.Minute,
		HealthBindAddress:   DefaultHealthBindAddress,
		Logs:                logsapi.NewLoggingConfiguration(),
	}
}

// Flags returns the command-line flags of kos-ovs, by section.
func (o *Options) Flags() cliflag.NamedFlagSets {
	var fss cliflag.NamedFlagSets
	fs := fss.FlagSet("Open vSwitch")
	fs.StringVar(&o.RunDir, "run-dir", o.RunDir, "The run dir (OVS_RUNDIR) of the daemons' sockets and pid files; the agent's --ovs-run-dir.")
	fs.StringVar(&o.HostRunDir, "host-run-dir", o.HostRunDir, "The run dir of the node's own Open vSwitch (from a package, as kos-agent 0.1.0 used it). When one answers there as kos-ovs starts, kos-ovs adopts it: it starts no daemons and moves no underlay address, serves its health while that Open vSwitch answers, and exits with an error when it stops, so that kubelet restarts kos-ovs, which then runs its own. The agent's --host-ovs-run-dir makes the same choice. Empty: always run our own.")
	fs.StringVar(&o.DBDir, "db-dir", o.DBDir, "The folder of the database (conf.db); keep it on the host so that bridges and ports outlive the container.")
	fs.StringVar(&o.Schema, "schema", o.Schema, "The vswitch database schema to create the database from, and to convert it to when it changed.")
	fs.DurationVar(&o.StartTimeout, "start-timeout", o.StartTimeout, "How long each daemon may take to answer after it starts.")
	fs.DurationVar(&o.StopTimeout, "stop-timeout", o.StopTimeout, "How long each daemon may take to exit when asked, before it is killed.")
	fs.DurationVar(&o.FlowRestoreWait, "flow-restore-wait", o.FlowRestoreWait, "How long a restarted ovs-vswitchd keeps the kernel datapath's flows and forwards on them alone, waiting for the agent to put its OpenFlow flows back (Open vSwitch's other_config:flow-restore-wait), before it forwards anyway. 0: no wait. With --underlay-address there is none: the userspace datapath keeps nothing across a restart, and the node's own traffic crosses the underlay bridge.")

	fs = fss.FlagSet("underlay")
	fs.StringVar(&o.UnderlayAddress, "underlay-address", o.UnderlayAddress, "For the userspace datapath: this node's IPv4 address on the underlay (the pod's status.hostIP). The interface holding it becomes a port of --underlay-bridge, which takes over its IPv4 addresses and routes. Empty for the kernel datapath.")
	fs.StringVar(&o.UnderlayBridge, "underlay-bridge", o.UnderlayBridge, "The OVS bridge that takes the underlay address.")
	fs.StringVar(&o.DatapathType, "datapath-type", o.DatapathType, `The underlay bridge's datapath_type: "netdev", OVS's userspace datapath, is the one that needs --underlay-address.`)
	fs.DurationVar(&o.UnderlayCheckPeriod, "underlay-check-period", o.UnderlayCheckPeriod, "How often to check that the underlay bridge holds the underlay address, and move it there again if not.")

	fs = fss.FlagSet("health")
	fs.StringVar(&o.HealthBindAddress, "health-bind-address", o.HealthBindAddress, "Where to serve /healthz and /readyz over HTTP (kubelet probes a hostNetwork pod's 127.0.0.1).")

	logsapi.AddFlags(o.Logs, fss.FlagSet("logs"))
	return fss
}

// Complete fills in the settings that follow from others: the folders,
// made absolute.
func (o *Options) Complete() error {
	for _, p := range []*string{&o.RunDir, &o.DBDir, &o.Schema, &o.HostRunDir} {
		if *p == "" {
			continue
		}
		abs, err := filepath.Abs(*p)
		if err != nil {
			return fmt.Errorf("resolving %q: %w", *p, err)
		}
		*p = abs
	}
	return nil
}

// Validate returns every problem with the settings at once.
func (o *Options) Validate() error {
	var errs []error
	for name, p := range map[string]string{"--run-dir": o.RunDir, "--db-dir": o.DBDir, "--schema": o.Schema} {
		if p == "" {
			errs = append(errs, fmt.Errorf("%s: required", name))
		}
	}
	if o.UnderlayAddress != "" {
		if ip, err := netip.ParseAddr(o.UnderlayAddress); err != nil || !ip.Is4() {
			errs = append(errs, fmt.Errorf("--underlay-address %q: want an IPv4 address", o.UnderlayAddress))
		}
		// The kernel datapath tunnels from the host's own routing: the
		// address stays on its interface.
		if o.DatapathType != "netdev" {
			errs = append(errs, fmt.Errorf("--underlay-address needs --datapath-type=netdev (the userspace datapath), got %q", o.DatapathType))
		}
		if o.UnderlayBridge == "" {
			errs = append(errs, errors.New("--underlay-bridge: required with --underlay-address"))
		}
	}
	for name, d := range map[string]time.Duration{"--underlay-check-period": o.UnderlayCheckPeriod, "--start-timeout": o.StartTimeout, "--stop-timeout": o.StopTimeout} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s %s: want a positive duration", name, d))
		}
	}
	if o.FlowRestoreWait < 0 {
		errs = append(errs, fmt.Errorf("--flow-restore-wait %s: want a duration of at least 0", o.FlowRestoreWait))
	}
	if o.HealthBindAddress == "" {
		errs = append(errs, errors.New("--health-bind-address: required"))
	}
	return errors.Join(errs...)
}

// Config turns the settings into the configuration of kos-ovs, finding the
// Open vSwitch programs it runs.
func (o *Options) Config() (*Config, error) {
	progs, err := FindPrograms()
	if err != nil {
		return nil, err
	}
	c := &Config{
		RunDir:            o.RunDir,
		HostRunDir:        o.HostRunDir,
		DBDir:             o.DBDir,
		Schema:            o.Schema,
		Programs:          progs,
		StartTimeout:      o.StartTimeout,
		StopTimeout:       o.StopTimeout,
		FlowRestoreWait:   o.FlowRestoreWait,
		HealthBindAddress: o.HealthBindAddress,
	}
	if o.UnderlayAddress != "" {
		c.FlowRestoreWait = 0
		c.Underlay = &UnderlayConfig{
			Address:      netip.MustParseAddr(o.UnderlayAddress),
			Bridge:       o.UnderlayBridge,
			DatapathType: o.DatapathType,
			CheckPeriod:  o.UnderlayCheckPeriod,
		}
	}
	return c, nil
}
