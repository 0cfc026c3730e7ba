package driver

import (
	"context"
	"math/rand/v2"
	"time"
)

// Arrivals say how operations are spaced: steadily, or as a Poisson
// process (exponential gaps) of the same mean rate.
const (
	ArrivalsSteady  = "steady"
	ArrivalsPoisson = "poisson"
)

// gap returns the time to the next operation at rate per second.
func gap(arrivals string, rate float64, r *rand.Rand) time.Duration {
	mean := float64(time.Second) / rate
	if arrivals == ArrivalsPoisson {
		return time.Duration(r.ExpFloat64() * mean)
	}
	return time.Duration(mean)
}

// pace sends on ops at the rate, until ctx ends or until stop returns true
// (checked before each send); it closes ops when it returns. Gaps are
// measured from a schedule, not from the previous send, so that a slow
// consumer is caught up with (the rate is what was achieved on average).
func pace(ctx context.Context, arrivals string, rate float64, seed uint64, ops chan<- time.Time, stop func() bool) {
	defer close(ops)
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	next := time.Now()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		if stop() {
			return
		}
		if d := time.Until(next); d > 0 {
			timer.Reset(d)
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
			}
		}
		select {
		case <-ctx.Done():
			return
		case ops <- next:
		}
		next = next.Add(gap(arrivals, rate, r))
	}
}
