// Command kubectl-kos is the kubectl plugin `kubectl kos`: node agents'
// status, packet traces and support bundles of KOS. Put it on the PATH and
// run it as `kubectl kos`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/kos-sdn/kos/components/kubectlkos"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := kubectlkos.Main(ctx, os.Args[1:], genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})
	stop()
	os.Exit(code)
}
