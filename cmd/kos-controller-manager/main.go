// Command kos-controller-manager runs the KOS subnet validator and IPAM
// controllers.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/kos-sdn/kos/components/controllermanager"
	"github.com/kos-sdn/kos/components/kosapi"
)

func main() {
	if err := kosapi.DetectDeadConnections(); err != nil {
		fmt.Fprintf(os.Stderr, "kos-controller-manager: %v\n", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := controllermanager.NewCommand(os.Stdout, os.Stderr).ExecuteContext(ctx)
	stop()
	if err != nil {
		os.Exit(1)
	}
}
