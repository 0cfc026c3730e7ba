package controllermanager

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/component-base/term"
	"k8s.io/klog/v2"
)

// NewCommand returns the kos-controller-manager command. It writes help to
// out; errors go to errOut.
func NewCommand(out, errOut io.Writer) *cobra.Command {
	o := NewOptions()
	cmd := &cobra.Command{
		Use:   "kos-controller-manager",
		Short: "Validate KOS subnets and give network attachments their addresses",
		Long: `kos-controller-manager runs the KOS controllers: the subnet validator, which
marks a Subnet validated when no other subnet of its VNI overlaps it or lives in
another namespace, and IPAM, which gives each NetworkAttachment an address of
its subnet by creating an IPLock. With --pod-networks it also runs the
pod-network controller, which gives each pod the NetworkAttachments its
k8s.v1.cni.cncf.io/networks annotation asks for on NetworkAttachmentDefinitions
of type kos. With --leader-elect (the default) only the
holder of a Lease in the main cluster runs them. It serves Prometheus metrics
and health checks on --metrics-bind-address.`,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("kos-controller-manager takes no arguments, got %q", args)
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
			m, err := config.Complete().New()
			if err != nil {
				return err
			}
			ctx := klog.NewContext(cmd.Context(), klog.Background().WithName(Component))
			return m.Run(ctx)
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
