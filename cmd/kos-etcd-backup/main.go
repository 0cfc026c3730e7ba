// Command kos-etcd-backup backs up, defragments and restores the etcd of the
// KOS API (the kos-etcd addon): "save" is the addon's CronJob, "restore" the
// first step of getting lost data back (docs/backup.md).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/kos-sdn/kos/components/etcdbackup"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := etcdbackup.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
