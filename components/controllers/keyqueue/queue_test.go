package keyqueue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/tools/cache"

	"github.com/kos-sdn/kos/tools/poll"
)

func TestRun(t *testing.T) {
	q := New("test")
	var (
		mu   sync.Mutex
		seen []string
		done = make(chan struct{})
	)
	failures := 1
	syncKey := func(_ context.Context, key cache.ObjectName) error {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, key.String())
		if key.Name == "flaky" && failures > 0 {
			failures--
			return errors.New("flaky")
		}
		if key.Name == "last" {
			close(done)
		}
		return nil
	}
	// The malformed key is dropped, the flaky one tried again; the queue
	// has one worker, so keys are synced in order.
	q.Add("a/b/c")
	q.Add("a/flaky")
	q.Add("a/last")

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- q.Run(ctx, 1, syncKey) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the last key was never synced")
	}
	// The flaky key's retry is rate limited: wait for it.
	poll.Until(t, 10*time.Second, "the flaky key synced again", func(context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		if len(seen) != 3 {
			return fmt.Errorf("synced %d keys, want 3", len(seen))
		}
		return nil
	})
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !q.ShuttingDown() {
		t.Error("the queue still runs after Run returned")
	}
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff(seen, []string{"a/flaky", "a/last", "a/flaky"}); diff != "" {
		t.Errorf("synced keys (-got +want):\n%s", diff)
	}
	if got := q.NumRequeues("a/flaky"); got != 0 {
		t.Errorf("retries of a/flaky after it synced = %d, want 0", got)
	}
}

func TestRunCachesNeverSync(t *testing.T) {
	q := New("test")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	never := func() bool { return false }
	err := q.Run(ctx, 1, func(context.Context, cache.ObjectName) error {
		t.Error("synced a key before the caches synced")
		return nil
	}, never)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Run = %v, want an error wrapping %v", err, context.Canceled)
	}
}
