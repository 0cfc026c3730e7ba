package cli

import (
	"fmt"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kos-sdn/kos/channels"
	"github.com/kos-sdn/kos/internal/cmdline"
)

func newGetCommand(o *options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "get",
		Short: "Show what is installed",
		Args:  cmdline.NoArgs,
		RunE:  groupRun,
	}
	cmd.AddCommand(newGetAddonsCommand(o))
	return cmd
}

func newGetAddonsCommand(o *options) *cobra.Command {
	var out *outputFlags
	cmd := &cobra.Command{
		Use:     "addons",
		Aliases: []string{"addon"},
		Short:   "List the addons installed on the cluster",
		Long: `List the addons installed on the cluster: every install record
(an annotation addons.k8s.io/NAME on a namespace), whether channels or kOps
wrote it.

-o json, yaml and the templates see a List of objects of kind Addon
(apiVersion ` + outputAPIVersion + `): metadata.name and metadata.namespace name
the addon and its record namespace, record holds the install record as
written (version, channel, id, manifestHash, systemGeneration, inventory),
invalidRecord the annotation when it does not parse, and pending the release
a run started applying and did not finish (its objects never became ready,
or the run died): version, channel, id, manifestHash and the kinds and
namespaces its objects may be in. The PENDING column shows its version; the
next apply of any release of the addon finishes or replaces it, and prunes
what only it added.`,
		Example: `  channels get addons
  channels get addons -o wide
  channels get addons -o json
  channels get addons -o jsonpath='{.items[*].metadata.name}'
  channels get addons -o custom-columns=NAME:.metadata.name,VERSION:.record.version --no-headers`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return cmdline.UsageErrorf(cmd, "takes no arguments, got %q", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.getAddons(cmd, out)
		},
	}
	out = addOutputFlags(cmd)
	return cmd
}

// addonObject is an installed addon as the printers see it.
func addonObject(in channels.Installed) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": outputAPIVersion,
		"kind":       "Addon",
		"metadata":   map[string]any{"name": in.Name, "namespace": in.Namespace},
	}}
	if in.Record != nil {
		rec, err := toUnstructured(in.Record)
		if err != nil {
			return nil, err
		}
		u.Object["record"] = rec.Object
	}
	if in.Invalid != "" {
		u.Object["invalidRecord"] = in.Invalid
	}
	if in.Pending != nil {
		p, err := toUnstructured(in.Pending)
		if err != nil {
			return nil, err
		}
		u.Object["pending"] = p.Object
	}
	return u, nil
}

var addonColumns = []metav1.TableColumnDefinition{
	{Name: "Namespace", Type: "string"},
	{Name: "Name", Type: "string", Format: "name"},
	{Name: "Version", Type: "string"},
	{Name: "ID", Type: "string"},
	{Name: "Channel", Type: "string"},
	{Name: "Pending", Type: "string"},
	{Name: "Manifest-Hash", Type: "string", Priority: 1},
	{Name: "Generation", Type: "string", Priority: 1},
	{Name: "Kinds", Type: "string", Priority: 1},
}

func (o *options) getAddons(cmd *cobra.Command, out *outputFlags) error {
	print, err := out.printer(cmd)
	if err != nil {
		return err
	}
	client, err := o.client()
	if err != nil {
		return err
	}
	installed, err := client.Installed(cmd.Context())
	if err != nil {
		return withHint(err, "check --kubeconfig and --context")
	}
	objs := make([]*unstructured.Unstructured, len(installed))
	for i, in := range installed {
		if objs[i], err = addonObject(in); err != nil {
			return err
		}
	}
	if len(objs) == 0 && out.table() {
		fmt.Fprintln(o.stderr, "No addons installed")
		return nil
	}
	return print(o.stdout, objs, func() *metav1.Table {
		rows := make([]metav1.TableRow, len(installed))
		for i, in := range installed {
			version, id, channel, hash, gen, kinds, pending := "<unreadable record>", "-", "-", "-", "-", "-", "-"
			if in.Record == nil && in.Invalid == "" {
				version = "-"
			}
			if p := in.Pending; p != nil {
				pending = describeRelease(p.Version, p.ID)
			}
			if r := in.Record; r != nil {
				version, id, channel, hash = orDash(r.Version), orDash(r.ID), orDash(r.Channel), orDash(shortHash(r.ManifestHash))
				if r.SystemGeneration != 0 {
					gen = fmt.Sprint(r.SystemGeneration)
				}
				if r.Inventory != nil && len(r.Inventory.Kinds) > 0 {
					kinds = fmt.Sprint(len(r.Inventory.Kinds))
				}
			}
			rows[i] = metav1.TableRow{
				Cells:  []any{in.Namespace, in.Name, version, id, channel, pending, hash, gen, kinds},
				Object: runtimeObject(objs[i]),
			}
		}
		return &metav1.Table{ColumnDefinitions: addonColumns, Rows: rows}
	})
}

// shortHash shows the first 12 hex digits of a manifest hash.
func shortHash(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
