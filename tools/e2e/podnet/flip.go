package main

import (
	"errors"
	"fmt"
	"net"
	"time"
)

// flipPorts is the size of the block of UDP source ports a flip sends
// from (base, base+1, ...): one attempt every 10 ms for 15 s, longer than
// a policy takes to turn (4 s at most seen) and a closed port's
// confirmation together.
const flipPorts = 1500

// flip waits for addr to turn open or closed to the protocol and prints
// when it did (see the package comment). An attempt starts every 10 ms, so
// the time is at most 10 ms and a round trip late; a closed port is seen
// once attempts begun over 2.5 s after it went unanswered too, but dated
// to when the first unanswered attempt began. An attempt waits a second
// for its answer, not less: on a loaded two-core machine (load 17-30)
// answers came later than 300 ms, and an open UDP port was taken for
// closed.
//
// A UDP attempt from a source port that an earlier, answered attempt used
// rides that flow's conntrack entry, which a closing policy lets on (as it
// must: established flows pass): so each UDP attempt has a socket of its
// own, and with base, attempts send from ports base to base+flipPorts-1 in
// turn, a block the caller gives each flip of its own, and never from a
// port the kernel picks.
func flip(want, protocol, addr string, base int) error {
	if want != "open" && want != "closed" {
		return fmt.Errorf("want open or closed, not %q", want)
	}
	var try func(attempt int, began time.Time, timeout time.Duration) error
	switch protocol {
	case "tcp":
		try = func(_ int, _ time.Time, timeout time.Duration) error {
			c, err := net.DialTimeout("tcp", addr, timeout)
			if err == nil {
				c.Close()
			}
			return err
		}
	case "udp":
		try = func(attempt int, began time.Time, timeout time.Duration) error {
			d := net.Dialer{}
			if base > 0 {
				d.LocalAddr = &net.UDPAddr{Port: base + attempt%flipPorts}
			}
			c, err := d.Dial("udp4", addr)
			if err != nil {
				return err
			}
			defer c.Close()
			_ = c.SetDeadline(began.Add(timeout))
			if _, err := c.Write([]byte("flip")); err != nil {
				return err
			}
			_, err = c.Read(make([]byte, 64))
			return err
		}
	default:
		return fmt.Errorf("want tcp or udp, not %q", protocol)
	}

	const every, patience = 10 * time.Millisecond, time.Second
	timeout := patience
	if want == "open" {
		// An attempt that waits longer still tells the moment it was
		// answered.
		timeout = 2 * time.Second
	}
	results := make(chan attemptResult, 64)
	fmt.Println("ready")
	tick := time.NewTicker(every)
	defer tick.Stop()
	var closed closedWatch
	attempts := 0
	for {
		select {
		case r := <-results:
			if want == "open" && r.answered {
				fmt.Println(r.at.UnixNano())
				return nil
			}
			if at, ok := closed.add(r); ok && want == "closed" {
				fmt.Println(at.UnixNano())
				return nil
			}
		case began := <-tick.C:
			attempt := attempts
			attempts++
			go func() {
				err := try(attempt, began, timeout)
				var ne net.Error
				switch {
				case err == nil:
					results <- attemptResult{began: began, answered: true, at: time.Now()}
				case errors.As(err, &ne) && ne.Timeout():
					results <- attemptResult{began: began}
				}
			}()
		}
	}
}

// attemptResult is how an attempt of flip fared: answered (at), or timed
// out.
type attemptResult struct {
	began    time.Time
	answered bool
	at       time.Time
}

// closedConfirm is how long after the first unanswered attempt every
// attempt must go unanswered for the port to be taken for closed.
const closedConfirm = 2500 * time.Millisecond

// closedWatch tells when a port turned closed: at the first attempt that
// got no answer while every attempt begun after it, for closedConfirm, got
// none either. A stall of the pod or of a loaded machine also leaves
// attempts unanswered, but one begun after the stall is answered again,
// and that rules them out (a closed port was once seen 1.8 s before the
// write that closed it, with the pod's echo stalled as long). Attempts all
// wait as long, so once one begun closedConfirm after the candidate timed
// out, every earlier one has ended; but an answer comes back before its
// attempt would time out, so an answered attempt's result may arrive
// before that of an earlier one that timed out, which lastAnswered keeps
// from being taken.
type closedWatch struct {
	candidate, lastAnswered time.Time
}

// add takes an attempt's result and returns when the port closed, once
// that is known.
func (w *closedWatch) add(r attemptResult) (time.Time, bool) {
	switch {
	case r.answered:
		if r.began.After(w.lastAnswered) {
			w.lastAnswered = r.began
		}
		if !r.began.Before(w.candidate) {
			w.candidate = time.Time{}
		}
	case !r.began.After(w.lastAnswered):
	case w.candidate.IsZero():
		w.candidate = r.began
	case r.began.Sub(w.candidate) >= closedConfirm:
		return w.candidate, true
	}
	return time.Time{}, false
}
