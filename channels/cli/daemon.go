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
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kos-sdn/kos/channels"
)

// daemonFlags are the flags of apply channel that make it a daemon.
type daemonFlags struct {
	interval       time.Duration
	metricsAddress string
	nodeName       string
	nodeLabels     string
	fullCheckEvery int
}

func addDaemonFlags(cmd *cobra.Command) *daemonFlags {
	f := &daemonFlags{}
	cmd.Flags().DurationVar(&f.interval, "interval", 0, "Run as a daemon: apply again every interval (retrying every min(5s, interval) until a pass fully succeeds) until SIGTERM, repairing objects changed or deleted by hand; needs --yes")
	cmd.Flags().StringVar(&f.metricsAddress, "metrics-bind-address", "", "With --interval, serve /healthz, /readyz and Prometheus /metrics on this address, such as 127.0.0.1:8089 (default: not served)")
	cmd.Flags().StringVar(&f.nodeName, "node-name", "", "With --interval, the node to set --node-labels on, as kOps runs channels on each control-plane node")
	cmd.Flags().StringVar(&f.nodeLabels, "node-labels", "", "With --node-name, labels (key=value,...) every pass sets on that node")
	cmd.Flags().IntVar(&f.fullCheckEvery, "full-check-every", channels.DefaultFullCheckEvery, "With --interval, re-apply every object of the installed addons every this many passes; the passes between re-apply only objects whose metadata changed")
	return f
}

// validate checks the daemon flags; it returns whether they ask for a
// daemon.
func (f *daemonFlags) validate(cmd *cobra.Command, yes bool) (bool, error) {
	if !cmd.Flags().Changed("interval") {
		for _, name := range []string{"metrics-bind-address", "node-name", "node-labels", "full-check-every"} {
			if cmd.Flags().Changed(name) {
				return false, usageErrorf(cmd, "--%s needs --interval", name)
			}
		}
		return false, nil
	}
	switch {
	case f.interval <= 0:
		return false, usageErrorf(cmd, "--interval must be positive, such as 1m")
	case !yes:
		return false, usageErrorf(cmd, "--interval applies changes again and again: it needs --yes")
	case f.fullCheckEvery <= 0:
		return false, usageErrorf(cmd, "--full-check-every must be 1 or more")
	case f.nodeLabels != "" && f.nodeName == "":
		return false, usageErrorf(cmd, "--node-labels needs --node-name")
	}
	if _, err := labels.ConvertSelectorToLabelsMap(f.nodeLabels); err != nil {
		return false, usageErrorf(cmd, "--node-labels %q: %v; give key=value[,key=value...]", f.nodeLabels, err)
	}
	return true, nil
}

// runDaemon applies the channels every interval until ctx is cancelled.
func (o *options) runDaemon(ctx context.Context, locations []string, f *daemonFlags, apply channels.ApplyOptions) error {
	cfg, err := o.restConfig()
	if err != nil {
		return err
	}
	nodeLabels, _ := labels.ConvertSelectorToLabelsMap(f.nodeLabels)
	apply.OnEvent = func(e channels.Event) {
		switch e.Type {
		case channels.EventWaiting, channels.EventProgress, channels.EventApplied, channels.EventPruned, channels.EventNote:
			fmt.Fprintln(o.stdout, stamp(e.String()))
		}
	}
	d, err := channels.NewDaemon(cfg, channels.DaemonOptions{
		Locations:      locations,
		Interval:       f.interval,
		Apply:          apply,
		NodeName:       f.nodeName,
		NodeLabels:     nodeLabels,
		FullCheckEvery: f.fullCheckEvery,
		OnPass: func(r channels.PassResult) {
			if r.Err != nil {
				fmt.Fprintln(o.stderr, stamp(fmt.Sprintf("pass %d failed after %s: %s", r.Number, r.Duration.Round(time.Millisecond), oneLine(r.Err.Error()))))
				return
			}
			if len(r.Applied) > 0 || r.Drift.Changed > 0 || r.Drift.Deleted > 0 {
				fmt.Fprintln(o.stdout, stamp(fmt.Sprintf("pass %d: applied %d addons, repaired %d objects in %s", r.Number, len(r.Applied), r.Drift.Changed+r.Drift.Deleted, r.Duration.Round(time.Millisecond))))
			}
		},
	})
	if err != nil {
		return err
	}
	if f.metricsAddress != "" {
		l, err := net.Listen("tcp", f.metricsAddress)
		if err != nil {
			return fmt.Errorf("serving metrics: %w", err)
		}
		srv := &http.Server{Handler: d.Handler(), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(l) }()
		defer func() {
			shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(shutdown)
		}()
		fmt.Fprintln(o.stdout, stamp("serving /healthz, /readyz and /metrics on "+l.Addr().String()))
	}
	fmt.Fprintln(o.stdout, stamp(fmt.Sprintf("applying %s every %s", strings.Join(locations, " "), f.interval)))
	if err := d.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	fmt.Fprintln(o.stdout, stamp("stopped"))
	return nil
}

// stamp prefixes a daemon's line with the time.
func stamp(line string) string {
	return time.Now().UTC().Format(time.RFC3339) + " " + line
}
