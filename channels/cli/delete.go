package cli

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kos-sdn/kos/channels"
	"github.com/kos-sdn/kos/channels/channel"
	"github.com/kos-sdn/kos/internal/cmdline"
)

func newDeleteCommand(o *options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "delete",
		Short: "Uninstall addons",
		Args:  cmdline.NoArgs,
		RunE:  groupRun,
	}
	cmd.AddCommand(newDeleteAddonCommand(o))
	return cmd
}

func newDeleteAddonCommand(o *options) *cobra.Command {
	var (
		yes        bool
		namespace  string
		selector   string
		namespaces bool
		crds       bool
	)
	cmd := &cobra.Command{
		Use:     "addon NAME...",
		Aliases: []string{"addons"},
		Short:   "Uninstall addons: delete their objects, then their install records",
		Long: `Uninstall addons: delete the objects each addon applied, then its install
record.

The install record (the annotation addons.k8s.io/NAME on the record
namespace) lists the kinds and namespaces the addon applied; channels lists
them by the label every object of the addon carries
(` + channels.IdentityLabel + `=NAME), narrowed by --selector when given.
As when pruning, objects a controller owns and objects of another addon are
kept, and so are the addon's Namespaces and CustomResourceDefinitions unless
--include-namespaces or --include-crds asks (deleting them deletes
everything in them, or every custom resource of them). The record
namespace and Kubernetes' own namespaces are never deleted, nor is a
Namespace that holds an object channels keeps (below), whoever made it,
or a CRD of which a kept custom resource exists: the plan lists it as
kept and names those objects. Delete them yourself first (or remove
their keep annotation before running with --yes), then the Namespace or
CRD. An object
another installed addon declares is kept and handed over to it (and one
that an installed addon may declare, its release unreadable, is kept);
PersistentVolumeClaims are kept unless their manifest annotates them
` + channels.DeletableAnnotation + `: "true", and any object annotated
` + channels.KeepAnnotation + `: "true" is kept.

Without --yes the objects are listed and nothing is changed. With --yes
they are deleted, webhooks and APIServices first, and the install record is
removed last: if a delete fails the record stays, and a second run retries.
An install record written by kOps or an older channels carries no identity
label: give the addon's selector with --selector.`,
		Example: `  # See what would be deleted, then delete it.
  channels delete addon kos-agent
  channels delete addon kos-agent --yes

  # Remove KOS entirely, its namespace and CRDs included.
  channels delete addon kos-agent kos-controller-manager kos-apiserver kos-etcd \
      --include-namespaces --include-crds --yes`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cmdline.UsageErrorf(cmd, "give the name of at least one addon")
			}
			if _, err := labels.ConvertSelectorToLabelsMap(selector); err != nil {
				return cmdline.UsageErrorf(cmd, "--selector %q: %v; give key=value[,key=value...]", selector, err)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			sel, _ := labels.ConvertSelectorToLabelsMap(selector)
			return o.deleteAddons(cmd, args, namespace, yes, channels.DeleteOptions{Selector: sel, Namespaces: namespaces, CRDs: crds})
		},
	}
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "Delete; without it, only list what would be deleted")
	cmd.Flags().StringVarP(&namespace, "namespace", "n", channel.DefaultNamespace, "The namespace holding the addons' install records")
	cmd.Flags().StringVarP(&selector, "selector", "l", "", "The addon's selector (key=value,...): narrows the lists; needed for records without an identity label")
	cmd.Flags().BoolVar(&namespaces, "include-namespaces", false, "Delete the addon's Namespaces too, with everything in them")
	cmd.Flags().BoolVar(&crds, "include-crds", false, "Delete the addon's CustomResourceDefinitions too, with all their custom resources")
	return cmd
}

func (o *options) deleteAddons(cmd *cobra.Command, names []string, namespace string, yes bool, opts channels.DeleteOptions) error {
	ctx := cmd.Context()
	client, err := o.client()
	if err != nil {
		return err
	}
	// The addons deleted together do not keep each other's Namespaces.
	opts.Along = names
	var plans []*channels.Uninstall
	for _, name := range names {
		u, err := client.PlanUninstall(ctx, namespace, name, opts)
		if err != nil {
			return err
		}
		plans = append(plans, u)
		for _, obj := range u.Delete {
			fmt.Fprintf(o.stdout, "%s: delete %s\n", name, obj)
		}
		for _, obj := range u.Keep {
			fmt.Fprintf(o.stdout, "%s: keep %s (%s)\n", name, obj, obj.Reason)
		}
		fmt.Fprintf(o.stdout, "%s: remove install record %s%s from namespace %s\n", name, channels.AnnotationPrefix, name, namespace)
	}
	if !yes {
		fmt.Fprintln(o.stdout, "\nMust specify --yes to delete")
		return nil
	}
	fmt.Fprintln(o.stdout)
	opts.OnEvent = func(e channels.Event) {
		switch e.Type {
		case channels.EventWaiting, channels.EventApplied, channels.EventPruned, channels.EventNote:
			fmt.Fprintln(o.stdout, e.String())
		}
	}
	var errs []error
	for _, u := range plans {
		if err := client.Uninstall(ctx, u, opts); err != nil {
			errs = append(errs, fmt.Errorf("addon %q: %w", u.Name, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return withHint(err, "the install records of addons that failed stay: fix the cause and run again")
	}
	return nil
}
