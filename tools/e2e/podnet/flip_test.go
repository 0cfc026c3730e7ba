package main

import (
	"testing"
	"time"
)

func TestClosedWatch(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	answered := func(began int) attemptResult {
		return attemptResult{began: at(began), answered: true, at: at(began + 5)}
	}
	timedOut := func(began int) attemptResult { return attemptResult{began: at(began)} }
	for _, c := range []struct {
		name    string
		results []attemptResult
		want    int // ms after t0; -1 for not closed
	}{
		{"closed at 100", []attemptResult{answered(0), timedOut(100), timedOut(1000), timedOut(2600)}, 100},
		{"not confirmed yet", []attemptResult{answered(0), timedOut(100), timedOut(2500)}, -1},
		{"a stall, then answers again", []attemptResult{timedOut(100), timedOut(900), answered(1000), timedOut(2700)}, -1},
		{"after a stall, closed for good", []attemptResult{timedOut(100), answered(1000), timedOut(1100), timedOut(3600)}, 1100},
		// An answer to a later attempt arrives before an earlier
		// attempt times out: the earlier is no candidate.
		{"answered arrives first", []attemptResult{answered(500), timedOut(400), timedOut(3000)}, -1},
		{"an older answer leaves the candidate", []attemptResult{timedOut(400), answered(300), timedOut(2900)}, 400},
	} {
		t.Run(c.name, func(t *testing.T) {
			var w closedWatch
			got, ok := time.Time{}, false
			for _, r := range c.results {
				if got, ok = w.add(r); ok {
					break
				}
			}
			switch {
			case c.want < 0 && ok:
				t.Errorf("closed at %v, want not closed", got.Sub(t0))
			case c.want >= 0 && !ok:
				t.Errorf("not closed, want closed at %dms", c.want)
			case ok && !got.Equal(at(c.want)):
				t.Errorf("closed at %v, want %dms", got.Sub(t0), c.want)
			}
		})
	}
}
