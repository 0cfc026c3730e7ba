package poll

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"
)

func TestUntilReturnsOnceTrue(t *testing.T) {
	calls := 0
	Until(t, time.Minute, "the third call", func(context.Context) error {
		calls++
		if calls < 3 {
			return fmt.Errorf("call %d", calls)
		}
		return nil
	})
	if calls != 3 {
		t.Errorf("calls: got %d, want 3", calls)
	}
}

// recorder is a test whose Fatalf ends only the calling goroutine and keeps
// the message.
type recorder struct {
	testing.TB
	fatal string
}

func (r *recorder) Helper() {}

func (r *recorder) Logf(string, ...any) {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestUntilFailsWithLastError(t *testing.T) {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Until(r, 200*time.Millisecond, "never", func(context.Context) error { return errors.New("still not") })
	}()
	<-done
	if want := "never: not so after 200ms: still not"; r.fatal != want {
		t.Errorf("failure: got %q, want %q", r.fatal, want)
	}
}

func TestUntilBoundsEachCheck(t *testing.T) {
	Until(t, time.Minute, "a deadline on the check's context", func(ctx context.Context) error {
		deadline, ok := ctx.Deadline()
		if !ok || time.Until(deadline) > checkTimeout {
			return fmt.Errorf("deadline %v (set: %v)", deadline, ok)
		}
		return nil
	})
}
