package nodecleanup

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/term"

	"github.com/kos-sdn/kos/internal/cmdline"
)

// ExitServing is the exit code of kos-agent cleanup when it refused
// because an agent still serves on the node (ServingError).
const ExitServing = 3

// NewCommand returns `kos-agent cleanup`, which prints its progress to out.
func NewCommand(out io.Writer) *cobra.Command {
	cfg := NewConfig()
	var stay bool
	cmd := &cobra.Command{
		Use:   "cleanup",
		Short: "Remove from this node what the kos-agent addon made on it, once the addon is deleted",
		Long: `kos-agent cleanup removes from this node what kos-agent's pod made on it, as
the 0.3.0 releases of the kos-agent and kos-agent-userspace addons run it,
and nothing else. Run it on every node once the addon is deleted, such as
with the DaemonSet of docs/examples/kos-node-cleanup.yaml.

It removes:
  - bridge --bridge (kos), with its tunnel port, its attachments' ports and
    their devices, from the Open vSwitch the agent programmed: the node's own
    one (--host-ovs-run-dir) when it runs, and the one kos-ovs ran, which
    cleanup starts from its database (--ovs-db-dir) for as long as it takes
    to delete the bridges with their devices;
  - with the userspace datapath, bridge --underlay-bridge (br-ul), after
    giving the node's underlay address and routes back to its interface as
    kos-ovs recorded them;
  - the tunnel filter: nftables table ip kos-tunnel, and its flows on
    --underlay-bridge where that bridge stays;
  - the host ends of pods' veth pairs that are left (kos and twelve hex
    digits);
  - the CNI plugin --cni-bin, the CNI socket --cni-socket, kos-ovs's
    database and run folders, and the folders the pod's host volumes made:
    the socket's folder and the database's parent when empty, and an empty
    --host-ovs-run-dir on a node without Open vSwitch of its own.
It keeps other bridges, the node's own Open vSwitch, other files and
folders, and kos-ovs's database when it holds bridges KOS did not make.

It refuses while a kos-agent serves on the node (its CNI socket or kos-ovs's
Open vSwitch answers) unless --force. Each change is printed on one line; a
second run changes nothing and says so. Paths are the node's: in a container
that mounts the node's root file system elsewhere, give --host-root.

Exit codes: 0 cleaned up, or nothing to clean up; 1 failed (run it again);
2 wrong command line; 3 refused, a kos-agent still serves on the node.

Examples:
  # On the node, after channels delete addon kos-agent.
  kos-agent cleanup

  # In a container that mounts the node's root file system at /host; stay
  # running afterwards, as a DaemonSet's container must.
  kos-agent cleanup --host-root=/host --stay`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return cmdline.UsageErrorf(cmd, "cleanup takes no arguments, got %q", args)
			}
			return nil
		},
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Out = out
			if err := Run(cmd.Context(), cfg); err != nil {
				return err
			}
			if stay {
				fmt.Fprintln(out, "Staying until stopped (--stay)")
				<-cmd.Context().Done()
			}
			return nil
		},
	}
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return cmdline.UsageErrorf(c, "%v", err)
	})
	fss := cleanupFlags(&cfg, &stay)
	for _, fs := range fss.FlagSets {
		cmd.Flags().AddFlagSet(fs)
	}
	cols, _, _ := term.TerminalSize(out)
	cliflag.SetUsageAndHelpFunc(cmd, fss, cols)
	return cmd
}

// cleanupFlags returns the flags of `kos-agent cleanup`.
func cleanupFlags(cfg *Config, stay *bool) cliflag.NamedFlagSets {
	var fss cliflag.NamedFlagSets
	fs := fss.FlagSet("cleanup")
	fs.StringVar(&cfg.Root, "host-root", cfg.Root, "Where the node's root file system is; every other path is the node's, taken under it, symbolic links followed inside it.")
	fs.StringVar(&cfg.Bridge, "bridge", cfg.Bridge, "The agent's OVS bridge, as its --bridge named it.")
	fs.StringVar(&cfg.UnderlayBridge, "underlay-bridge", cfg.UnderlayBridge, "The bridge kos-ovs moved the underlay address onto (the userspace datapath), as its --underlay-bridge named it.")
	fs.StringVar(&cfg.OVSRunDir, "ovs-run-dir", cfg.OVSRunDir, "The run dir of the Open vSwitch kos-ovs ran, as the agent's --ovs-run-dir named it.")
	fs.StringVar(&cfg.OVSDBDir, "ovs-db-dir", cfg.OVSDBDir, "The database folder of the Open vSwitch kos-ovs ran, as its --db-dir named it.")
	fs.StringVar(&cfg.HostOVSRunDir, "host-ovs-run-dir", cfg.HostOVSRunDir, "The run dir of the node's own Open vSwitch, as the agent's --host-ovs-run-dir named it.")
	fs.StringVar(&cfg.CNISocket, "cni-socket", cfg.CNISocket, "The agent's CNI socket, as its --cni-socket named it.")
	fs.StringVar(&cfg.CNIBinary, "cni-bin", cfg.CNIBinary, "The CNI plugin the agent's init container installed.")
	fs.BoolVar(&cfg.Force, "force", cfg.Force, "Clean up even while a kos-agent serves on the node; its pods' networks stop working.")
	fs.BoolVar(stay, "stay", *stay, "After cleaning up, keep running until stopped, as the container of a DaemonSet's pod must.")
	return fss
}
