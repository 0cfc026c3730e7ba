// Command addons keeps the KOS addon bundle consistent (see package
// tools/addons/bundle):
//
//	go run ./tools/addons generate   fill in missing manifest hashes, write the channel files, lint them
//	go run ./tools/addons verify     say what is wrong with the bundle (channels lint included); exit 1 if anything is
//	go run ./tools/addons release --registry R --out DIR   write a release to publish (package release)
//
// `make addons` runs generate; `make verify` runs verify; `make release`
// runs release.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/kos-sdn/kos/tools/addons/bundle"
	"github.com/kos-sdn/kos/tools/reporoot"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs the command and returns its exit code: 0 for success, 1 when
// verify found problems or a step failed, 2 for a wrong command line.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	flags := flag.NewFlagSet("addons", flag.ContinueOnError)
	flags.SetOutput(stderr)
	flags.Usage = func() {
		fmt.Fprint(flags.Output(), `Usage: addons [flags] generate|verify
       addons [flags] release --registry REGISTRY[/PREFIX] --out DIR [release flags]

  generate  add the manifestHash of every release that has none (never changing
            one that is there), write bootstrap-channel.yaml and
            addons/local-channel.yaml from addons/*/addon.yaml, and fail when
            channels lint refuses them (each alone, and as applied together)
  verify    print one line per problem of the bundle and what to do about it;
            exit 1 when there is any
  release   write a release to publish, its images in REGISTRY (addons release --help)

Flags:
`)
		flags.PrintDefaults()
	}
	root := flags.String("root", "", "the repository root; empty means the nearest folder above the working directory whose go.mod declares "+reporoot.ModulePath)
	base := flags.String("base", "HEAD", "verify: the git revision whose released addons may not change (origin/main in CI); empty skips that check")
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	isRelease := flags.NArg() > 0 && flags.Arg(0) == "release"
	if !isRelease && (flags.NArg() != 1 || (flags.Arg(0) != "generate" && flags.Arg(0) != "verify")) {
		flags.Usage()
		return 2
	}
	if *root == "" {
		r, err := reporoot.Find()
		if err != nil {
			fmt.Fprintf(stderr, "addons: %v; run it in the repository or pass --root\n", err)
			return 1
		}
		*root = r
	}
	if isRelease {
		return runRelease(ctx, *root, flags.Args()[1:], stdout, stderr)
	}

	if flags.Arg(0) == "generate" {
		changes, err := bundle.Generate(ctx, *root, bundle.Channels)
		for _, c := range changes {
			fmt.Fprintln(stdout, c)
		}
		if err != nil {
			fmt.Fprintf(stderr, "addons generate: %v\n", err)
			return 1
		}
		if len(changes) == 0 {
			fmt.Fprintln(stdout, "the addon bundle is up to date")
		}
		return 0
	}

	var b *bundle.Base
	if *base != "" {
		var err error
		if b, err = bundle.GitBase(*root, *base); err != nil {
			fmt.Fprintf(stderr, "addons verify: %v; pass --base=REV, or --base= to skip comparing releases with git\n", err)
			return 1
		}
	}
	problems, err := bundle.Verify(ctx, *root, bundle.Channels, b)
	if err != nil {
		fmt.Fprintf(stderr, "addons verify: %v\n", err)
		return 1
	}
	for _, p := range problems {
		fmt.Fprintln(stderr, p)
	}
	if len(problems) > 0 {
		fmt.Fprintf(stderr, "addons verify: %d problem(s) in the addon bundle\n", len(problems))
		return 1
	}
	fmt.Fprintln(stdout, "addons verify: ok")
	return 0
}
