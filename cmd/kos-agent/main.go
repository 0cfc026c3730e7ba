// Command kos-agent is the KOS node agent: it programs this node's switch
// for the network attachments of its node and of their virtual networks.
// kos-agent cleanup removes what it made on a node.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/kos-sdn/kos/components/agent"
	"github.com/kos-sdn/kos/components/kosapi"
	"github.com/kos-sdn/kos/components/nodecleanup"
)

func main() {
	if err := kosapi.DetectDeadConnections(); err != nil {
		fmt.Fprintf(os.Stderr, "kos-agent: %v\n", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := agent.NewCommand(os.Stdout, os.Stderr, nodecleanup.NewCommand(os.Stdout)).ExecuteContext(ctx)
	stop()
	os.Exit(agent.ExitCode(err))
}
