package ovs

import (
	"context"
	"sync"

	goovs "github.com/digitalocean/go-openvswitch/ovs"
	"k8s.io/klog/v2"
)

// flowBatcher applies flow changes to one bridge by group commit: a change
// that arrives while a bundle is being applied waits for it to finish, then
// goes out in one bundle with every other change that arrived meanwhile. An
// idle switch gets each change at once; a busy one gets far fewer, bigger
// bundles. Each ovs-ofctl run costs about as much as a thousand flows in
// one bundle (see BenchmarkRemoteAttachments), so concurrent callers that
// each change one attachment go nearly as fast as one batched caller.
type flowBatcher struct {
	ovs    *ovsClient
	bridge string

	mu      sync.Mutex
	pending []*flowChange
	// running is true while a goroutine applies batches; it exits when it
	// finds nothing pending, so an idle fabric runs no goroutine.
	running bool
}

// flowChange is one caller's change: one bundle's worth on its own.
type flowChange struct {
	ctx  context.Context
	mod  flowMod
	done chan error
}

// apply applies a change and returns once it is in the switch, or has
// failed, or ctx is done. In the last case the change may still be applied:
// callers retry, and creating and deleting are idempotent.
func (b *flowBatcher) apply(ctx context.Context, deletes []*goovs.MatchFlow, adds []*goovs.Flow) error {
	if len(deletes) == 0 && len(adds) == 0 {
		return nil
	}
	c := &flowChange{ctx: ctx, mod: flowMod{deletes: deletes, adds: adds}, done: make(chan error, 1)}
	b.mu.Lock()
	b.pending = append(b.pending, c)
	if !b.running {
		b.running = true
		go b.run()
	}
	b.mu.Unlock()
	select {
	case err := <-c.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run applies batches until none is pending.
func (b *flowBatcher) run() {
	for {
		b.mu.Lock()
		batch := b.pending
		b.pending = nil
		if len(batch) == 0 {
			b.running = false
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		b.applyBatch(batch)
	}
}

// applyBatch applies a batch in one bundle, each change in the order it
// came, so that the outcome is the one of applying them one after the
// other. When that fails and the batch has several changes, each is tried
// alone, so that one bad change fails only its own caller.
func (b *flowBatcher) applyBatch(batch []*flowChange) {
	// The batch outlives any one caller's cancellation; the OVS client's
	// timeout still bounds it.
	ctx := context.WithoutCancel(batch[0].ctx)
	mods := make([]flowMod, len(batch))
	for i, c := range batch {
		mods[i] = c.mod
	}
	err := b.ovs.bundle(ctx, b.bridge, mods...)
	if err == nil || len(batch) == 1 {
		for _, c := range batch {
			c.done <- err
		}
		return
	}
	klog.FromContext(ctx).V(2).Info("A batch of flow changes failed; applying them one by one", "bridge", b.bridge, "changes", len(batch), "err", err)
	for _, c := range batch {
		c.done <- b.ovs.bundle(context.WithoutCancel(c.ctx), b.bridge, c.mod)
	}
}

// groupCommit runs one operation on many callers' items at once, as
// flowBatcher does for flows: items that arrive while a batch runs wait
// for it, then go together in the next. An idle fabric runs each call at
// once; a busy one runs far fewer OVS tool runs, each for many items.
type groupCommit[T any] struct {
	// do runs one batch; a failed batch of several calls is run again
	// call by call, so that one bad item fails only its own caller.
	do func(ctx context.Context, items []T) error

	mu      sync.Mutex
	pending []*groupCall[T]
	// running is true while a goroutine runs batches; it exits when it
	// finds nothing pending.
	running bool
}

// groupCall is one caller's items.
type groupCall[T any] struct {
	ctx   context.Context
	items []T
	done  chan error
}

// run runs items in the next batch and returns its outcome for them, or
// ctx's error when ctx is done first (the batch may still run them:
// callers' operations are idempotent).
func (g *groupCommit[T]) run(ctx context.Context, items []T) error {
	c := &groupCall[T]{ctx: ctx, items: items, done: make(chan error, 1)}
	g.mu.Lock()
	g.pending = append(g.pending, c)
	if !g.running {
		g.running = true
		go g.loop()
	}
	g.mu.Unlock()
	select {
	case err := <-c.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// loop runs batches until none is pending.
func (g *groupCommit[T]) loop() {
	for {
		g.mu.Lock()
		batch := g.pending
		g.pending = nil
		if len(batch) == 0 {
			g.running = false
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
		g.runBatch(batch)
	}
}

// runBatch runs a batch's items in one call of do, and, when that fails
// for several callers, each caller's alone.
func (g *groupCommit[T]) runBatch(batch []*groupCall[T]) {
	// The batch outlives any one caller's cancellation; the OVS client's
	// timeout still bounds it.
	ctx := context.WithoutCancel(batch[0].ctx)
	var items []T
	for _, c := range batch {
		items = append(items, c.items...)
	}
	err := g.do(ctx, items)
	if err == nil || len(batch) == 1 {
		for _, c := range batch {
			c.done <- err
		}
		return
	}
	klog.FromContext(ctx).V(2).Info("A batch of switch changes failed; running them one by one", "calls", len(batch), "err", err)
	for _, c := range batch {
		c.done <- g.do(context.WithoutCancel(c.ctx), c.items)
	}
}
