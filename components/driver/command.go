package driver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/component-base/term"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"

	"github.com/kos-sdn/kos/components/monitoring"
)

// Options are the command-line settings of kos-driver.
type Options struct {
	Kubeconfig           string
	QPS                  float32
	Burst                int
	KOSServer, KOSCA     string
	KOSQPS               float32
	KOSBurst             int
	Namespace, RunID     string
	Networks             int
	NetworkSizes         string
	VNIBase              uint32
	NodeSelector         string
	Rate                 float64
	Arrivals             string
	Threads              int
	Cruise, ReadyTimeout time.Duration
	Ping                 bool
	PingPeers            int
	Shell                string
	CSV                  string
	MetricsAddress       string
	Progress             time.Duration
	Seed                 uint64
	Logs                 *logsapi.LoggingConfiguration
}

// NewOptions returns the defaults of kos-driver.
func NewOptions() *Options {
	return &Options{
		QPS: 100, Burst: 200, KOSQPS: 2000, KOSBurst: 4000,
		Networks: 10, NetworkSizes: "uniform:2-20",
		Rate: 10, Arrivals: ArrivalsSteady, Threads: 8,
		Cruise: time.Minute, ReadyTimeout: time.Minute,
		PingPeers: 2, Shell: "/bin/sh",
		Progress: 5 * time.Second,
		Logs:     logsapi.NewLoggingConfiguration(),
	}
}

// Flags returns kos-driver's flags, by section.
func (o *Options) Flags() cliflag.NamedFlagSets {
	var fss cliflag.NamedFlagSets
	fs := fss.FlagSet("API access")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Kubeconfig of the main cluster; empty means $KUBECONFIG, ~/.kube/config, or the in-cluster configuration.")
	fs.Float32Var(&o.QPS, "kube-api-qps", o.QPS, "Requests per second to the main cluster's API server (Nodes, the Namespace).")
	fs.IntVar(&o.Burst, "kube-api-burst", o.Burst, "Requests in a burst to the main cluster's API server.")
	fs.StringVar(&o.KOSServer, "kos-api-server", o.KOSServer, "URL of kos-apiserver for direct access; empty reaches the KOS API through the main cluster's kube-apiserver.")
	fs.StringVar(&o.KOSCA, "kos-api-ca-file", o.KOSCA, "CA bundle of kos-apiserver's serving certificate, with --kos-api-server.")
	fs.Float32Var(&o.KOSQPS, "kos-api-qps", o.KOSQPS, "Requests per second to the KOS API.")
	fs.IntVar(&o.KOSBurst, "kos-api-burst", o.KOSBurst, "Requests in a burst to the KOS API.")

	fs = fss.FlagSet("load")
	fs.StringVar(&o.Namespace, "namespace", o.Namespace, "Namespace of the run's subnets and attachments; empty creates kos-driver-<run ID> and deletes it at the end.")
	fs.StringVar(&o.RunID, "run-id", o.RunID, "Value of the label "+RunLabel+" on the run's objects; empty picks a random one.")
	fs.IntVar(&o.Networks, "networks", o.Networks, "Virtual networks (a Subnet on a VNI of its own each).")
	fs.StringVar(&o.NetworkSizes, "network-sizes", o.NetworkSizes, "Distribution of the attachments per network: N, uniform:A-B, geometric:MEAN or zipf:S,MAX.")
	fs.Uint32Var(&o.VNIBase, "vni-base", o.VNIBase, "First VNI of the run's networks; 0 picks a random range (VNIs are confined to one namespace, so a range another namespace uses fails validation).")
	fs.StringVar(&o.NodeSelector, "node-selector", o.NodeSelector, "Label selector of the Nodes attachments go on, such as role.kos.example.com/workload=true; empty means every node.")
	fs.Float64Var(&o.Rate, "rate", o.Rate, "Operations per second: creates in warm-up, delete+create pairs in cruise, deletes in cool-down.")
	fs.StringVar(&o.Arrivals, "arrivals", o.Arrivals, "How operations are spaced: steady, or poisson (exponential gaps of the same mean).")
	fs.IntVar(&o.Threads, "threads", o.Threads, "Operations in flight at once at most.")
	fs.DurationVar(&o.Cruise, "cruise", o.Cruise, "How long the cruise phase (delete/create churn) lasts; 0 skips it.")
	fs.DurationVar(&o.ReadyTimeout, "ready-timeout", o.ReadyTimeout, "How long an attachment may take to be ready (and tested); later ones count as timeouts.")

	fs = fss.FlagSet("ping tests")
	fs.BoolVar(&o.Ping, "ping", o.Ping, "Give each attachment a ping test through postCreateExec: a guest network namespace gets its interface and pings up to --ping-peers ready attachments of its network; postDeleteExec deletes the namespace. The agents need the rules of 'kos-driver exec-allow-list' in their --exec-allow-file.")
	fs.IntVar(&o.PingPeers, "ping-peers", o.PingPeers, "Attachments each ping test pings at most.")
	fs.StringVar(&o.Shell, "exec-shell", o.Shell, "Absolute path of the shell on the nodes that runs the ping test and cleanup scripts.")

	fs = fss.FlagSet("output")
	fs.StringVar(&o.CSV, "csv", o.CSV, "File to write a row of times per attachment to, at the end; empty writes none.")
	fs.StringVar(&o.MetricsAddress, "metrics-bind-address", o.MetricsAddress, "Address to serve the driver's Prometheus /metrics on while it runs, such as :9297; empty serves none.")
	fs.DurationVar(&o.Progress, "progress", o.Progress, "Period of the progress lines; 0 prints none.")
	fs.Uint64Var(&o.Seed, "seed", o.Seed, "Seed of the random choices (sizes, nodes, victims, Poisson gaps); 0 picks one.")
	logsapi.AddFlags(o.Logs, fss.FlagSet("logs"))
	return fss
}

// Config returns the driver's configuration from the options, and the
// sizes distribution parsed.
func (o *Options) Config() (Config, error) {
	sizes, err := ParseSizes(o.NetworkSizes)
	if err != nil {
		return Config{}, err
	}
	if o.KOSCA != "" && o.KOSServer == "" {
		return Config{}, errors.New("--kos-api-ca-file needs --kos-api-server")
	}
	loading := clientcmd.NewDefaultClientConfigLoadingRules()
	loading.ExplicitPath = o.Kubeconfig
	kube, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(loading, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return Config{}, fmt.Errorf("loading the main cluster's client configuration: %w", err)
	}
	kube.QPS, kube.Burst = o.QPS, o.Burst
	kos := rest.CopyConfig(kube)
	kos.QPS, kos.Burst = o.KOSQPS, o.KOSBurst
	if o.KOSServer != "" {
		kos.Host, kos.APIPath = o.KOSServer, ""
		if o.KOSCA != "" {
			kos.TLSClientConfig.CAData, kos.TLSClientConfig.CAFile = nil, o.KOSCA
		}
	}
	return Config{
		Kube: kube, KOS: kos, Namespace: o.Namespace, RunID: o.RunID,
		Networks: o.Networks, Sizes: sizes, VNIBase: o.VNIBase, NodeSelector: o.NodeSelector,
		Rate: o.Rate, Arrivals: o.Arrivals, Threads: o.Threads, Cruise: o.Cruise, ReadyTimeout: o.ReadyTimeout,
		Ping: o.Ping, PingPeers: o.PingPeers, Shell: o.Shell, Progress: o.Progress, Seed: o.Seed,
	}, nil
}

// NewCommand returns the kos-driver command. Progress, the summary and help
// go to out.
func NewCommand(out, errOut io.Writer) *cobra.Command {
	o := NewOptions()
	cmd := &cobra.Command{
		Use:   "kos-driver",
		Short: "Drive a load of KOS network attachments and measure it",
		Long: `kos-driver creates virtual networks (a Subnet on a VNI of its own each) whose
sizes follow --network-sizes, then attachments on the nodes --node-selector
picks, at --rate operations per second (steady or Poisson) over --threads:
warm-up creates every network's attachments, cruise deletes a random one and
creates a replacement per operation for --cruise, cool-down waits for the slow
ones and deletes them all. It measures create, create→addressed, create→ready
and (with --ping) create→tested latencies from the server's write times, serves
them as Prometheus histograms (--metrics-bind-address), writes a CSV of
per-attachment times (--csv), checks that no two live attachments of a VNI hold
one address, prints progress and a summary, and deletes what it made, also
when interrupted. It exits non-zero when any error was counted.`,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("kos-driver takes no arguments, got %q", args)
			}
			if err := logsapi.ValidateAndApply(o.Logs, nil); err != nil {
				return err
			}
			defer logs.FlushLogs()
			cfg, err := o.Config()
			if err != nil {
				return err
			}
			return run(cmd.Context(), o, cfg, out)
		},
	}
	cmd.SetOut(out)
	cmd.SetErr(errOut)
	fss := o.Flags()
	for _, fs := range fss.FlagSets {
		cmd.Flags().AddFlagSet(fs)
	}
	cols, _, _ := term.TerminalSize(out)
	cliflag.SetUsageAndHelpFunc(cmd, fss, cols)

	shell := "/bin/sh"
	allow := &cobra.Command{
		Use:   "exec-allow-list",
		Short: "Print the agent exec allow-list (--exec-allow-file) that --ping needs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			data, err := yaml.Marshal(map[string]any{"rules": ExecAllowList(shell)})
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(data)
			return err
		},
	}
	allow.Flags().StringVar(&shell, "exec-shell", shell, "The shell, as given to kos-driver --exec-shell.")
	cmd.AddCommand(allow)
	return cmd
}

// run runs the driver with the CSV file and metrics server the options ask
// for.
func run(ctx context.Context, o *Options, cfg Config, out io.Writer) error {
	ctx = klog.NewContext(ctx, klog.Background())
	cfg.Out = out
	if o.CSV != "" {
		f, err := os.Create(o.CSV)
		if err != nil {
			return err
		}
		defer f.Close()
		cfg.CSV = f
	}
	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
	d, err := New(cfg)
	if err != nil {
		return err
	}
	var res *Result
	drive := func(ctx context.Context) error {
		var err error
		res, err = d.Run(ctx)
		return err
	}
	if o.MetricsAddress != "" {
		srv, err := monitoring.Listen(o.MetricsAddress, monitoring.Handler(reg))
		if err != nil {
			return err
		}
		err = srv.ServeWhile(ctx, drive)
		if err != nil {
			return err
		}
	} else if err := drive(ctx); err != nil {
		return err
	}
	if n := res.TotalErrors(); n > 0 {
		return fmt.Errorf("%d errors", n)
	}
	return nil
}

// TotalErrors returns how many errors the run counted.
func (r *Result) TotalErrors() int {
	n := 0
	for _, c := range r.Errors {
		n += c
	}
	return n
}
