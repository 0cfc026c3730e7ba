package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/kos-sdn/kos/channels"
	"github.com/kos-sdn/kos/channels/daemon"
	"github.com/kos-sdn/kos/internal/cmdline"
)

// daemonFlags are the flags of apply channel that make it a daemon.
type daemonFlags struct {
	interval       time.Duration
	healthAddress  string
	metricsAddress string
	nodeName       string
	nodeLabels     string
	fullCheckEvery int
	drift          string
}

// DefaultHealthBindAddress is where a daemon serves /healthz and /readyz
// unless told otherwise: where kOps's kops-channels static pod serves them
// and its readiness probe reads them.
const DefaultHealthBindAddress = "127.0.0.1:3986"

func addDaemonFlags(cmd *cobra.Command) *daemonFlags {
	f := &daemonFlags{}
	cmd.Flags().DurationVar(&f.interval, "interval", 0, "Run as a daemon: apply again every interval (retrying every min(5s, interval) until a pass fully succeeds) until SIGTERM, repairing objects changed or deleted by hand; needs --yes")
	cmd.Flags().StringVar(&f.healthAddress, "health-bind-address", DefaultHealthBindAddress, "With --interval, serve /healthz (200 while the daemon runs) and /readyz (200 while the last pass fully succeeded, else 503 with its error) on this address, where kOps's kops-channels pod serves them; empty to serve neither")
	cmd.Flags().StringVar(&f.metricsAddress, "metrics-bind-address", "", "With --interval, serve /healthz, /readyz and Prometheus /metrics on this address, such as 127.0.0.1:8089 (default: not served)")
	cmd.Flags().StringVar(&f.nodeName, "node-name", "", "With --interval, the node to set --node-labels on, as kOps runs channels on each control-plane node")
	cmd.Flags().StringVar(&f.nodeLabels, "node-labels", "", "With --node-name, labels every pass sets on that node, comma-separated: key=value sets a value; a bare key, as kOps passes node-role.kubernetes.io/control-plane, adds the label with an empty value when the node lacks it and leaves its value alone otherwise")
	cmd.Flags().IntVar(&f.fullCheckEvery, "full-check-every", daemon.DefaultFullCheckEvery, "With --interval, re-apply every object of the installed addons every this many passes; the passes between re-apply only objects whose metadata changed")
	cmd.Flags().StringVar(&f.drift, "drift", string(daemon.DefaultDrift), "What to do with objects of installed addons someone changed or deleted, at each pass of --interval or, given without it (and with --yes), in one pass that checks every object and exits: report (a Warning Event, reason Drifted, on the object and the metric channels_drifted_object; nothing is changed, as kOps leaves edits until a new version), repair (re-apply them) or off; an object's annotation "+daemon.DriftAnnotation+" overrides it")
	return f
}

// validate checks the daemon flags; it returns whether they ask for a
// daemon, and whether for one pass of it (--drift without --interval).
func (f *daemonFlags) validate(cmd *cobra.Command, yes bool) (asDaemon, once bool, err error) {
	if !cmd.Flags().Changed("interval") {
		for _, name := range []string{"health-bind-address", "metrics-bind-address", "node-name", "node-labels", "full-check-every"} {
			if cmd.Flags().Changed(name) {
				return false, false, cmdline.UsageErrorf(cmd, "--%s needs --interval", name)
			}
		}
		if !cmd.Flags().Changed("drift") {
			return false, false, nil
		}
		if !yes {
			return false, false, cmdline.UsageErrorf(cmd, "--drift without --interval checks every object once and acts on it: it needs --yes")
		}
		if _, err := daemon.ParseDriftMode(f.drift); err != nil {
			return false, false, cmdline.UsageErrorf(cmd, "--drift: %v", err)
		}
		return false, true, nil
	}
	switch {
	case f.interval <= 0:
		return false, false, cmdline.UsageErrorf(cmd, "--interval must be positive, such as 1m")
	case !yes:
		return false, false, cmdline.UsageErrorf(cmd, "--interval applies changes again and again: it needs --yes")
	case f.fullCheckEvery <= 0:
		return false, false, cmdline.UsageErrorf(cmd, "--full-check-every must be 1 or more")
	case f.nodeLabels != "" && f.nodeName == "":
		return false, false, cmdline.UsageErrorf(cmd, "--node-labels needs --node-name")
	}
	if _, err := daemon.ParseDriftMode(f.drift); err != nil {
		return false, false, cmdline.UsageErrorf(cmd, "--drift: %v", err)
	}
	if _, _, err := parseNodeLabels(f.nodeLabels); err != nil {
		return false, false, cmdline.UsageErrorf(cmd, "--node-labels %q: %v; give key or key=value, comma-separated", f.nodeLabels, err)
	}
	return true, false, nil
}

// parseNodeLabels reads --node-labels: key=value pairs, and bare keys, which
// kOps passes for labels whose presence is what counts.
func parseNodeLabels(s string) (map[string]string, []string, error) {
	values := map[string]string{}
	var keys []string
	seen := map[string]bool{}
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		key, value, hasValue := strings.Cut(item, "=")
		if errs := validation.IsQualifiedName(key); len(errs) > 0 {
			return nil, nil, fmt.Errorf("key %q: %s", key, strings.Join(errs, "; "))
		}
		if seen[key] {
			return nil, nil, fmt.Errorf("key %q given twice", key)
		}
		seen[key] = true
		if !hasValue {
			keys = append(keys, key)
			continue
		}
		if errs := validation.IsValidLabelValue(value); len(errs) > 0 {
			return nil, nil, fmt.Errorf("value %q of %s: %s", value, key, strings.Join(errs, "; "))
		}
		values[key] = value
	}
	return values, keys, nil
}

// runDaemon runs channels as a daemon, or with once a single pass of it:
// what is pending is applied, and every object of the installed addons is
// checked for drift and handled as --drift says.
func (o *options) runDaemon(ctx context.Context, locations []string, f *daemonFlags, apply channels.ApplyOptions, once, allowDowngrade bool) error {
	cfg, err := o.restConfig()
	if err != nil {
		return err
	}
	nodeLabels, nodeLabelKeys, err := parseNodeLabels(f.nodeLabels)
	if err != nil {
		return err
	}
	apply.OnEvent = func(e channels.Event) {
		switch e.Type {
		case channels.EventWaiting, channels.EventProgress, channels.EventApplied, channels.EventPruned, channels.EventNote:
			fmt.Fprintln(o.stdout, stamp(e.String()))
		}
	}
	interval := f.interval
	if once {
		interval = time.Minute // no second pass is made
	}
	d, err := daemon.New(cfg, daemon.Options{
		Locations: locations,
		Interval:  interval,
		Apply:     apply,
		// The kubeconfig is read again each pass, for rotated credentials.
		RESTConfig:     o.restConfig,
		NodeName:       f.nodeName,
		NodeLabels:     nodeLabels,
		NodeLabelKeys:  nodeLabelKeys,
		FullCheckEvery: f.fullCheckEvery,
		Drift:          daemon.DriftMode(f.drift),
		AllowDowngrade: allowDowngrade,
		OnPass: func(r daemon.PassResult) {
			if r.Err != nil {
				fmt.Fprintln(o.stderr, stamp(fmt.Sprintf("pass %d failed after %s: %s", r.Number, r.Duration.Round(time.Millisecond), cmdline.OneLine(r.Err.Error()))))
				return
			}
			if len(r.Applied) > 0 || r.Drift.Changed > 0 || r.Drift.Deleted > 0 || r.Drift.Reported > 0 {
				fmt.Fprintln(o.stdout, stamp(fmt.Sprintf("pass %d: applied %d addons, repaired %d objects, reported %d drifted in %s", r.Number, len(r.Applied), r.Drift.Changed+r.Drift.Deleted, r.Drift.Reported, r.Duration.Round(time.Millisecond))))
			}
		},
	})
	if err != nil {
		return err
	}
	if once {
		// The first pass checks every object (a full check).
		r := d.Pass(ctx)
		if r.Err != nil {
			return r.Err
		}
		fmt.Fprintf(o.stdout, "applied %d addons; %d objects repaired, %d reported drifted (--drift=%s)\n", len(r.Applied), r.Drift.Changed+r.Drift.Deleted, r.Drift.Reported, f.drift)
		return nil
	}
	if f.healthAddress != "" && f.healthAddress != f.metricsAddress {
		stop, err := o.serve(f.healthAddress, d.HealthHandler(), "/healthz and /readyz")
		if err != nil {
			return withHint(err, "is kOps's kops-channels pod still running on this node? Remove it (see docs/install.md), or pass --health-bind-address")
		}
		defer stop()
	}
	if f.metricsAddress != "" {
		stop, err := o.serve(f.metricsAddress, d.Handler(), "/healthz, /readyz and /metrics")
		if err != nil {
			return err
		}
		defer stop()
	}
	fmt.Fprintln(o.stdout, stamp(fmt.Sprintf("applying %s every %s", strings.Join(locations, " "), f.interval)))
	if err := d.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	fmt.Fprintln(o.stdout, stamp("stopped"))
	return nil
}

// serve serves h on address until stop is called, and says so.
func (o *options) serve(address string, h http.Handler, what string) (stop func(), err error) {
	l, err := net.Listen("tcp", address)
	if err != nil {
		return nil, fmt.Errorf("serving %s: %w", what, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	fmt.Fprintln(o.stdout, stamp("serving "+what+" on "+l.Addr().String()))
	return func() {
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}, nil
}

// stamp prefixes a daemon's line with the time.
func stamp(line string) string {
	return time.Now().UTC().Format(time.RFC3339) + " " + line
}
