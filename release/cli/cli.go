// Package cli is the command line of kos-release: `kos-release render`
// writes a KOS release, configured by an operator's release configuration,
// for a bucket or a web server.
package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/kos-sdn/kos/addons"
	"github.com/kos-sdn/kos/internal/cmdline"
	"github.com/kos-sdn/kos/release"
	"github.com/kos-sdn/kos/release/api"
)

// Main runs kos-release with args and returns its exit code: 0, 1 for an
// error, 2 for a wrong command line. Each error is printed once, on one
// line.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmd := NewCommand(stdout, stderr)
	cmd.SetArgs(args)
	return cmdline.Exit(stderr, cmd.ExecuteContext(ctx))
}

// NewCommand returns the root command.
func NewCommand(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "kos-release",
		Short: "Render a KOS release configured for your cluster",
		Long: `kos-release renders KOS ` + release.Version + `: every addon's manifests, from the sources
built into it, with an operator's release configuration applied (images,
placement, resources, storage, patches: docs/install.md, "Configuration"),
and the channel files that list them with their hashes.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return cmdline.Usage(err) })
	root.AddCommand(newRenderCommand(stdout))
	return root
}

func newRenderCommand(stdout io.Writer) *cobra.Command {
	var config, out string
	var resolve, insecure bool
	cmd := &cobra.Command{
		Use:   "render --config FILE --out DIR",
		Short: "Write a configured release tree into DIR",
		Long: `render writes a release tree into DIR: bootstrap-channel.yaml, the other
channel files under addons/ and every manifest they list, laid out as in the
KOS repository, with the manifests' hashes in the channels. Copy DIR to a web
server, an S3 bucket or a kOps state store and apply it:
  channels apply channel https://.../bootstrap-channel.yaml --yes
The configuration file (kind ReleaseConfig, apiVersion ` + api.APIVersion + `) is read
strictly: an unknown key or a bad value is refused with its path. Without
--config the release is rendered as KOS publishes it. Rendering twice writes
the same bytes.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return cmdline.UsageErrorf(cmd, "render takes no arguments")
			}
			if out == "" {
				return cmdline.UsageErrorf(cmd, "give --out")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			var cfg *api.ReleaseConfig
			if config != "" {
				data, err := os.ReadFile(config)
				if err != nil {
					return err
				}
				if cfg, err = api.Decode(data); err != nil {
					return fmt.Errorf("%s: %w", config, err)
				}
			}
			abs, err := filepath.Abs(out)
			if err != nil {
				return err
			}
			modules, err := release.KOSModules()
			if err != nil {
				return err
			}
			opts := release.TreeOptions{Source: addons.FS, Out: abs, Config: cfg, Modules: modules}
			if resolve {
				opts.Resolve = release.RegistryResolver(cmd.Context(), insecure)
			}
			files, err := release.WriteTree(cmd.Context(), opts)
			if err != nil {
				return err
			}
			for _, f := range files {
				fmt.Fprintln(stdout, "wrote", filepath.Join(out, filepath.FromSlash(f)))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&config, "config", "", "the release configuration file (YAML or JSON); empty renders the release as published")
	cmd.Flags().StringVar(&out, "out", "", "the folder to write the release tree into (required)")
	cmd.Flags().BoolVar(&resolve, "resolve", false, "pin every image by the digest its registry has for it (images it lacks keep their tags); the configuration's own digests stay")
	cmd.Flags().BoolVar(&insecure, "insecure", false, "with --resolve, allow plain http to registries (always allowed for loopback and private addresses)")
	return cmd
}
