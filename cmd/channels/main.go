// Command channels installs and upgrades cluster addons from channel files.
package main

import (
	"os"

	"github.com/kos-sdn/kos/channels/cli"
)

func main() {
	os.Exit(cli.Run(os.Args[1:], os.Stdout, os.Stderr))
}
