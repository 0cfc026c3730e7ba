package cli

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/kos-sdn/kos/channels"
)

func newApplyCommand(o *options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "apply",
		Short: "Apply addons to the cluster",
		Args:  noArgs,
		RunE:  groupRun,
	}
	cmd.AddCommand(newApplyChannelCommand(o))
	return cmd
}

func newApplyChannelCommand(o *options) *cobra.Command {
	var (
		yes     bool
		wait    bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "channel LOCATION...",
		Short: "Install or upgrade the addons of one or more channels",
		Long: `Install or upgrade the addons of one or more channels.

For each addon the channels list, the newest release whose kubernetesVersion
range fits the cluster is compared with the addon's install record (the
annotation addons.k8s.io/NAME on the addon's namespace, kube-system by
default). A release is applied when it is newer, or of the same version with
another id or manifest hash. A release older than the installed one is never
applied. Across several channels, the newest release of each addon wins.

Without --yes, the plan is printed and nothing is changed. With --yes, each
addon is applied with server-side apply (field manager "channels"), in
phases: namespaces and CRDs, RBAC, configuration, services, workloads, the
rest, then APIServices and webhooks. Every object is labelled
channels.kos.example.com/addon=NAME besides the addon's selector; fields that
kOps ("kops") or kubectl's client-side apply own are taken over. With --wait
(the default), channels then waits until the addon's objects are ready
(Deployments, DaemonSets and StatefulSets rolled out, Jobs complete,
APIServices Available), printing progress, for at most --timeout. Objects the
new release no longer has are then deleted (found by the addon's selector and
label), and the install record is written last. An addon that fails, or is not
ready in time, keeps its old record, so a second run retries it. A Lease
(kube-system/channels) keeps two runs from interleaving.

LOCATION is a path, a file://, https:// or s3://BUCKET/KEY URL. A location
whose content is a plain manifest instead of a channel is applied as one
addon.`,
		Example: `  # Show the plan.
  channels apply channel ./bootstrap-channel.yaml

  # Apply it.
  channels apply channel ./bootstrap-channel.yaml --yes

  # Several channels at once, from S3 (S3_ENDPOINT selects another store).
  channels apply channel s3://my-state-store/cluster/addons/bootstrap-channel.yaml \
      https://example.com/addons/extra.yaml --yes`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErrorf(cmd, "give at least one channel location")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if timeout <= 0 {
				return usageErrorf(cmd, "--timeout must be positive, such as 5m")
			}
			return o.applyChannels(cmd, args, yes, channels.ApplyOptions{Wait: wait, Timeout: timeout})
		},
	}
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "Apply the changes; without it, only print the plan")
	cmd.Flags().BoolVar(&wait, "wait", true, "Wait until each addon's objects are ready before pruning and recording it; --wait=false for a cluster without worker nodes yet (kOps bootstrap)")
	cmd.Flags().DurationVar(&timeout, "timeout", channels.DefaultTimeout, "How long each addon's objects may take to become ready, with --wait")
	return cmd
}

func (o *options) applyChannels(cmd *cobra.Command, locations []string, yes bool, opts channels.ApplyOptions) error {
	ctx := cmd.Context()
	fetcher := channels.NewFetcher()
	fetcher.Warn = func(msg string) { fmt.Fprintln(o.stderr, "warning: "+msg) }
	var releases []*channels.Addon
	for _, loc := range locations {
		got, err := channels.Load(ctx, fetcher, loc)
		if err != nil {
			return err
		}
		releases = append(releases, got...)
	}
	client, err := o.client()
	if err != nil {
		return err
	}
	plan, err := client.Plan(ctx, releases)
	if err != nil {
		return withHint(err, "check --kubeconfig and --context")
	}
	if err := plan.WriteTable(o.stdout); err != nil {
		return err
	}
	if len(plan.Pending()) == 0 {
		fmt.Fprintln(o.stdout, "No update required")
		return nil
	}
	if !yes {
		fmt.Fprintln(o.stdout, "\nMust specify --yes to apply changes")
		return nil
	}
	fmt.Fprintln(o.stdout)
	opts.Fetcher = fetcher
	opts.OnEvent = func(e channels.Event) {
		switch e.Type {
		case channels.EventWaiting, channels.EventProgress, channels.EventApplied, channels.EventPruned, channels.EventNote:
			fmt.Fprintln(o.stdout, e.String())
		}
	}
	err = client.Apply(ctx, plan, opts)
	var failed *channels.ApplyError
	if errors.As(err, &failed) {
		return withHint(err, "addons that failed keep their install records: fix the cause and run again")
	}
	return err
}
