package cli

import (
	"errors"
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/blang/semver/v4"
	"github.com/spf13/cobra"

	"github.com/kos-sdn/kos/channels"
	"github.com/kos-sdn/kos/channels/channel"
	"github.com/kos-sdn/kos/internal/cmdline"
)

func newLintCommand(o *options) *cobra.Command {
	var kubernetesVersion string
	cmd := &cobra.Command{
		Use:   "lint CHANNEL...",
		Short: "Check that channels are safe to apply on every Kubernetes version, with channels and with kOps's channels",
		Long: `Check channels meant to be applied together (given in the order they are
applied) for what goes wrong only on some clusters, or only once a cluster is
upgraded. For every Kubernetes version from 1.0 to 1.99, each addon's release
is chosen as apply chooses it (the newest that fits) and as kOps's channels
does (the last entry that fits), and lint refuses:

  downgrade  a newer Kubernetes gets an older release than an earlier one,
             by either tool: an old release's open-ended kubernetesVersion
             range outliving a newer release's capped one, so a cluster
             upgraded past the cap goes back to the old release;
  tie        two entries of one version fit one Kubernetes version: apply
             takes the first, kOps's channels the last;
  split      an addon's entries that fit one Kubernetes version come from
             several channels: kOps's channels applies channels one at a
             time, so the addon switches between them on every pass;
  kops       kOps's channels would choose another version than apply;
  upgrade-path
             a release names the oldest version it upgrades from
             (upgradesFrom), the channels list older releases, but on some
             Kubernetes version no release in between fits, so a cluster
             with an older release cannot upgrade.

A malformed upgradesFrom (not a version, or not below the release's own)
fails the channel's loading, as apply does.

Lint also checks where each addon's ranges end against --kubernetes-version,
the newest Kubernetes minor (by default the one channels is built for): an
addon no release of which fits it fails (rule end: clusters on it get
nothing), and one no release of which fits the next minor is a warning on
stderr (a cluster upgraded to it will fall off the channel).

Each problem is printed once, on one line, naming the entries, at the first
Kubernetes version it shows on. No cluster is contacted.

Exit status: 0 when the channels are clean, 1 when lint found a problem, 2
when a channel does not load or the command is used wrongly.`,
		Example: `  # The bundle's channels, as clusters apply them.
  channels lint bootstrap-channel.yaml
  channels lint bootstrap-channel.yaml addons/monitoring-channel.yaml`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cmdline.UsageErrorf(cmd, "give at least one channel location")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			var current *semver.Version
			if kubernetesVersion != "" {
				v, err := semver.ParseTolerant(kubernetesVersion)
				if err != nil {
					return cmdline.UsageErrorf(cmd, "--kubernetes-version %q is not a version such as 1.37", kubernetesVersion)
				}
				current = &v
			}
			return o.lint(cmd, args, current)
		},
	}
	cmd.Flags().StringVar(&kubernetesVersion, "kubernetes-version", builtKubernetes(), "The newest Kubernetes minor, which every addon must have a release for (the next minor only warns); empty checks no range end")
	return cmd
}

// builtKubernetes is the Kubernetes minor of the client library channels is
// built with (k8s.io/client-go v0.37.x is Kubernetes 1.37), "" when the
// binary does not say.
func builtKubernetes() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, d := range info.Deps {
		if d.Path != "k8s.io/client-go" {
			continue
		}
		v, err := semver.ParseTolerant(d.Version)
		if err != nil || v.Major != 0 {
			return ""
		}
		return fmt.Sprintf("1.%d", v.Minor)
	}
	return ""
}

// lint loads the channels at locations and prints what channels.Lint finds
// and, when current is set, what channel.LintRangeEnds does.
func (o *options) lint(cmd *cobra.Command, locations []string, current *semver.Version) error {
	fetcher := channels.NewFetcher()
	fetcher.Warn = func(msg string) { fmt.Fprintln(o.stderr, "warning: "+msg) }
	var releases []*channels.Addon
	for _, loc := range locations {
		got, err := channels.Load(cmd.Context(), fetcher, loc)
		if err != nil {
			return &codeError{err: err, code: exitUsage}
		}
		releases = append(releases, got...)
	}
	problems := channels.Lint(releases)
	if current != nil {
		ends, warnings := channel.LintRangeEnds(releases, *current)
		problems = append(problems, ends...)
		for _, w := range warnings {
			fmt.Fprintln(o.stderr, "warning: "+w.String())
		}
	}
	for _, p := range problems {
		fmt.Fprintln(o.stdout, p)
	}
	if len(problems) > 0 {
		return fmt.Errorf("%d problem(s) in %s", len(problems), strings.Join(locations, " "))
	}
	fmt.Fprintf(o.stdout, "%s: ok\n", strings.Join(locations, " "))
	return nil
}

// codeError is an error for which Main exits with code rather than 1.
type codeError struct {
	err  error
	code int
}

func (e *codeError) Error() string { return e.err.Error() }

func (e *codeError) Unwrap() error { return e.err }

// exitCode returns the exit code a codeError in err's chain asks for, and
// whether there is one.
func exitCode(err error) (int, bool) {
	var e *codeError
	if errors.As(err, &e) {
		return e.code, true
	}
	return 0, false
}
