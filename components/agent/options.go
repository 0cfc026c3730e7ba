package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	cliflag "k8s.io/component-base/cli/flag"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"

	"github.com/kos-sdn/kos/components/agent/cniserver"
	"github.com/kos-sdn/kos/components/agent/debugserver"
	"github.com/kos-sdn/kos/components/agent/exechook"
	"github.com/kos-sdn/kos/components/cni"
	"github.com/kos-sdn/kos/components/fabric"
	"github.com/kos-sdn/kos/components/fabric/logging"
	"github.com/kos-sdn/kos/components/fabric/ovs"
	"github.com/kos-sdn/kos/components/kosapi"
)

// Fabric names for Options.Fabric.
const (
	FabricOVS     = "ovs"
	FabricLogging = "logging"
)

// DefaultMetricsBindAddress is where kos-agent serves /metrics and its health
// checks (/livez, /readyz, /healthz).
const DefaultMetricsBindAddress = ":9298"

// Options are the settings of kos-agent, as its command line gives them.
type Options struct {
	// NodeName is this node's name; the host name when empty.
	NodeName string
	// HostIP is this node's IPv4 address on the underlay.
	HostIP string

	// Fabric is FabricOVS or FabricLogging.
	Fabric string
	// Bridge, DatapathType and OVSRunDir select and shape the OVS bridge.
	Bridge       string
	DatapathType string
	OVSRunDir    string
	// HostOVSRunDir is the run dir of the node's own Open vSwitch; when
	// one answers there as the agent starts, it is programmed instead of
	// OVSRunDir's.
	HostOVSRunDir string
	// MTU is the MTU of the interfaces of local attachments; 0 takes the
	// underlay's (the interface holding HostIP) less VXLAN's overhead.
	// Either is the agent's own MTU, which the NetworkConfig's applied
	// overlay MTU replaces once the agent reads one.
	MTU int

	// TunnelFilter keeps the tunnel's UDP port closed to all but the
	// nodes of the remote attachments: TunnelFilterAuto, TunnelFilterNFTables,
	// TunnelFilterOVS or TunnelFilterNone.
	TunnelFilter string
	// TunnelFilterInterface is where nftables admits the peers' tunnel
	// packets: empty for the interface holding HostIP, "*" for any.
	TunnelFilterInterface string
	// UnderlayBridge holds HostIP on the userspace datapath, where
	// TunnelFilterOVS puts its flows.
	UnderlayBridge string

	// Workers is how many attachments are synced at once.
	Workers int
	// QPS and Burst limit the requests to each API server.
	QPS   float32
	Burst int
	// Kubeconfig reaches the main cluster, for Events and, unless
	// KOSServer is set, the KOS API through the aggregator. Empty means the
	// in-cluster configuration.
	Kubeconfig string
	// KOSServer, when set, is the URL of kos-apiserver for direct access,
	// with the main cluster's identity (kos-apiserver asks the main
	// cluster about it).
	KOSServer string
	// KOSCAFile is the CA bundle of kos-apiserver's serving certificate,
	// for direct access.
	KOSCAFile string
	// KOSCAAPIService names the APIService whose caBundle is that CA
	// bundle, for direct access without a file.
	KOSCAAPIService string

	// AllowedPrograms may run as postCreateExec and postDeleteExec, with
	// any arguments.
	AllowedPrograms []string
	// ExecAllowFile names the allow-list of command forms (exechook.LoadAllowFile).
	ExecAllowFile string
	// ExecWorkers is as in Config.
	ExecWorkers int
	// MetricsBindAddress is where /metrics and the health checks are served.
	MetricsBindAddress string
	// DebugEndpoints turns the debug endpoints on; DebugBindAddress is
	// where they are served, and DebugLoopbackOnly serves them on loopback
	// only, without checking identity. Loopback is the default: an agent
	// run by a manifest that grants it no token reviews (0.3.0's) still
	// serves kubectl kos, through a port-forward the kube-apiserver
	// authorizes (pods/portforward), and no pod reaches it; a manifest
	// that grants the reviews sets --debug-loopback-only=false.
	DebugEndpoints    bool
	DebugBindAddress  string
	DebugLoopbackOnly bool
	// FlowCheckPeriod, ReconcilePeriod and ExecTimeout are as in Config.
	FlowCheckPeriod time.Duration
	ReconcilePeriod time.Duration
	ExecTimeout     time.Duration

	// CNISocket is where kos-cni's requests are served; none when empty.
	CNISocket string
	// CNIWait is as cniserver.Config.Wait.
	CNIWait time.Duration

	// Logs configures logging.
	Logs *logsapi.LoggingConfiguration
}

// NewOptions returns the default settings of kos-agent.
func NewOptions() *Options {
	return &Options{
		Fabric:             FabricOVS,
		Bridge:             ovs.DefaultBridge,
		TunnelFilter:       TunnelFilterAuto,
		UnderlayBridge:     ovs.DefaultUnderlayBridge,
		Workers:            4,
		QPS:                50,
		Burst:              100,
		MetricsBindAddress: DefaultMetricsBindAddress,
		DebugEndpoints:     true,
		DebugBindAddress:   debugserver.DefaultBindAddress,
		DebugLoopbackOnly:  true,
		FlowCheckPeriod:    DefaultFlowCheckPeriod,
		ReconcilePeriod:    DefaultReconcilePeriod,
		ExecTimeout:        DefaultExecTimeout,
		ExecWorkers:        DefaultExecWorkers,
		CNIWait:            cniserver.DefaultWait,
		Logs:               logsapi.NewLoggingConfiguration(),
	}
}

// Flags returns the command-line flags of kos-agent, by section.
func (o *Options) Flags() cliflag.NamedFlagSets {
	var fss cliflag.NamedFlagSets
	fs := fss.FlagSet("node")
	fs.StringVar(&o.NodeName, "node-name", o.NodeName, "The name of this node, as attachments' spec.node names it. Defaults to the host name.")
	fs.StringVar(&o.HostIP, "host-ip", o.HostIP, "This node's IPv4 address on the underlay, where other nodes tunnel traffic for its attachments. Required.")

	fs = fss.FlagSet("fabric")
	fs.StringVar(&o.Fabric, "fabric", o.Fabric, `The switch to program: "ovs" (Open vSwitch) or "logging" (logs and remembers only, for scale tests).`)
	fs.StringVar(&o.Bridge, "bridge", o.Bridge, "The OVS bridge to own.")
	fs.StringVar(&o.DatapathType, "datapath-type", o.DatapathType, `The bridge's datapath_type: empty for OVS's default (the kernel datapath), "netdev" for the userspace one.`)
	fs.StringVar(&o.OVSRunDir, "ovs-run-dir", o.OVSRunDir, "The run dir (OVS_RUNDIR) of the Open vSwitch to program; empty for the default.")
	fs.StringVar(&o.HostOVSRunDir, "host-ovs-run-dir", o.HostOVSRunDir, "The run dir of the node's own Open vSwitch (from a package, as kos-agent 0.1.0 used it). When one answers there as the agent starts, the agent programs it instead of --ovs-run-dir's, so that a node upgraded from 0.1.0 keeps the bridge and ports that carry its attachments' traffic; kos-ovs --host-run-dir then runs no Open vSwitch of its own. Empty: always --ovs-run-dir.")
	fs.IntVar(&o.MTU, "mtu", o.MTU, fmt.Sprintf("The MTU of every interface the agent makes for an attachment, in [%d,%d], until the agent reads the overlay MTU that the NetworkConfig cluster applies (status.overlayMTU), which then wins, with a warning when it differs, so that every attachment of a network has one MTU; the agent keeps this one while it may not read the NetworkConfig. 0 takes the MTU of the underlay, the interface holding --host-ip, less the %d bytes VXLAN over IPv4 adds, so that full-size packets fit the underlay once encapsulated. Set it when the path between nodes carries less than that interface (a tunnel or VPN beneath) or more; too large an MTU loses every full-size packet between nodes. A changed MTU reaches existing interfaces when the agent restarts, except those moved into other network namespaces.", fabric.MinMTU, fabric.MaxMTU, fabric.VXLANOverhead))
	fs.StringVar(&o.TunnelFilter, "tunnel-filter", o.TunnelFilter, `What keeps the node's tunnel UDP port (the NetworkConfig's status.tunnelPort, 4789 by default) closed to all but the nodes that hold remote attachments of this one: "nftables" (a table ip kos-tunnel of the kernel's, for the kernel datapath: UDP to the port passes only from those nodes and on --tunnel-filter-interface), "ovs" (flows on --underlay-bridge, for the userspace datapath), "auto" (nftables on the kernel datapath, ovs with --datapath-type=netdev; left out, with a warning, where it cannot work) or "none". kos-agent cleanup removes either.`)
	fs.StringVar(&o.TunnelFilterInterface, "tunnel-filter-interface", o.TunnelFilterInterface, `With the nftables filter: the interface the peers' tunnel packets must arrive on. Empty: the interface holding --host-ip; "*": any (for nodes whose peers reach them through several interfaces).`)
	fs.StringVar(&o.UnderlayBridge, "underlay-bridge", o.UnderlayBridge, "With the ovs filter: the OVS bridge that holds --host-ip, as kos-ovs --underlay-bridge made it.")
	fs.DurationVar(&o.FlowCheckPeriod, "flow-check-period", o.FlowCheckPeriod, "How often to check whether the switch lost its flows (as when ovs-vswitchd restarts).")
	fs.DurationVar(&o.ReconcilePeriod, "reconcile-period", o.ReconcilePeriod, "How often to reconcile the switch fully against the attachments, repairing drift.")

	fs = fss.FlagSet("API access")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "The kubeconfig of the main cluster, for Events and, without --kos-api-server, the KOS API through the aggregator. Empty means the in-cluster configuration.")
	fs.StringVar(&o.KOSServer, "kos-api-server", o.KOSServer, "URL of kos-apiserver, such as https://kos-apiserver.example-com.svc, for direct access with the main cluster's identity; empty reaches the KOS API through the main cluster's kube-apiserver.")
	fs.StringVar(&o.KOSCAFile, "kos-api-ca-file", o.KOSCAFile, "CA bundle of kos-apiserver's serving certificate, with --kos-api-server.")
	fs.StringVar(&o.KOSCAAPIService, "kos-api-ca-apiservice", o.KOSCAAPIService, "With --kos-api-server: trust the CA bundle of this APIService of the main cluster (such as v1alpha1.network.example.com), read at start, instead of --kos-api-ca-file.")
	fs.Float32Var(&o.QPS, "kube-api-qps", o.QPS, "Requests per second to each API server.")
	fs.IntVar(&o.Burst, "kube-api-burst", o.Burst, "Burst of requests to each API server.")
	fs.IntVar(&o.Workers, "workers", o.Workers, "How many attachments to sync at once.")

	fs = fss.FlagSet("exec")
	fs.StringSliceVar(&o.AllowedPrograms, "allowed-programs", o.AllowedPrograms, "Absolute paths of programs that attachments' postCreateExec and postDeleteExec may run with ANY arguments, as root; prefer --exec-allow-file.")
	fs.StringVar(&o.ExecAllowFile, "exec-allow-file", o.ExecAllowFile, "YAML file of the commands postCreateExec and postDeleteExec may run: rules: [{path: /usr/sbin/ip, args: [link, set, 'kos[0-9a-f]{12}', up]}], each argument a regular expression matched as a whole against the expanded argument, the count exact; a file that does not exist allows nothing. Nothing runs when neither this nor --allowed-programs allows it.")
	fs.IntVar(&o.ExecWorkers, "exec-workers", o.ExecWorkers, "How many postCreateExec and postDeleteExec commands may run at once, apart from the workers.")
	fs.DurationVar(&o.ExecTimeout, "exec-timeout", o.ExecTimeout, "How long a postCreateExec or postDeleteExec command may run.")

	fs = fss.FlagSet("cni")
	fs.StringVar(&o.CNISocket, "cni-socket", o.CNISocket, "The Unix socket where kos-cni, the CNI plugin, reaches the agent (kos-cni's default is "+cni.DefaultSocket+"); empty serves no CNI requests. The agent then plugs a veth pair into each pod whose NetworkAttachment is ready on this node, as the attachment's only port.")
	fs.DurationVar(&o.CNIWait, "cni-wait", o.CNIWait, "How long a CNI ADD waits for the pod's NetworkAttachment to exist, get its address and be ready on this node before it fails.")

	fs = fss.FlagSet("metrics")
	fs.StringVar(&o.MetricsBindAddress, "metrics-bind-address", o.MetricsBindAddress, "Where to serve /metrics and the health checks (/livez, /readyz, /healthz) over HTTP.")

	fs = fss.FlagSet("debug")
	fs.BoolVar(&o.DebugEndpoints, "debug-endpoints", o.DebugEndpoints, "Serve the debug endpoints (/debug/status, /debug/flows, /debug/tunnels, /debug/routes, /debug/trace), which `kubectl kos` reads. false turns them off.")
	fs.StringVar(&o.DebugBindAddress, "debug-bind-address", o.DebugBindAddress, "Where to serve the debug endpoints, over HTTPS with a self-signed certificate. Only users the main cluster authenticates (TokenReview, or a client certificate of its client CA) and allows get, or create for a trace, on nodes/kos-debug of this node (SubjectAccessReview) get in; the agent needs the rights of system:auth-delegator and to read the ConfigMap kube-system/extension-apiserver-authentication.")
	fs.BoolVar(&o.DebugLoopbackOnly, "debug-loopback-only", o.DebugLoopbackOnly, "Serve the debug endpoints on 127.0.0.1 at --debug-bind-address's port, without checking identity: no pod reaches them, and kubectl kos reaches them through a port-forward, which the kube-apiserver authorizes (pods/portforward in the agents' namespace). false serves them on --debug-bind-address to the users the main cluster authorizes, and needs the review rights named there.")

	logsapi.AddFlags(o.Logs, fss.FlagSet("logs"))
	return fss
}

// Complete fills in the settings that follow from others.
func (o *Options) Complete() error {
	if o.NodeName == "" {
		host, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("finding the node name: %w", err)
		}
		o.NodeName = strings.ToLower(host)
	}
	return nil
}

// Validate returns every problem with the settings at once.
func (o *Options) Validate() error {
	var errs []error
	if ip, err := netip.ParseAddr(o.HostIP); err != nil || !ip.Is4() {
		errs = append(errs, fmt.Errorf("--host-ip %q: want an IPv4 address", o.HostIP))
	}
	if o.Fabric != FabricOVS && o.Fabric != FabricLogging {
		errs = append(errs, fmt.Errorf("--fabric %q: want %q or %q", o.Fabric, FabricOVS, FabricLogging))
	}
	switch o.TunnelFilter {
	case TunnelFilterAuto, TunnelFilterNFTables, TunnelFilterOVS, TunnelFilterNone:
	default:
		errs = append(errs, fmt.Errorf("--tunnel-filter %q: want %q, %q, %q or %q", o.TunnelFilter, TunnelFilterAuto, TunnelFilterNFTables, TunnelFilterOVS, TunnelFilterNone))
	}
	if o.MTU != 0 {
		if err := fabric.ValidateMTU(o.MTU); err != nil {
			errs = append(errs, fmt.Errorf("--mtu %d: want 0 (from the underlay) or an MTU in [%d,%d]", o.MTU, fabric.MinMTU, fabric.MaxMTU))
		}
	}
	if o.ExecWorkers < 1 {
		errs = append(errs, fmt.Errorf("--exec-workers %d: want at least 1", o.ExecWorkers))
	}
	if o.ExecAllowFile != "" {
		if _, err := exechook.LoadAllowFile(o.ExecAllowFile); err != nil {
			errs = append(errs, fmt.Errorf("--exec-allow-file: %w", err))
		}
	}
	if o.DebugEndpoints {
		if _, _, err := net.SplitHostPort(o.DebugBindAddress); err != nil {
			errs = append(errs, fmt.Errorf("--debug-bind-address %q: want host:port or :port", o.DebugBindAddress))
		}
		if o.DebugBindAddress == o.MetricsBindAddress {
			errs = append(errs, fmt.Errorf("--debug-bind-address %q: want another address than --metrics-bind-address's", o.DebugBindAddress))
		}
	}
	if o.Workers < 1 {
		errs = append(errs, fmt.Errorf("--workers %d: want at least 1", o.Workers))
	}
	if o.QPS <= 0 || o.Burst < 1 {
		errs = append(errs, fmt.Errorf("--kube-api-qps %g and --kube-api-burst %d: want both positive", o.QPS, o.Burst))
	}
	errs = append(errs, o.kosAccess().Validate()...)
	for _, p := range o.AllowedPrograms {
		if !exechook.AbsClean(p) {
			errs = append(errs, fmt.Errorf("--allowed-programs: %q is not an absolute, clean path", p))
		}
	}
	for name, d := range map[string]time.Duration{"--flow-check-period": o.FlowCheckPeriod, "--reconcile-period": o.ReconcilePeriod, "--exec-timeout": o.ExecTimeout, "--cni-wait": o.CNIWait} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s %s: want a positive duration", name, d))
		}
	}
	return errors.Join(errs...)
}

// debugBindAddress is where the debug endpoints are served: nowhere when
// they are off.
func (o *Options) debugBindAddress() string {
	if !o.DebugEndpoints {
		return ""
	}
	return o.DebugBindAddress
}

func (o *Options) kosAccess() kosapi.Access {
	return kosapi.Access{Server: o.KOSServer, CAFile: o.KOSCAFile, CAAPIService: o.KOSCAAPIService}
}

// Config turns the settings into the configuration of kos-agent: the
// client configurations, the fabric and the agent's settings. With
// --kos-api-ca-apiservice it reads that APIService from the main cluster.
// Without --mtu, the OVS fabric's MTU comes from the underlay, for which it
// waits up to 30 seconds (see attachmentMTU). That MTU, or --mtu's, is the
// agent's own: it holds until the agent reads the overlay MTU that the
// NetworkConfig applies (Config.NetworkConfig).
func (o *Options) Config(ctx context.Context) (*ServerConfig, error) {
	mainCfg, err := clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("loading the main cluster's configuration: %w", err)
	}
	mainCfg.QPS, mainCfg.Burst = o.QPS, o.Burst
	mainCfg.UserAgent = "kos-agent/" + o.NodeName
	kosCfg, err := kosapi.Config(ctx, mainCfg, o.kosAccess())
	if err != nil {
		return nil, err
	}

	var rules []exechook.Rule
	if o.ExecAllowFile != "" {
		if rules, err = exechook.LoadAllowFile(o.ExecAllowFile); err != nil {
			return nil, err
		}
	}

	hostIP, err := netip.ParseAddr(o.HostIP)
	if err != nil {
		return nil, fmt.Errorf("--host-ip: %w", err)
	}
	var fab fabric.Interface
	switch o.Fabric {
	case FabricLogging:
		mtu, err := attachmentMTU(ctx, o.MTU, hostIP, 0)
		if err != nil {
			return nil, err
		}
		l := logging.New()
		l.SetMTU(mtu)
		fab = l
	default:
		mtu, err := attachmentMTU(ctx, o.MTU, hostIP, underlayWait)
		if err != nil {
			return nil, err
		}
		runDir := o.ovsRunDir()
		filter, err := o.tunnelFilter(ctx, hostIP, runDir)
		if err != nil {
			return nil, err
		}
		fab = ovs.New(ovs.Config{Bridge: o.Bridge, DatapathType: o.DatapathType, RunDir: runDir, MTU: mtu, Filter: filter})
	}
	// The underlay, when one holds the host IP, is reported on the Node.
	var underlayMTU int
	if u, err := findUnderlay(hostIP); err == nil {
		underlayMTU = u.mtu
	}
	return &ServerConfig{
		Main: mainCfg,
		KOS:  kosCfg,
		Agent: Config{
			NodeName:        o.NodeName,
			HostIP:          hostIP,
			Fabric:          fab,
			NetworkConfig:   true,
			Policy:          true,
			GivenMTU:        o.MTU,
			UnderlayMTU:     underlayMTU,
			AllowedPrograms: o.AllowedPrograms,
			FlowCheckPeriod: o.FlowCheckPeriod,
			ReconcilePeriod: o.ReconcilePeriod,
			ExecTimeout:     o.ExecTimeout,
			ExecRules:       rules,
			ExecWorkers:     o.ExecWorkers,
			CNI: cniserver.Config{
				Socket: o.CNISocket,
				Wait:   o.CNIWait,
				// The userspace datapath forwards what it reads from a
				// pod's veth as it is, checksums left to the device
				// included.
				NoChecksumOffload: o.Fabric == FabricOVS && o.DatapathType == "netdev",
			},
		},
		Workers:            o.Workers,
		MetricsBindAddress: o.MetricsBindAddress,
		DebugBindAddress:   o.debugBindAddress(),
		DebugLoopbackOnly:  o.DebugLoopbackOnly,
	}, nil
}

// ovsRunDir returns the run dir of the Open vSwitch to program: the node's
// own when HostOVSRunDir is set and one answers there (the same rule as
// kos-ovs's, ovs.Answers), else OVSRunDir. The choice holds until the agent
// restarts: when the node's own Open vSwitch stops, the agent's checks fail,
// kubelet restarts it, and it chooses again.
func (o *Options) ovsRunDir() string {
	if o.HostOVSRunDir == "" {
		return o.OVSRunDir
	}
	if err := ovs.Answers(o.HostOVSRunDir); err != nil {
		klog.V(2).InfoS("Not adopting the node's own Open vSwitch", "runDir", o.HostOVSRunDir, "reason", err.Error())
		return o.OVSRunDir
	}
	klog.InfoS("Adopting the node's own Open vSwitch", "runDir", o.HostOVSRunDir)
	return o.HostOVSRunDir
}
