package cli

import (
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/kos-sdn/kos/internal/cmdline"
)

// Version is the version of channels; the build may set it with
// -ldflags "-X github.com/kos-sdn/kos/channels/cli.Version=v1.2.3". When it
// is empty the module version and VCS revision Go recorded are shown.
var Version string

// versionInfo is what channels version prints.
type versionInfo struct {
	ClientVersion clientVersion `json:"clientVersion"`
	ServerVersion string        `json:"serverVersion,omitempty"`
}

type clientVersion struct {
	Version   string `json:"version"`
	Revision  string `json:"revision,omitempty"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// buildVersion reads the version of this binary.
func buildVersion() clientVersion {
	v := clientVersion{Version: Version, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		if v.Version == "" {
			v.Version = "unknown"
		}
		return v
	}
	if v.Version == "" {
		v.Version = info.Main.Version
	}
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" {
			v.Revision = s.Value
		}
	}
	return v
}

func newVersionCommand(o *options) *cobra.Command {
	var client bool
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version of channels and of the cluster",
		Long: `Print the version of channels and, unless --client is given, the version
of the cluster's API server, which kubernetesVersion ranges are matched
against (pre-release and build parts dropped).`,
		Example: `  channels version
  channels version --client -o json`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return cmdline.UsageErrorf(cmd, "takes no arguments, got %q", args[0])
			}
			switch output {
			case "", "json", "yaml":
				return nil
			}
			return cmdline.UsageErrorf(cmd, "--output must be json or yaml, not %q", output)
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := versionInfo{ClientVersion: buildVersion()}
			var serverErr error
			if !client {
				serverErr = o.serverVersion(&v)
			}
			if err := o.printVersion(v, output); err != nil {
				return err
			}
			return serverErr
		},
	}
	cmd.Flags().BoolVar(&client, "client", false, "Print only the version of channels, without asking the cluster")
	cmd.Flags().StringVarP(&output, "output", "o", "", "Output format: json or yaml (default: lines of text)")
	return cmd
}

func (o *options) serverVersion(v *versionInfo) error {
	c, err := o.client()
	if err != nil {
		return err
	}
	info, err := c.Kube.Discovery().ServerVersion()
	if err != nil {
		return withHint(fmt.Errorf("reading the server version: %w", err), "check --kubeconfig and --context, or pass --client")
	}
	v.ServerVersion = info.GitVersion
	return nil
}

func (o *options) printVersion(v versionInfo, output string) error {
	switch output {
	case "json":
		data, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return fmt.Errorf("encoding version: %w", err)
		}
		_, err = fmt.Fprintf(o.stdout, "%s\n", data)
		return err
	case "yaml":
		data, err := yaml.Marshal(v)
		if err != nil {
			return fmt.Errorf("encoding version: %w", err)
		}
		_, err = o.stdout.Write(data)
		return err
	}
	c := v.ClientVersion
	rev := ""
	if c.Revision != "" {
		rev = " (" + c.Revision + ")"
	}
	fmt.Fprintf(o.stdout, "Client Version: %s%s %s %s\n", c.Version, rev, c.GoVersion, c.Platform)
	if v.ServerVersion != "" {
		fmt.Fprintf(o.stdout, "Server Version: %s\n", v.ServerVersion)
	}
	return nil
}
