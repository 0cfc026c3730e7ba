package main

import (
	"errors"
	"fmt"
	"net"
	"time"
)

// flipPorts is the size of the block of UDP source ports a flip sends
// from (base, base+1, ...): one attempt every 10 ms for 5 s.
const flipPorts = 500

// flip waits for addr to turn open or closed to the protocol and prints
// when it did (see the package comment). An attempt starts every 10 ms, so
// the time is at most 10 ms and a round trip late; a closed port is seen
// a second after it closed, but dated to when the attempt began. A second,
// not less: on a loaded two-core machine (load 17-30) answers came later
// than 300 ms, and an open UDP port was taken for closed.
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
	turned := make(chan time.Time, 1)
	report := func(at time.Time) {
		select {
		case turned <- at:
		default:
		}
	}
	fmt.Println("ready")
	tick := time.NewTicker(every)
	defer tick.Stop()
	for attempt := 0; ; attempt++ {
		select {
		case at := <-turned:
			fmt.Println(at.UnixNano())
			return nil
		case began := <-tick.C:
			go func() {
				err := try(attempt, began, timeout)
				var ne net.Error
				switch {
				case err == nil && want == "open":
					report(time.Now())
				case want == "closed" && errors.As(err, &ne) && ne.Timeout():
					report(began)
				}
			}()
		}
	}
}
