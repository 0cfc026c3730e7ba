package cniserver

import (
	"context"
	"sync"
	"time"

	"github.com/containernetworking/cni/pkg/types"
)

// budgets holds when each sandbox's first ADD began, so that the ADDs of
// one sandbox (Multus runs one per network, one after the other, within
// kubelet's one call to the runtime) wait no longer together than the
// total wait. A sandbox's entry goes with its DEL, or once it is twice the
// total wait old: kubelet makes a new sandbox (a new container ID) when
// one fails.
type budgets struct {
	mu    sync.Mutex
	start map[string]time.Time
}

// wait returns how long an ADD of sandbox containerID at now may wait: wait,
// or less when the sandbox's earlier ADDs used up part of total; a CNI
// error when they used it all.
func (b *budgets) wait(containerID string, wait, total time.Duration, now time.Time) (time.Duration, *types.Error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.start == nil {
		b.start = map[string]time.Time{}
	}
	for id, t := range b.start {
		if now.Sub(t) > 2*total {
			delete(b.start, id)
		}
	}
	start, ok := b.start[containerID]
	if !ok {
		start = now
		b.start[containerID] = now
	}
	left := start.Add(total).Sub(now)
	if left <= 0 {
		return 0, cniError(types.ErrTryAgainLater, "the ADDs of sandbox %s have waited %s together, kos-agent's total for one sandbox (under kubelet's runtime request timeout); kubelet tries again with a new sandbox", containerID, now.Sub(start).Round(time.Millisecond))
	}
	return min(wait, left), nil
}

// end forgets sandbox containerID.
func (b *budgets) end(containerID string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.start, containerID)
}

// replugKey marks the context of a plug that Replug makes, which no
// runtime waits for and so has no sandbox's total wait.
type replugKey struct{}

func isReplug(ctx context.Context) bool { return ctx.Value(replugKey{}) != nil }
