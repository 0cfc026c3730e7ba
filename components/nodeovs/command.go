package nodeovs

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/component-base/term"
)

// NewCommand returns the kos-ovs command. It writes help to out; errors go
// to errOut.
func NewCommand(out, errOut io.Writer) *cobra.Command {
	o := NewOptions()
	cmd := &cobra.Command{
		Use:   "kos-ovs",
		Short: "Run this node's Open vSwitch (ovsdb-server and ovs-vswitchd) in the foreground",
		Long: `kos-ovs runs the node's Open vSwitch in a container of the kos-agent pod, so
that nodes need no Open vSwitch package. It creates the database in --db-dir
from --schema when missing and converts it when the schema changed, runs
ovsdb-server and ovs-vswitchd with their sockets in --run-dir, and exits with
an error when either dies (having stopped the other), so that kubelet restarts
the container. On SIGTERM it asks both to exit.

For OVS's userspace datapath, --underlay-address moves the node's underlay
address, with the other IPv4 addresses and the routes of its interface, onto
the bridge --underlay-bridge, which takes the interface as a port; it is moved
again whenever ovs-vswitchd starts, and back onto the interface when kos-ovs
exits. It serves /healthz (both daemons answer) and /readyz (and the underlay
bridge holds the address) on --health-bind-address.`,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("kos-ovs takes no arguments, got %q", args)
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
			config, err := o.Config()
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
	fss := o.Flags()
	for _, fs := range fss.FlagSets {
		cmd.Flags().AddFlagSet(fs)
	}
	cols, _, _ := term.TerminalSize(out)
	cliflag.SetUsageAndHelpFunc(cmd, fss, cols)
	return cmd
}
