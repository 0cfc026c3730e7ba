package cli

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

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
	var yes bool
	var out *outputFlags
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
rest, then APIServices and webhooks. Objects the new release no longer has
are then deleted (found by the addon's selector), and the install record is
written last. An addon that fails keeps its old record, so a second run
retries it. A Lease (kube-system/channels) keeps two runs from interleaving.

LOCATION is a path, a file://, https:// or s3://BUCKET/KEY URL. A location
whose content is a plain manifest instead of a channel is applied as one
addon.

The plan is a table of the addons to apply or refused; -o prints it as
kubectl get would (json, yaml, name, jsonpath=..., custom-columns=...): a
List of objects of kind AddonUpdate (apiVersion ` + outputAPIVersion + `), one
per addon the channels offer for this cluster, up-to-date ones included,
with its current and offered release, whether it applies (apply) and why
(reason). With -o other than wide, what --yes does is reported on stderr.`,
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
			return o.applyChannels(cmd, args, yes, out)
		},
	}
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "Apply the changes; without it, only print the plan")
	out = addOutputFlags(cmd)
	return cmd
}

func (o *options) applyChannels(cmd *cobra.Command, locations []string, yes bool, out *outputFlags) error {
	print, err := out.printer(cmd)
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	fetcher := channels.NewFetcher()
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
	// Messages share stdout with a table only; after JSON, YAML or names
	// they go to stderr, so that stdout stays one document.
	msgs := o.stdout
	items := plan.Items
	if out.table() {
		items = planRows(plan)
	} else {
		msgs = o.stderr
	}
	objs := make([]*unstructured.Unstructured, len(items))
	for i, it := range items {
		objs[i] = planObject(it)
	}
	if len(objs) > 0 || !out.table() {
		if err := print(o.stdout, objs, func() *metav1.Table { return planTable(items, objs) }); err != nil {
			return err
		}
	}
	if len(plan.Pending()) == 0 {
		fmt.Fprintln(msgs, "No update required")
		return nil
	}
	if !yes {
		fmt.Fprintln(msgs, "\nMust specify --yes to apply changes")
		return nil
	}
	fmt.Fprintln(msgs)
	err = client.Apply(ctx, plan, channels.ApplyOptions{
		Fetcher: fetcher,
		OnEvent: func(e channels.Event) {
			switch e.Type {
			case channels.EventWaiting, channels.EventApplied, channels.EventPruned, channels.EventNote:
				fmt.Fprintln(msgs, e.String())
			}
		},
	})
	var failed *channels.ApplyError
	if errors.As(err, &failed) {
		return withHint(err, "addons that failed keep their install records: fix the cause and run again")
	}
	return err
}
