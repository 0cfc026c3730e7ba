package pki

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
)

// NewCommand returns the kos-pki command. It prints one line per object it
// ensured to out; errors go to errOut.
func NewCommand(out, errOut io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "kos-pki",
		Short: "Make and keep the KOS certificates inside the cluster",
		Long: `kos-pki makes the certificates of KOS inside the cluster, so that no operator
ever runs openssl: a CA, the KOS etcd's server, peer and client certificates
and kos-apiserver's serving certificate, each in a Secret, and the CA bundle of
the KOS APIService. It runs as an init container of the etcd and kos-apiserver
pods.`,
		SilenceUsage: true,
	}
	root.SetOut(out)
	root.SetErr(errOut)
	root.AddCommand(newEnsureCommand(out))
	return root
}

func newEnsureCommand(out io.Writer) *cobra.Command {
	o := NewEnsureOptions()
	cmd := &cobra.Command{
		Use:   "ensure",
		Short: "Make the missing KOS Secrets, keep the others, renew stale certificates",
		Long: `ensure makes the KOS Secrets of a set exist: the CA (kos-ca) and the leaf
certificates it signs (etcd: kos-etcd-server, kos-etcd-peer; apiserver:
kos-etcd-client, kos-apiserver-serving; all: every one). An existing Secret is
kept, so certificates survive re-applies and upgrades; a leaf certificate whose
names no longer match or that expires within 30 days is re-issued by the
existing CA. With --apiservice it also sets that APIService's CA bundle. It
prints one line per object: created, kept, renewed or patched. Many runs at
once end with one consistent set of Secrets.`,
		Example: `  # In the init container of an etcd member:
  kos-pki ensure --secrets etcd
  # In the init container of kos-apiserver:
  kos-pki ensure --secrets apiserver --apiservice v1alpha1.network.example.com`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("kos-pki ensure takes no arguments, got %q", args)
			}
			if err := logsapi.ValidateAndApply(o.Logs, nil); err != nil {
				return err
			}
			defer logs.FlushLogs()
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
			run, err := config.Complete().New()
			if err != nil {
				return err
			}
			return run.Run(cmd.Context(), out)
		},
	}
	fss := o.Flags()
	for _, fs := range fss.FlagSets {
		cmd.Flags().AddFlagSet(fs)
	}
	return cmd
}
