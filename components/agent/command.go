package agent

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/component-base/term"

	"github.com/kos-sdn/kos/internal/cmdline"
)

// Exit codes of kos-agent (ExitCode).
const (
	ExitOK    = 0
	ExitError = 1
	ExitUsage = cmdline.ExitUsage
)

// NewCommand returns the kos-agent command, with subcommands such as
// `cleanup` (package nodecleanup), which main adds so that the agent
// depends on none of them. It writes help to out; errors go to errOut.
func NewCommand(out, errOut io.Writer, subcommands ...*cobra.Command) *cobra.Command {
	o := NewOptions()
	cmd := &cobra.Command{
		Use:   "kos-agent",
		Short: "Run the KOS node agent: attachments to interfaces and flows on this node's switch",
		Long: `kos-agent runs on every node with KOS network attachments. It watches the
attachments of its node, and those of every virtual network they are in, and
programs the node's Open vSwitch bridge to match: an interface and three flows
per local attachment, two flows per remote one, tunnelled over VXLAN to the
other nodes. It writes each local attachment's interface name, MAC address and
host IP into its status, and reconciles the switch on start, after
ovs-vswitchd restarts and periodically. It serves Prometheus metrics and
/healthz on --metrics-bind-address, and its debug endpoints, to users the
cluster allows nodes/kos-debug, on --debug-bind-address.

kos-agent cleanup removes what the agent made on a node once its addon is
deleted: see kos-agent cleanup --help.`,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("kos-agent takes no arguments, got %q", args)
			}
			if err := logsapi.ValidateAndApply(o.Logs, nil); err != nil {
				return err
			}
			defer logs.FlushLogs()
			cliflag.PrintFlags(cmd.Flags())
			if err := o.Complete(); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			config, err := o.Config(cmd.Context())
			if err != nil {
				return err
			}
			server, err := config.Complete().New()
			if err != nil {
				return err
			}
			return server.Run(cmd.Context())
		},
	}
	cmd.SetOut(out)
	cmd.SetErr(errOut)
	cmd.CompletionOptions.DisableDefaultCmd = true
	cmd.AddCommand(subcommands...)
	fss := o.Flags()
	for _, fs := range fss.FlagSets {
		cmd.Flags().AddFlagSet(fs)
	}
	cols, _, _ := term.TerminalSize(out)
	cliflag.SetUsageAndHelpFunc(cmd, fss, cols)
	return cmd
}

// ExitCode returns the exit code of kos-agent for the error its command
// returned: 0 for none, 2 for a wrong command line, the error's own when it
// has one (an ExitCode method, as cleanup's refusal while an agent serves:
// 3), 1 otherwise.
func ExitCode(err error) int {
	var coder interface{ ExitCode() int }
	switch {
	case err == nil:
		return ExitOK
	case cmdline.IsUsage(err):
		return ExitUsage
	case errors.As(err, &coder):
		return coder.ExitCode()
	default:
		return ExitError
	}
}
