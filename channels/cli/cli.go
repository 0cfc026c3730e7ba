// Package cli is the channels command line: cobra commands over package
// channels, and the only place with flags for it.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/kos-sdn/kos/channels"
	"github.com/kos-sdn/kos/internal/cmdline"
)

// Exit codes of Main.
const (
	exitOK    = cmdline.ExitOK
	exitError = cmdline.ExitError
	exitUsage = cmdline.ExitUsage
)

// Main runs the channels command with args (without the program name) and
// returns its exit code: 0 on success, 1 when the command failed, 2 when it
// was used wrongly, 130 when SIGINT cancelled ctx (see Run) and 143 when
// SIGTERM stopped a command that does not stop cleanly on it. Errors are
// written to stderr as one line.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmd := NewCommand(stdout, stderr)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	sig := stoppedBy(ctx)
	if sig == os.Interrupt {
		if err != nil {
			fmt.Fprintln(stderr, "error: interrupted: "+cmdline.OneLine(err.Error()))
		}
		return exitInterrupted
	}
	if err == nil {
		return exitOK
	}
	if sig != nil {
		fmt.Fprintln(stderr, "error: terminated: "+cmdline.OneLine(err.Error()))
		return exitTerminated
	}
	code := cmdline.Exit(stderr, err)
	if c, ok := exitCode(err); ok && code == exitError {
		return c
	}
	return code
}

// NewCommand returns the root command, writing output to stdout and warnings
// to stderr.
func NewCommand(stdout, stderr io.Writer) *cobra.Command {
	o := &options{
		// Not persistent: each restConfig reads the kubeconfig again, so a
		// daemon's passes pick up credentials rotated in it.
		config: genericclioptions.NewConfigFlags(false),
		stdout: stdout,
		stderr: stderr,
	}
	// Neither flag means anything here: objects carry their namespaces and
	// channels keeps no disk cache.
	o.config.Namespace = nil
	o.config.CacheDir = nil

	cmd := &cobra.Command{
		Use:   "channels",
		Short: "Install and upgrade cluster addons from channels",
		Long: `channels installs and upgrades cluster addons from channels.

A channel is a YAML file (kind: Addons) listing addon releases: a version,
the manifest of each, the Kubernetes versions it fits. channels picks, for
each addon, the newest release that fits the cluster; compares it with the
install record kept as an annotation on a namespace (in the format kOps
reads); and applies what is newer with server-side apply, pruning the objects
the new release dropped.

Channels are read from a path, an https:// URL or an s3:// URL.`,
		Example: `  # Show what would change, then apply it.
  channels apply channel ./bootstrap-channel.yaml
  channels apply channel ./bootstrap-channel.yaml --yes

  # See what is installed.
  channels get addons`,
		SilenceErrors:     true,
		SilenceUsage:      true,
		Args:              cmdline.NoArgs,
		RunE:              groupRun,
		PersistentPreRunE: o.setUpLogging,
	}
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return cmdline.UsageErrorf(c, "%v", err)
	})
	o.config.AddFlags(cmd.PersistentFlags())
	cmd.PersistentFlags().IntVarP(&o.verbosity, "v", "v", 0, "Log verbosity: 0 logs nothing, 1 and more log to stderr, 2 and more log each step")

	cmd.AddCommand(newApplyCommand(o), newGetCommand(o), newDeleteCommand(o), newLintCommand(o), newVersionCommand(o))
	return cmd
}

// options holds what every command shares.
type options struct {
	config    *genericclioptions.ConfigFlags
	verbosity int
	stdout    io.Writer
	stderr    io.Writer
}

// client connects to the cluster the kubeconfig flags select.
func (o *options) client() (*channels.Client, error) {
	cfg, err := o.restConfig()
	if err != nil {
		return nil, err
	}
	return channels.NewClient(cfg)
}

// restConfig is the client configuration the kubeconfig flags select.
func (o *options) restConfig() (*rest.Config, error) {
	cfg, err := o.config.ToRESTConfig()
	if err != nil {
		return nil, o.configError(err)
	}
	cfg.WarningHandler = rest.NewWarningWriter(o.stderr, rest.WarningWriterOptions{Deduplicate: true})
	cfg.UserAgent = "channels"
	return cfg, nil
}

// configError says what to do about a kubeconfig that does not load.
func (o *options) configError(err error) error {
	if clientcmd.IsEmptyConfig(err) {
		return errors.New("no cluster configured: pass --kubeconfig or set KUBECONFIG")
	}
	return withHint(fmt.Errorf("loading kubeconfig: %w", err), "check --kubeconfig, --context and KUBECONFIG")
}

// klogFlags holds klog's flags. klog is process-global, so they are
// registered once.
var (
	klogOnce  sync.Once
	klogFlags = flag.NewFlagSet("klog", flag.ContinueOnError)
)

// setUpLogging silences klog unless -v asks for it. The leader election
// library logs every lease attempt, and logs as errors the benign races of
// two runs and of a release; the errors that matter reach the user as the
// command's error instead.
func (o *options) setUpLogging(cmd *cobra.Command, _ []string) error {
	klogOnce.Do(func() {
		klog.InitFlags(klogFlags)
		_ = klogFlags.Set("logtostderr", "false")
		_ = klogFlags.Set("alsologtostderr", "false")
		_ = klogFlags.Set("stderrthreshold", "FATAL")
		klog.SetOutput(io.Discard)
	})
	if !cmd.Flags().Changed("v") {
		return nil
	}
	if o.verbosity < 0 {
		return cmdline.UsageErrorf(cmd, "-v must be 0 or more")
	}
	if o.verbosity > 0 {
		_ = klogFlags.Set("logtostderr", "true")
	}
	return klogFlags.Set("v", strconv.Itoa(o.verbosity))
}

// hintError adds what to do to an error.
type hintError struct {
	err  error
	hint string
}

func (e *hintError) Error() string { return e.err.Error() + "; " + e.hint }

func (e *hintError) Unwrap() error { return e.err }

func withHint(err error, hint string) error { return &hintError{err: err, hint: hint} }

// groupRun shows the help of a command that groups subcommands.
func groupRun(cmd *cobra.Command, _ []string) error {
	return cmd.Help()
}
