// Command kos-driver drives a load of KOS network attachments against a
// cluster and measures it (see package components/driver).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/kos-sdn/kos/components/driver"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := driver.NewCommand(os.Stdout, os.Stderr).ExecuteContext(ctx)
	stop()
	if err != nil {
		os.Exit(1)
	}
}
