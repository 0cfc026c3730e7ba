// Package poll waits, in tests, for a condition that other goroutines or
// processes bring about: a controller's status, a node that turns Ready, a
// flow that appears.
package poll

import (
	"context"
	"testing"
	"time"
)

// checkTimeout bounds one call of a check, so that a hung request does not
// eat the whole wait.
const checkTimeout = 10 * time.Second

// Until calls check until it returns nil, and fails the test with check's
// last error when timeout passes or the test ends. The first call is at
// once; later ones follow at intervals that grow from 50ms to 500ms, so that
// quick conditions are seen quickly and slow ones do not load the machine.
// Each call gets a context that ends after ten seconds or with the test.
// what names the condition, for the log and the failure.
func Until(t testing.TB, timeout time.Duration, what string, check func(ctx context.Context) error) {
	t.Helper()
	began := time.Now()
	interval := 50 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(t.Context(), checkTimeout)
		err := check(ctx)
		cancel()
		if err == nil {
			t.Logf("%s after %s", what, time.Since(began).Round(10*time.Millisecond))
			return
		}
		if time.Since(began) > timeout {
			t.Fatalf("%s: not so after %s: %v", what, timeout, err)
		}
		select {
		case <-t.Context().Done():
			t.Fatalf("%s: the test ended while waiting: %v", what, err)
		case <-time.After(interval):
		}
		interval = min(2*interval, 500*time.Millisecond)
	}
}
