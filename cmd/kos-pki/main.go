// Command kos-pki makes and keeps the KOS certificates inside the cluster:
// the CA, the etcd and kos-apiserver certificates and the APIService's CA
// bundle. "kos-pki run" is the signer Deployment of the kos-apiserver addon
// (from 0.2.0), which renews certificates ahead of expiry; "kos-pki ensure"
// does one pass (the init containers of the 0.1.0 pods).
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
