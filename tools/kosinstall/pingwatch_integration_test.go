package kosinstall

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/kos-sdn/kos/tools/ovsenv"
	"github.com/kos-sdn/kos/tools/poll"
)

// TestIntegrationPingWatch pings a guest's own address for two seconds with
// the address taken away for one in the middle: the gap and the losses
// show, and nothing else does; a window that starts once the address is
// back shows neither.
//
// How long the gap lasts, and how many pings are sent and lost, follow the
// machine's load (each ip command is a fork and exec; a starved sender
// skips ticks): they are logged as figures, and the limits are the times
// measured around the removal, not fixed durations.
func TestIntegrationPingWatch(t *testing.T) {
	ctx := t.Context()
	ns := ovsenv.NetnsT(t)
	addr := netip.MustParseAddr("10.66.0.1")
	for _, cmd := range [][]string{
		{"ip", "link", "set", "lo", "up"},
		{"ip", "addr", "add", addr.String() + "/32", "dev", "lo"},
	} {
		if _, err := ns.Run(ctx, cmd[0], cmd[1:]...); err != nil {
			t.Fatal(err)
		}
	}
	const interval = 50 * time.Millisecond
	w, err := WatchPing(&Guest{Netns: ns, IP: addr}, addr, interval)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	removing := time.Now()
	if _, err := ns.Run(ctx, "ip", "addr", "del", addr.String()+"/32", "dev", "lo"); err != nil {
		t.Fatal(err)
	}
	removed := time.Now()
	time.Sleep(time.Second)
	if err := w.AnsweredSince(removed); err == nil {
		t.Errorf("a reply since the address was removed")
	}
	adding := time.Now()
	if _, err := ns.Run(ctx, "ip", "addr", "add", addr.String()+"/32", "dev", "lo"); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	// The window since the address is back starts at a reply to a request
	// sent after it came back: on a busy machine that reply may take
	// longer than any fixed guess.
	poll.Until(t, 30*time.Second, "a reply since the address is back", func(context.Context) error { return w.AnsweredSince(back) })
	answered := time.Now()
	time.Sleep(3 * time.Second)
	// away is how long the address was surely gone: a window that counted
	// the outage would show a gap at least this long.
	away := adding.Sub(removed)
	after := w.Window(answered, time.Now())
	t.Logf("figure pingwatch-longest-gap-since-back %.2f s", after.LongestGap.Seconds())
	if after.Lost > 0 || after.LongestGap >= away || after.Sent < 5 {
		t.Errorf("since the address is back: %s of %d sent, want nothing lost and no gap (under the %s without the address)", after, after.Sent, away.Round(time.Millisecond))
	}
	got := w.Stop()
	t.Logf("ping watch: %s", got)
	t.Logf("figure pingwatch-longest-gap %.2f s", got.LongestGap.Seconds())
	t.Logf("figure pingwatch-lost %d packets", got.Lost)
	t.Logf("figure pingwatch-sent %d packets", got.Sent)
	// The longest gap is the outage: it ends with the first reply after
	// the address came back, and starts with the last reply before it went
	// (give or take ten intervals of a starved reader).
	gapStarted := got.GapEnded.Add(-got.LongestGap)
	if got.GapEnded.Before(adding) || got.GapEnded.After(answered) || gapStarted.Before(removing.Add(-10*interval)) || got.LongestGap < away/2 {
		t.Errorf("longest gap %s from %s to %s, want the outage: ending between %s and %s, starting after %s, and at least half the %s without the address",
			got.LongestGap, gapStarted.Format(time.StampMilli), got.GapEnded.Format(time.StampMilli), adding.Format(time.StampMilli), answered.Format(time.StampMilli), removing.Add(-10*interval).Format(time.StampMilli), away.Round(time.Millisecond))
	}
	// Only requests sent while the address was away can be lost; a starved
	// sender sends fewer, never more.
	if maxLost := int(answered.Sub(removing)/interval) + 10; got.Lost < 5 || got.Lost > maxLost {
		t.Errorf("%d lost, want between 5 and the %d sent while the address was away, give or take", got.Lost, maxLost)
	}
	if got.Sent < 20 {
		t.Errorf("%d sent in about 4 s at one per %s", got.Sent, interval)
	}
}
