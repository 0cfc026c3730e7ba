package channels

import (
	"context"

	"github.com/kos-sdn/kos/channels/lease"
)

// withLease runs fn while holding the channels Lease (lease.Hold), and
// reports taking, waiting for and releasing it to r.
func (c *Client) withLease(ctx context.Context, identity string, r *reporter, fn func(context.Context) error) error {
	hooks := lease.Hooks{
		Acquired: func() {
			r.report(EventLocked, "", "Acquired lease %s/%s", lease.Namespace, lease.Name)
		},
		Waiting: func(holder string) {
			r.report(EventWaiting, "", "Waiting for another run (%s) to release lease %s/%s", holder, lease.Namespace, lease.Name)
		},
		Released: func() {
			r.report(EventUnlocked, "", "Released lease %s/%s", lease.Namespace, lease.Name)
		},
	}
	return lease.Hold(ctx, c.Kube, identity, hooks, fn)
}
