package pki

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"

	"github.com/kos-sdn/kos/components/etcdbackup/backupmetrics"
	"github.com/kos-sdn/kos/components/monitoring"
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
the KOS APIService. "kos-pki run" is the signer a cluster runs: the only holder
of the CA's private key, it renews the certificates ahead of expiry while the
servers run; "kos-pki ensure" does one pass, for tests and first installs.`,
		SilenceUsage: true,
	}
	root.SetOut(out)
	root.SetErr(errOut)
	root.AddCommand(newEnsureCommand(out), newRunCommand(out))
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

func newRunCommand(out io.Writer) *cobra.Command {
	o := NewEnsureOptions()
	interval := DefaultCheckInterval
	metricsAddr := ":9296"
	// Off by default: the kos-pki of releases before 0.4.0 has no right
	// to read CronJobs and Jobs.
	backupCronJob := ""
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Keep the KOS Secrets current: ensure them again before each leaf certificate is due for renewal",
		Long: `run does what ensure does, again and again until it is stopped: each pass
makes the missing Secrets, re-issues every leaf certificate that expires within
--renew-before, sets the APIService's CA bundle, and records when each
certificate expires (kos_certificate_expiry_timestamp_seconds{secret}). With
--etcd-backup-cronjob it also exports the state of that backup CronJob of
--namespace and its Jobs (kos_etcd_backup_*; docs/metrics.md). The
next pass comes just after the next leaf is due, or after --interval. The pods
that mount the Secrets see the new files when the kubelet updates their
volumes; etcd and kos-apiserver read them without restarting. It serves
/metrics, /healthz and /readyz (a pass succeeded) on --metrics-bind-address.`,
		Example: `  # The signer Deployment of the kos-apiserver addon:
  kos-pki run --secrets all --apiservice v1alpha1.network.example.com`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("kos-pki run takes no arguments, got %q", args)
			}
			if err := logsapi.ValidateAndApply(o.Logs, nil); err != nil {
				return err
			}
			defer logs.FlushLogs()
			if err := o.Complete(); err != nil {
				return err
			}
			err := o.Validate()
			if interval <= 0 {
				err = errors.Join(err, fmt.Errorf("--interval is %s, want more than 0", interval))
			}
			if o.OutDir != "" {
				err = errors.Join(err, errors.New("--out-dir is for ensure; run leaves the files to the kubelet's Secret volumes"))
			}
			if err != nil {
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
			s := &Signer{Run: run, Interval: interval, Metrics: NewSignerMetrics(), Out: out}
			server, err := monitoring.Listen(metricsAddr, s.Handler())
			if err != nil {
				return err
			}
			if backupCronJob != "" {
				client, err := kubernetes.NewForConfig(config.REST)
				if err != nil {
					return fmt.Errorf("making a client for the backup CronJob: %w", err)
				}
				factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(o.Namespace))
				s.Metrics.Registry.MustRegister(backupmetrics.NewCollector(factory, o.Namespace, backupCronJob))
				// The informers stop when the command's context ends;
				// Shutdown waits for them.
				factory.Start(cmd.Context().Done())
				defer factory.Shutdown()
			}
			return server.ServeWhile(cmd.Context(), s.Loop)
		},
	}
	fss := o.Flags()
	fss.FlagSet("run").DurationVar(&interval, "interval", interval, "The longest time between two passes.")
	fss.FlagSet("run").StringVar(&metricsAddr, "metrics-bind-address", metricsAddr, "Where to serve /metrics, /healthz and /readyz over plain HTTP.")
	fss.FlagSet("run").StringVar(&backupCronJob, "etcd-backup-cronjob", backupCronJob, "The etcd backup CronJob of --namespace whose last success, schedule and failed or waiting Jobs to export as metrics (it needs get, list and watch of cronjobs and jobs there); empty exports none.")
	for _, fs := range fss.FlagSets {
		cmd.Flags().AddFlagSet(fs)
	}
	return cmd
}
