// Command kos-apiserver serves the KOS API group network.example.com.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/kos-sdn/kos/components/apiserver"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := apiserver.NewCommand(os.Stdout, os.Stderr).ExecuteContext(ctx)
	stop()
	if err != nil {
		os.Exit(1)
	}
}
