package kosinstall

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
)

// PingWatch pings one address from a guest at a steady rate, from
// WatchPing until Stop, and measures what a workload would notice of an
// event in between (an upgrade, a restart): the longest time without a
// reply, and the requests never answered.
type PingWatch struct {
	from     *Guest
	to       netip.Addr
	interval time.Duration
	conn     *icmp.PacketConn
	id       int
	started  time.Time
	stop     chan struct{}
	done     sync.WaitGroup

	// mu guards sent and replies, which the sender and the reader write.
	mu      sync.Mutex
	sent    []time.Time       // by sequence number - 1
	replies map[int]time.Time // by sequence number: when the reply came
}

// PingStats is what a PingWatch measured.
type PingStats struct {
	// Sent and Received count the echo requests sent and those answered;
	// requests sent less than a second before Stop are left out of both.
	Sent, Received int
	// Lost is Sent - Received.
	Lost int
	// LongestGap is the longest time without a reply: between two replies
	// in a row, or from the start to the first, or from the last to Stop.
	// Under steady traffic it is about one interval.
	LongestGap time.Duration
	// GapEnded is when the longest gap ended.
	GapEnded time.Time
}

func (s PingStats) String() string {
	return fmt.Sprintf("%d of %d lost, longest gap %s", s.Lost, s.Sent, s.LongestGap.Round(time.Millisecond))
}

// replyGrace is how long a request may wait for its reply before Stop
// counts it lost.
const replyGrace = time.Second

// WatchPing starts pinging to from guest from every interval, until Stop.
func WatchPing(from *Guest, to netip.Addr, interval time.Duration) (*PingWatch, error) {
	if !to.Is4() {
		return nil, fmt.Errorf("ping %v: only IPv4 is supported", to)
	}
	w := &PingWatch{from: from, to: to, interval: interval, id: rand.IntN(1 << 16),
		stop: make(chan struct{}), replies: map[int]time.Time{}}
	if err := from.Do(func() error {
		var err error
		w.conn, err = icmp.ListenPacket("ip4:icmp", "0.0.0.0")
		return err
	}); err != nil {
		return nil, fmt.Errorf("opening an ICMP socket in %s: %w", from.Name, err)
	}
	w.started = time.Now()
	w.done.Add(2)
	go w.send()
	go w.read()
	return w, nil
}

// send sends one echo request every interval until Stop. A request that
// cannot be sent (no route while an interface is replaced) counts as sent
// and unanswered.
func (w *PingWatch) send() {
	defer w.done.Done()
	ticker := time.NewTicker(w.interval)
	defer ticker.Stop()
	to := &net.IPAddr{IP: w.to.AsSlice()}
	for seq := 1; ; seq++ {
		req := icmp.Message{Type: ipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: w.id, Seq: seq & 0xffff, Data: []byte("kos ping watch")}}
		if b, err := req.Marshal(nil); err == nil {
			w.mu.Lock()
			w.sent = append(w.sent, time.Now())
			w.mu.Unlock()
			_, _ = w.conn.WriteTo(b, to)
		}
		select {
		case <-w.stop:
			return
		case <-ticker.C:
		}
	}
}

// read records the replies until the socket is closed. The raw socket sees
// every ICMP message of the guest, so others are skipped.
func (w *PingWatch) read() {
	defer w.done.Done()
	buf := make([]byte, 1500)
	for {
		n, from, err := w.conn.ReadFrom(buf)
		if errors.Is(err, net.ErrClosed) || errors.Is(err, os.ErrClosed) {
			return
		}
		if err != nil {
			continue
		}
		at := time.Now()
		msg, err := icmp.ParseMessage(1, buf[:n])
		if err != nil || msg.Type != ipv4.ICMPTypeEchoReply {
			continue
		}
		echo, ok := msg.Body.(*icmp.Echo)
		if !ok || echo.ID != w.id {
			continue
		}
		if ip, ok := from.(*net.IPAddr); !ok || !ip.IP.Equal(w.to.AsSlice()) {
			continue
		}
		w.mu.Lock()
		// Sequence numbers wrap at 65536 (after 109 minutes at 10 a
		// second): the newest request of that number.
		seq := echo.Seq
		for seq+0x10000 <= len(w.sent) {
			seq += 0x10000
		}
		if _, dup := w.replies[seq]; !dup {
			w.replies[seq] = at
		}
		w.mu.Unlock()
	}
}

// Stop stops pinging, waits a second for the last replies, and returns what
// was measured.
func (w *PingWatch) Stop() PingStats {
	close(w.stop)
	time.Sleep(replyGrace)
	stopped := time.Now()
	w.conn.Close()
	w.done.Wait()
	return w.Window(w.started, stopped)
}

// Stats returns what was measured so far, as Stop would have now, and goes
// on pinging.
func (w *PingWatch) Stats() PingStats {
	return w.Window(w.started, time.Now())
}

// Window returns what was measured between from and to, as if the watch
// had run only then: the requests sent from from until 2*replyGrace before
// to (later ones may have their replies on the way), and the longest time
// without a reply, counted from the last reply before from (from itself
// when there was none) until 2*replyGrace before to.
func (w *PingWatch) Window(from, to time.Time) PingStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	until := to.Add(-2 * replyGrace)
	var s PingStats
	var replies []time.Time
	last := time.Time{}
	for i, at := range w.sent {
		r, replied := w.replies[i+1]
		switch {
		case !replied:
		case r.Before(from):
			if r.After(last) {
				last = r
			}
		case !r.After(until):
			replies = append(replies, r)
		}
		if at.Before(from) || at.After(until) {
			continue
		}
		s.Sent++
		if replied {
			s.Received++
		}
	}
	s.Lost = s.Sent - s.Received
	slices.SortFunc(replies, func(a, b time.Time) int { return a.Compare(b) })
	if last.IsZero() {
		last = from
	}
	for _, r := range append(replies, until) {
		if gap := r.Sub(last); gap > s.LongestGap {
			s.LongestGap, s.GapEnded = gap, r
		}
		last = r
	}
	return s
}

// AnsweredSince returns nil once a request sent after since got its reply,
// and otherwise an error that says so (for poll.Until).
func (w *PingWatch) AnsweredSince(since time.Time) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := len(w.sent) - 1; i >= 0 && w.sent[i].After(since); i-- {
		if _, ok := w.replies[i+1]; ok {
			return nil
		}
	}
	return fmt.Errorf("no reply to a ping from %s to %s sent since %s", w.from.Name, w.to, since.Format(time.StampMilli))
}
