package cli

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/kos-sdn/kos/channels"
)

func newGetCommand(o *options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "get",
		Short: "Show what is installed",
		Args:  noArgs,
		RunE:  groupRun,
	}
	cmd.AddCommand(newGetAddonsCommand(o))
	return cmd
}

func newGetAddonsCommand(o *options) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:     "addons",
		Aliases: []string{"addon"},
		Short:   "List the addons installed on the cluster",
		Long: `List the addons installed on the cluster: every install record
(an annotation addons.k8s.io/NAME on a namespace), whether channels or kOps
wrote it.`,
		Example: `  channels get addons
  channels get addons -o json`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageErrorf(cmd, "takes no arguments, got %q", args[0])
			}
			switch output {
			case "", "json", "yaml":
				return nil
			}
			return usageErrorf(cmd, "--output must be json or yaml, not %q", output)
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.getAddons(cmd, output)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "Output format: json or yaml (default: a table)")
	return cmd
}

// addonRow is one installed addon as -o json and -o yaml print it.
type addonRow struct {
	Namespace        string              `json:"namespace"`
	Name             string              `json:"name"`
	Version          string              `json:"version,omitempty"`
	ID               string              `json:"id,omitempty"`
	Channel          string              `json:"channel,omitempty"`
	ManifestHash     string              `json:"manifestHash,omitempty"`
	SystemGeneration int                 `json:"systemGeneration,omitempty"`
	Inventory        *channels.Inventory `json:"inventory,omitempty"`
	// Invalid holds a record that does not parse, as found.
	Invalid string `json:"invalid,omitempty"`
}

func (o *options) getAddons(cmd *cobra.Command, output string) error {
	client, err := o.client()
	if err != nil {
		return err
	}
	installed, err := client.Installed(cmd.Context())
	if err != nil {
		return withHint(err, "check --kubeconfig and --context")
	}
	rows := make([]addonRow, len(installed))
	for i, in := range installed {
		rows[i] = addonRow{Namespace: in.Namespace, Name: in.Name, Invalid: in.Invalid}
		if r := in.Record; r != nil {
			rows[i].Version, rows[i].ID, rows[i].Channel = r.Version, r.ID, r.Channel
			rows[i].ManifestHash, rows[i].SystemGeneration, rows[i].Inventory = r.ManifestHash, r.SystemGeneration, r.Inventory
		}
	}
	switch output {
	case "json":
		data, err := json.MarshalIndent(rows, "", "  ")
		if err != nil {
			return fmt.Errorf("encoding addons: %w", err)
		}
		_, err = fmt.Fprintf(o.stdout, "%s\n", data)
		return err
	case "yaml":
		data, err := yaml.Marshal(rows)
		if err != nil {
			return fmt.Errorf("encoding addons: %w", err)
		}
		_, err = o.stdout.Write(data)
		return err
	}
	if len(rows) == 0 {
		fmt.Fprintln(o.stderr, "No addons installed")
		return nil
	}
	tw := tabwriter.NewWriter(o.stdout, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tNAME\tVERSION\tID\tCHANNEL")
	for _, r := range rows {
		version := orDash(r.Version)
		if r.Invalid != "" {
			version = "<unreadable record>"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Namespace, r.Name, version, orDash(r.ID), orDash(r.Channel))
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
