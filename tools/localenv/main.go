// Command localenv starts, inspects and stops a local Kubernetes control
// plane (etcd and kube-apiserver) that outlives it, for people and for
// `make demo`. Run `go run ./tools/localenv --help`.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	// Progress written to a closed pipe (localenv up | head) must not kill
	// up half-way: the write fails instead, and the start goes on.
	signal.Ignore(syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newCommand(os.Stdout, os.Stderr).ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "localenv: %v\n", err)
	}
	os.Exit(exitCode(err))
}
