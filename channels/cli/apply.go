package cli

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kos-sdn/kos/channels"
	"github.com/kos-sdn/kos/internal/cmdline"
)

func newApplyCommand(o *options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "apply",
		Short: "Apply addons to the cluster",
		Args:  cmdline.NoArgs,
		RunE:  groupRun,
	}
	cmd.AddCommand(newApplyChannelCommand(o))
	return cmd
}

func newApplyChannelCommand(o *options) *cobra.Command {
	var (
		daemon         *daemonFlags
		yes            bool
		diff           bool
		wait           bool
		allowDowngrade bool
		adopt          bool
		timeout        time.Duration
	)
	var out *outputFlags
	cmd := &cobra.Command{
		Use:   "channel LOCATION...",
		Short: "Install or upgrade the addons of one or more channels",
		Long: `Install or upgrade the addons of one or more channels.

For each addon the channels list, the newest release whose kubernetesVersion
range fits the cluster is compared with the addon's install record (the
annotation addons.k8s.io/NAME on the addon's namespace, kube-system by
default). A release is applied when it is newer, or of the same version with
another id or manifest hash. A release older than the installed one is not
applied unless --allow-downgrade is given: going back from a release that
installed successfully is the operator's choice. A release that names the
oldest version it upgrades from (upgradesFrom) is not applied over an older
one: the plan names the release to go through first. Across several
channels, the newest release of each addon wins. An addon the channels list
but none of whose kubernetesVersion ranges fits the cluster is an error
naming the cluster's version and the ranges offered (the other addons are
applied, and the command exits 1).

Before an addon's objects are applied, the release is written as pending
(the annotation inventory.channels.kos.example.com/NAME, which get addons
shows); the install record replaces it once the release is ready. A pending
release that is still there did not finish, and the next run applies the
addon whatever its record says ("0.2.0 did not finish"): re-applying the
channel of the recorded release after a failed upgrade rolls back to it
("rollback: 0.2.0 did not finish") and prunes what only the failed release
added. That rollback needs no --allow-downgrade, since the failed release
never installed; a pending release whose objects all became ready after its
run's wait ended is completed (recorded) instead, and going back from it
needs --allow-downgrade. As a daemon (--interval), channels never rolls back
on its own, not even a failed release: it reports the addon (/readyz, the
metric channels_addon_blocked and a Warning Event on the record namespace)
and waits, unless --allow-downgrade is given.

Without --yes, the plan is printed and nothing is changed: every pending
manifest is fetched and verified (hash, YAML, kinds the server serves),
each object is dry-run with server-side apply, the ownership checks run,
and the plan lists per object whether it would be created, updated, left
unchanged, adopted, pruned, handed over to another addon or kept (with
why); a manifest that would fail fails here, with the same error. --diff adds a unified diff
of each object that would change, without managed fields and the fields the
server sets, as kubectl diff shows it; a Secret's values are masked (each key
says only added, removed, changed or unchanged). With --yes, each
addon is applied with server-side apply (field manager "channels"), in
phases: namespaces and CRDs, RBAC, configuration, services, workloads, the
rest, then APIServices and webhooks. Every object is labelled
channels.kos.example.com/addon=NAME besides the addon's selector; fields that
kOps ("kops") or kubectl's client-side apply own are taken over. With --wait
(the default), channels then waits until the addon's objects are ready
(Deployments, DaemonSets and StatefulSets rolled out, Jobs complete,
APIServices Available), printing progress, for at most --timeout. Objects the
new release no longer has are then deleted (found by the label, whatever
selector their release had), and the install record is written last. An
addon that fails, or is not ready in time, keeps its old record, so a second
run retries it. A Lease (kube-system/channels) keeps two runs from
interleaving.

With --interval (and --yes), channels runs as kOps runs its channels on each
control-plane node: a pass every interval until SIGTERM, each reading the
kubeconfig again (so rotated credentials are used) and discovery afresh,
retried every min(5s, interval) until one fully succeeds. Each pass also
checks the objects of the installed addons for drift (someone changed or
deleted them): cheaply, by listing their metadata, and by looking at every
object every --full-check-every passes (a Namespace, which several addons
may declare, drifts only when it is deleted). --drift=report (the default)
changes nothing, as kOps leaves a user's edits in place until a new
version: it posts a Warning Event (reason Drifted) on the object and sets
the metric channels_drifted_object; --drift=repair re-applies the object;
--drift=off checks nothing. An object's annotation
channels.kos.example.com/drift (repair, report or off) overrides --drift for
it, and one annotated channels.kos.example.com/create-only: "true" is
applied only when it does not exist, by installs, updates and repairs
alike. Without --interval, a run applies only addons whose release is
newer, and an object deleted by hand stays deleted; --drift=repair --yes
(no --interval) makes one daemon pass instead: it applies what is pending,
re-applies every object of the installed addons, says how many it repaired
and exits (--drift=report only reports them).

An object that two addons of the channels declare, or that carries the
channels.kos.example.com/addon label of another addon that still declares
it (or is installed and not in the channels), fails the addon with both
names and nothing of it is applied, unless the manifest annotates it
channels.kos.example.com/adopt: "true" (then the addon takes it over); two
addons that declare an object alike share it. An object another addon
stopped declaring moves without it. An object that exists and that neither
channels nor kOps's channels made (a user's, Helm's) shows as adopt in the
plan and fails its addon unless it carries that annotation or --adopt is
given. Pruning keeps every object an addon of the channels or an addon
recorded on the cluster declares (or may: one whose manifest does not load),
handing it over to that addon, a Namespace or CRD another addon's install
record uses, an object annotated channels.kos.example.com/keep: "true", and
every PersistentVolumeClaim whose manifest does not annotate it
channels.kos.example.com/deletable: "true". The Namespaces and CRDs of every addon
to apply are applied, and the CRDs Established, before any other object of
the run, so that an addon may use another's CRD (cert-manager's Issuer for
needsPKI too) in the same run. /healthz (the daemon
runs) and /readyz (200 while the last pass fully succeeded, else 503 with
its error) are served on --health-bind-address, 127.0.0.1:3986 as for kOps's
kops-channels pod; --metrics-bind-address serves them with Prometheus
/metrics. --node-name and --node-labels set labels on the node it runs on;
a bare key, as kOps passes, means the label must exist.

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

  # Show what would change in each object.
  channels apply channel ./bootstrap-channel.yaml --diff

  # Apply it.
  channels apply channel ./bootstrap-channel.yaml --yes

  # Make again what someone deleted or changed of the installed addons, once.
  channels apply channel ./bootstrap-channel.yaml --yes --drift=repair

  # As a daemon on a control-plane node, as kOps runs channels.
  channels apply channel s3://my-state-store/cluster/addons/bootstrap-channel.yaml --yes \
      --interval 1m --metrics-bind-address 127.0.0.1:8089 --node-name "$NODE_NAME" \
      --node-labels node-role.kubernetes.io/control-plane

  # Several channels at once, from S3 (S3_ENDPOINT selects another store).
  channels apply channel s3://my-state-store/cluster/addons/bootstrap-channel.yaml \
      https://example.com/addons/extra.yaml --yes`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cmdline.UsageErrorf(cmd, "give at least one channel location")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if timeout <= 0 {
				return cmdline.UsageErrorf(cmd, "--timeout must be positive, such as 5m")
			}
			opts := channels.ApplyOptions{Wait: wait, Timeout: timeout, Adopt: adopt}
			isDaemon, once, err := daemon.validate(cmd, yes)
			if err != nil {
				return err
			}
			if isDaemon || once {
				if cmd.Flags().Changed("output") || diff {
					return cmdline.UsageErrorf(cmd, "--interval and --drift print progress lines: -o and --diff do not apply")
				}
				return o.runDaemon(cmd.Context(), args, daemon, opts, once, allowDowngrade)
			}
			return o.applyChannels(cmd, args, yes, diff, out, channels.DecideOptions{AllowDowngrade: allowDowngrade}, opts)
		},
	}
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "Apply the changes; without it, only print the plan")
	cmd.Flags().BoolVar(&diff, "diff", false, "Print a unified diff of each object the plan changes")
	cmd.Flags().BoolVar(&allowDowngrade, "allow-downgrade", false, "Consent to go back: apply releases older than the installed ones, or than a pending release that became ready; with --interval, also let the daemon roll back a failed pending release (run by hand, rolling back to the recorded release after a failed upgrade needs no flag)")
	cmd.Flags().BoolVar(&wait, "wait", true, "Wait until each addon's objects are ready before pruning and recording it; --wait=false for a cluster without worker nodes yet (kOps bootstrap)")
	cmd.Flags().BoolVar(&adopt, "adopt", false, "Take over the objects of the releases that exist and that neither channels nor kOps's channels made (a user's, Helm's); without it they fail their addon unless annotated "+channels.AdoptAnnotation+"=true")
	cmd.Flags().DurationVar(&timeout, "timeout", channels.DefaultTimeout, "How long each addon's objects may take to become ready, with --wait")
	out = addOutputFlags(cmd)
	daemon = addDaemonFlags(cmd)
	return cmd
}

func (o *options) applyChannels(cmd *cobra.Command, locations []string, yes, diff bool, out *outputFlags, decide channels.DecideOptions, opts channels.ApplyOptions) error {
	print, err := out.printer(cmd)
	if err != nil {
		return err
	}
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
	plan, err := client.PlanWith(ctx, releases, decide)
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
	// The dry-run: what each pending addon does to its objects.
	// An addon that fails its dry-run still has its row; the errors come
	// after the plan.
	var previews map[string]channels.AddonPreview
	var failed *channels.ApplyError
	if len(plan.Pending()) > 0 && (!yes || diff) {
		got, err := client.Preview(ctx, plan, channels.PreviewOptions{Fetcher: fetcher, Adopt: opts.Adopt})
		if err != nil && !errors.As(err, &failed) {
			return withHint(err, "nothing was changed: fix the release and run again")
		}
		previews = map[string]channels.AddonPreview{}
		for _, p := range got {
			previews[p.Addon] = p
		}
	}
	objs := make([]*unstructured.Unstructured, len(items))
	for i, it := range items {
		objs[i] = planObject(it, previews[it.Addon.Name].Objects)
	}
	if len(objs) > 0 || !out.table() {
		if err := print(o.stdout, objs, func() *metav1.Table { return planTable(items, objs) }); err != nil {
			return err
		}
	}
	if out.table() && previews != nil {
		if err := writeObjectPlan(o.stdout, plan, previews, diff); err != nil {
			return err
		}
		if failed != nil {
			for _, f := range failed.Failed {
				fmt.Fprintf(o.stdout, "%s: error: %s\n", f.Addon, cmdline.OneLine(f.Err.Error()))
			}
		}
	}
	if failed != nil {
		return withHint(failed, "nothing was changed: fix the release and run again")
	}
	// Addons left behind the channels (no release fits the cluster, a
	// jump, ...) fail the run, after the others are applied: an upgraded
	// cluster must not silently stop being managed.
	blocked := plan.Problems()
	if len(plan.Pending()) == 0 {
		if blocked != nil {
			return blocked
		}
		fmt.Fprintln(msgs, "No update required")
		return nil
	}
	if !yes {
		fmt.Fprintln(msgs, "\nMust specify --yes to apply changes")
		return blocked
	}
	fmt.Fprintln(msgs)
	opts.Fetcher = fetcher
	opts.OnEvent = func(e channels.Event) {
		switch e.Type {
		case channels.EventWaiting, channels.EventProgress, channels.EventApplied, channels.EventPruned, channels.EventNote:
			fmt.Fprintln(msgs, e.String())
		}
	}
	err = client.Apply(ctx, plan, opts)
	if errors.As(err, &failed) {
		return withHint(errors.Join(err, blocked), "addons that failed keep their install records: fix the cause and run again")
	}
	if err != nil {
		return err
	}
	return blocked
}
