package apiserver

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/cli/globalflag"
	basecompatibility "k8s.io/component-base/compatibility"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/component-base/term"
	"k8s.io/component-base/version/verflag"
	"k8s.io/klog/v2"
)

// NewCommand returns the kos-apiserver command. It writes help to out; errors
// go to errOut.
func NewCommand(out, errOut io.Writer) *cobra.Command {
	o := NewOptions()
	cmd := &cobra.Command{
		Use:   "kos-apiserver",
		Short: "Serve the KOS API (network.example.com) from its own etcd",
		Long: `kos-apiserver serves the KOS API group network.example.com: Subnets,
NetworkAttachments and IPLocks, stored in an etcd of its own. The main cluster's
kube-apiserver proxies to it through an APIService; the KOS controllers and
node agents talk to it directly. It asks the main cluster who a client is and
whether the client may do what it asks (delegated authentication and
authorization), so it needs a kubeconfig for the main cluster (--kubeconfig,
--authentication-kubeconfig, --authorization-kubeconfig) unless it runs in a
pod of that cluster. Its admission plugin NodeRestriction lets a node agent
(--agent-identities) write only the status of its own node's attachments, and
there only the interface and postCreateExec parts, and read only its node's
attachments and those of the networks its node is in. Its admission plugin
PodAttachmentProtection lets only kos-controller-manager and the garbage
collector (--pod-attachment-deleters) delete a pod's NetworkAttachment, so
that a running pod keeps its interface, and a Subnet that attachments use
cannot be deleted. Its admission plugin ResourceQuota enforces the main cluster's object-count ResourceQuotas on KOS
objects (count/networkattachments.network.example.com and the like), which
the main cluster's own quota admission never sees; kube-controller-manager
counts them.`,
		SilenceUsage: true,
		PersistentPreRunE: func(*cobra.Command, []string) error {
			// Feature gates and the emulated version are read from flags
			// into a process-wide registry before anything consults it.
			return compatibilityRegistry.Set()
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			verflag.PrintAndExitIfRequested()
			if len(args) > 0 {
				return fmt.Errorf("kos-apiserver takes no arguments, got %q", args)
			}
			if err := logsapi.ValidateAndApply(o.Logs, compatibilityRegistry.FeatureGateFor(basecompatibility.DefaultKubeComponent)); err != nil {
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
			klog.FromContext(cmd.Context()).Info("Starting kos-apiserver")
			return server.Run(cmd.Context())
		},
	}
	cmd.SetOut(out)
	cmd.SetErr(errOut)

	fss := o.Flags()
	verflag.AddFlags(fss.FlagSet("global"))
	globalflag.AddGlobalFlags(fss.FlagSet("global"), cmd.Name(), logs.SkipLoggingConfigurationFlags())
	for _, fs := range fss.FlagSets {
		cmd.Flags().AddFlagSet(fs)
	}
	cols, _, _ := term.TerminalSize(out)
	cliflag.SetUsageAndHelpFunc(cmd, fss, cols)
	return cmd
}
