// Command kos-pki makes and keeps the KOS certificates inside the cluster:
// the CA, the etcd and kos-apiserver certificates and the APIService's CA
// bundle. It runs as an init container of the KOS etcd and kos-apiserver
// pods.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/kos-sdn/kos/components/pki"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := pki.NewCommand(os.Stdout, os.Stderr).ExecuteContext(ctx)
	stop()
	if err != nil {
		os.Exit(1)
	}
}
