package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/kos-sdn/kos/tools/addons/bundle"
	"github.com/kos-sdn/kos/tools/addons/release"
)

// settingFlags collects --set ADDON.KEY=VALUE.
type settingFlags struct{ settings *[]release.Setting }

func (s settingFlags) String() string {
	if s.settings == nil {
		return ""
	}
	var out []string
	for _, x := range *s.settings {
		out = append(out, x.String())
	}
	return strings.Join(out, ",")
}

func (s settingFlags) Set(v string) error {
	got, err := release.ParseSetting(v)
	if err != nil {
		return err
	}
	*s.settings = append(*s.settings, got)
	return nil
}

// flavourNames lists the bundle's flavours for help texts.
func flavourNames() string {
	var names []string
	for _, f := range bundle.Flavours {
		names = append(names, f.Name)
	}
	return strings.Join(names, ", ")
}

// runRelease is `addons release`: it writes a publishable release tree.
func runRelease(ctx context.Context, root string, args []string, stdout, stderr io.Writer) int {
	opts := release.Options{Root: root}
	flags := flag.NewFlagSet("addons release", flag.ContinueOnError)
	flags.SetOutput(stderr)
	flags.Usage = func() {
		fmt.Fprint(flags.Output(), `Usage: addons release --registry REGISTRY[/PREFIX] --out DIR [flags]

Writes a release to publish (make release): bootstrap-channel.yaml and
addons/local-channel.yaml at the top of DIR and the manifests of every
release they list, up to --version, under DIR/addons/, as in the
repository. In the manifests every image kos.example.com/NAME:TAG becomes
REGISTRY/PREFIX/NAME:TAG, pinned by digest when the registry has it (push the
images first: go run ./tools/kosimages --push REGISTRY/PREFIX), and the
settings are applied; the channels carry the manifests' new hashes. With
--flavor, bootstrap-channel.yaml holds that flavour's releases (local: the
single-node etcd and the userspace agent) and addons/local-channel.yaml is
not written: kOps's channels applies one file per kind of cluster. The
channels written must pass channels lint. Copy DIR
to a web server, an S3 bucket or a kOps state store and apply it with
  channels apply channel https://.../bootstrap-channel.yaml --yes

Settings (--set ADDON.KEY=VALUE, repeatable):
`+release.SettingsHelp()+`
Flags:
`)
		flags.PrintDefaults()
	}
	var settings []release.Setting
	flags.StringVar(&opts.Registry, "registry", "", "the registry and repository prefix the images were pushed to, such as registry.example.com/kos (required)")
	flags.StringVar(&opts.Out, "out", "", "the folder to write the release into (required)")
	flags.StringVar(&opts.Version, "version", "", "the newest addon version the release carries (newer releases are left out); empty means the newest there is")
	flags.BoolVar(&opts.Resolve, "resolve", true, "pin each image by the digest the registry has for it; --resolve=false writes tags only, without asking the registry")
	flags.BoolVar(&opts.Insecure, "insecure", false, "allow plain http to the registry when resolving (always allowed for loopback and private addresses)")
	flags.StringVar(&opts.Flavour, "flavor", "", "write the channels of one flavour ("+flavourNames()+"): its releases of every addon in bootstrap-channel.yaml, so that kOps's channels applies one file; empty writes the repository's channels")
	flags.Var(settingFlags{&settings}, "set", "ADDON.KEY=VALUE: an operator setting (repeatable; see above)")
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if flags.NArg() > 0 || opts.Registry == "" || opts.Out == "" {
		fmt.Fprintln(stderr, "addons release: give --registry and --out, and no arguments")
		flags.Usage()
		return 2
	}
	opts.Settings = settings
	result, err := release.Write(ctx, opts)
	if err != nil {
		fmt.Fprintf(stderr, "addons release: %v\n", err)
		return 1
	}
	for _, f := range result.Files {
		fmt.Fprintln(stdout, "wrote", f)
	}
	for _, image := range result.Unpinned {
		fmt.Fprintf(stderr, "addons release: %s is named by tag only, %s (not in the registry, or --resolve=false)\n", image, result.Images[image])
	}
	fmt.Fprintf(stdout, "release in %s: %d files, %d images (%d pinned by digest)\n", opts.Out, len(result.Files), len(result.Images), len(result.Images)-len(result.Unpinned))
	return 0
}
