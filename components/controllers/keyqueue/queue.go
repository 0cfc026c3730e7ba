// Package keyqueue provides the work queue of the KOS controllers: a named,
// rate-limited queue of namespace/name keys, and the workers that take keys
// from it and hand them to a controller's sync function. Event handlers only
// add keys; the sync function is the one place that decides, by the error it
// returns, whether a key is tried again.
package keyqueue

import (
	"context"
	"fmt"
	"sync"
	"time"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// SyncFunc brings the object named by key up to date. It is level based: it
// reads the object's current state, not the event that queued the key. An
// error puts the key back on the queue, after a rate-limited delay.
type SyncFunc func(ctx context.Context, key cache.ObjectName) error

// Queue is a named, rate-limited queue of namespace/name keys.
type Queue struct {
	workqueue.TypedRateLimitingInterface[string]
	name string
}

// New returns an empty queue; name labels its metrics and its log lines.
func New(name string) *Queue {
	return &Queue{
		TypedRateLimitingInterface: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: name},
		),
		name: name,
	}
}

// Run waits for the caches to sync, then runs workers goroutines that pass
// the queue's keys to syncKey until ctx ends. It then shuts the queue down and
// returns once every worker has stopped. It fails only when ctx ends before
// the caches synced.
func (q *Queue) Run(ctx context.Context, workers int, syncKey SyncFunc, synced ...cache.InformerSynced) error {
	defer utilruntime.HandleCrash()
	defer q.ShutDown()
	if !cache.WaitForNamedCacheSync(q.name, ctx.Done(), synced...) {
		return fmt.Errorf("waiting for the caches of %s: %w", q.name, ctx.Err())
	}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			wait.UntilWithContext(ctx, func(ctx context.Context) {
				for q.processNextItem(ctx, syncKey) {
				}
			}, time.Second)
		})
	}
	<-ctx.Done()
	q.ShutDown()
	wg.Wait()
	return nil
}

// processNextItem passes one key to syncKey and requeues it if syncKey
// fails. It
// returns false once the queue shut down.
func (q *Queue) processNextItem(ctx context.Context, syncKey SyncFunc) bool {
	key, shutdown := q.Get()
	if shutdown {
		return false
	}
	defer q.Done(key)
	logger := klog.FromContext(ctx)
	ref, err := cache.ParseObjectName(key)
	if err != nil {
		// A malformed key never becomes well formed: do not retry.
		logger.Error(err, "Dropping a malformed key", "queue", q.name, "key", key)
		q.Forget(key)
		return true
	}
	if err := syncKey(ctx, ref); err != nil {
		logger.Error(err, "Syncing a key failed; will retry", "queue", q.name, "key", key, "retries", q.NumRequeues(key))
		q.AddRateLimited(key)
		return true
	}
	q.Forget(key)
	return true
}
