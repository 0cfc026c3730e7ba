package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
)

// pinger pings from one pod to another through kubectl exec, in runs of
// a fixed number of pings 0.2 s apart, until stopped.
type pinger struct {
	from, to string
	// run is how many pings each run of ping sends.
	run int
	// finishing ends the loop after the run under way.
	finishing chan struct{}
	cancel    context.CancelFunc
	done      chan struct{}

	mu       sync.Mutex
	stats    pingStats
	answered time.Time // the end of the last run with a reply
}

// pingStats counts a pinger's pings: sent, lost, and runs without a reply.
type pingStats struct{ sent, lost, cut int }

// startPinger starts pinging to from from in runs of run pings; the pings
// last until stop or finish, or until the whole test (not the step) ends.
func (p *podsTest) startPinger(from, to string, run int) *pinger {
	ctx, cancel := context.WithCancel(context.WithoutCancel(p.t.Context()))
	pg := &pinger{from: from, to: to, run: run, finishing: make(chan struct{}), cancel: cancel, done: make(chan struct{})}
	p.t.Cleanup(func() { pg.stop() })
	go func() {
		defer close(pg.done)
		for ctx.Err() == nil {
			out, _ := p.execErr(ctx, from, pingBin, "-c", fmt.Sprint(run), "-i", "0.2", "-W", "1", p.ips[to].String())
			pg.count(out)
			select {
			case <-pg.finishing:
				return
			default:
			}
		}
	}()
	return pg
}

// count adds what a run of ping printed to the counts.
func (pg *pinger) count(out string) {
	var sent, received int
	found := false
	for line := range strings.SplitSeq(out, "\n") {
		if _, err := fmt.Sscanf(strings.TrimSpace(line), "%d packets transmitted, %d received", &sent, &received); err == nil {
			found = true
			break
		}
	}
	if !found {
		// The run was stopped, or kubectl exec failed: no summary,
		// nothing counted.
		return
	}
	pg.mu.Lock()
	defer pg.mu.Unlock()
	pg.stats.sent += sent
	pg.stats.lost += sent - received
	if received == 0 {
		pg.stats.cut++
	} else {
		pg.answered = time.Now()
	}
}

// answeredSince returns nil once a run that ended after since had a reply.
func (pg *pinger) answeredSince(since time.Time) error {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	if pg.answered.After(since) {
		return nil
	}
	return fmt.Errorf("last answered run ended %s", pg.answered.Format(time.TimeOnly))
}

// finish lets the run under way end, so that its pings count, and returns
// the counts.
func (pg *pinger) finish() pingStats {
	select {
	case <-pg.finishing:
	default:
		close(pg.finishing)
	}
	<-pg.done
	return pg.stop()
}

// stop stops the pings and returns their counts.
func (pg *pinger) stop() pingStats {
	pg.cancel()
	<-pg.done
	pg.mu.Lock()
	defer pg.mu.Unlock()
	return pg.stats
}
