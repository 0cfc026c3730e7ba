package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/kos-sdn/kos/tools/kosinstall"
)

// pingTimeout is how long one echo request waits for its reply.
const pingTimeout = time.Second

// pingLoss sends count echo requests from guest from to the address to and
// returns how many got no reply.
func pingLoss(ctx context.Context, from *kosinstall.Guest, to netip.Addr, count int) (int, error) {
	got, err := from.Ping(ctx, to, count, pingTimeout)
	if err != nil {
		return count - got, fmt.Errorf("pinging %s from guest %s: %w", to, from.Name, err)
	}
	return count - got, nil
}

// awaitPing pings to from guest from until a reply comes back, for at most
// timeout, and returns how long that took: the first packets across a new
// tunnel may be lost while the userspace datapath resolves its neighbour.
func awaitPing(t *testing.T, from *kosinstall.Guest, to netip.Addr, timeout time.Duration) time.Duration {
	t.Helper()
	began := time.Now()
	for {
		lost, err := pingLoss(t.Context(), from, to, 1)
		if err != nil {
			t.Fatal(err)
		}
		if lost == 0 {
			return time.Since(began)
		}
		if time.Since(began) > timeout {
			t.Fatalf("guest %s (%s, node %s) got no reply from %s within %s", from.Name, from.IP, from.Attachment.Spec.Node, to, timeout)
		}
	}
}

// checkPings pings every pair of guests (from each to every other) count
// times, after a first reply, and fails on more than maxLoss lost replies
// of one pair. It logs the losses of every pair.
func checkPings(t *testing.T, guests []*kosinstall.Guest, count, maxLoss int, firstReply time.Duration) {
	t.Helper()
	for _, from := range guests {
		for _, to := range guests {
			if from == to {
				continue
			}
			awaitPing(t, from, to.IP, firstReply)
			lost, err := pingLoss(t.Context(), from, to.IP, count)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("ping %s (%s) -> %s (%s): %d of %d lost", from.Attachment.Name, from.Attachment.Spec.Node, to.Attachment.Name, to.Attachment.Spec.Node, lost, count)
			if lost > maxLoss {
				t.Errorf("ping %s -> %s across nodes %s -> %s: %d of %d lost, want at most %d", from.Attachment.Name, to.Attachment.Name, from.Attachment.Spec.Node, to.Attachment.Spec.Node, lost, count, maxLoss)
			}
		}
	}
}
