package channels

import (
	"context"
	"fmt"
	"sync"
	"testing"
)

// TestEachReportsErrorsInOrder runs calls whose failures end in the reverse
// of their order: the joined error still lists them by index, every call
// runs, and no more than the parallelism are in flight at once.
func TestEachReportsErrorsInOrder(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		parallelism int
		n           int
		failing     []int
		want        string
	}{
		{name: "two failures, the later ends first", parallelism: 8, n: 20, failing: []int{3, 7}, want: "object 3 failed\nobject 7 failed"},
		{name: "three failures", parallelism: 16, n: 40, failing: []int{1, 20, 39}, want: "object 1 failed\nobject 20 failed\nobject 39 failed"},
		{name: "none", parallelism: 4, n: 10},
		{name: "one at a time", parallelism: 1, n: 5, failing: []int{0, 4}, want: "object 0 failed\nobject 4 failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			failing := map[int]bool{}
			for _, i := range tc.failing {
				failing[i] = true
			}
			// Each failing call but the last waits until the failing
			// call after it has returned, so failures end last to first.
			returned := map[int]chan struct{}{}
			for _, i := range tc.failing {
				returned[i] = make(chan struct{})
			}
			next := map[int]int{}
			for k := 0; k+1 < len(tc.failing); k++ {
				next[tc.failing[k]] = tc.failing[k+1]
			}
			if tc.parallelism == 1 {
				next = nil // one at a time, an earlier call cannot wait for a later one
			}
			var (
				mu                    sync.Mutex
				calls, inFlight, most int
			)
			w := &addonWriter{parallelism: tc.parallelism}
			err := w.each(context.Background(), tc.n, func(_ context.Context, i int) error {
				mu.Lock()
				calls++
				inFlight++
				most = max(most, inFlight)
				mu.Unlock()
				defer func() {
					mu.Lock()
					inFlight--
					mu.Unlock()
				}()
				if !failing[i] {
					return nil
				}
				if later, ok := next[i]; ok {
					<-returned[later]
				}
				defer close(returned[i])
				return fmt.Errorf("object %d failed", i)
			})
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tc.want {
				t.Errorf("each() error = %q, want %q", got, tc.want)
			}
			if calls != tc.n {
				t.Errorf("each() made %d calls, want %d", calls, tc.n)
			}
			if most > tc.parallelism {
				t.Errorf("each() had %d calls in flight, want at most %d", most, tc.parallelism)
			}
		})
	}
}
