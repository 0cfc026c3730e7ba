package kosinstall

import (
	"net/netip"
	"testing"
	"time"

	"github.com/kos-sdn/kos/tools/ovsenv"
)

// TestIntegrationPingWatch pings a guest's own address for two seconds with
// the address taken away for one in the middle: the gap and the losses
// show, and nothing else does; a window that starts once the address is
// back shows neither.
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
	if _, err := ns.Run(ctx, "ip", "addr", "del", addr.String()+"/32", "dev", "lo"); err != nil {
		t.Fatal(err)
	}
	removed := time.Now()
	time.Sleep(time.Second)
	if err := w.AnsweredSince(removed); err == nil {
		t.Errorf("a reply since the address was removed")
	}
	if _, err := ns.Run(ctx, "ip", "addr", "add", addr.String()+"/32", "dev", "lo"); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	time.Sleep(3 * time.Second)
	if err := w.AnsweredSince(back); err != nil {
		t.Error(err)
	}
	if after := w.Window(back.Add(200*time.Millisecond), time.Now()); after.Lost > 0 || after.LongestGap > 500*time.Millisecond || after.Sent < 10 {
		t.Errorf("since the address is back: %s of %d sent, want nothing lost and no gap", after, after.Sent)
	}
	got := w.Stop()
	t.Logf("ping watch: %s", got)
	if got.LongestGap < 900*time.Millisecond || got.LongestGap > 2*time.Second {
		t.Errorf("longest gap %s, want about the second without the address", got.LongestGap)
	}
	if got.Lost < 10 || got.Lost > 30 {
		t.Errorf("%d lost, want about the 20 sent in the second without the address", got.Lost)
	}
	if got.Sent < 50 {
		t.Errorf("%d sent in about 4 s at one per %s", got.Sent, interval)
	}
}
