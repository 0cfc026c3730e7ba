package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/kos-sdn/kos/tools/e2e/podnet/report"
	"github.com/kos-sdn/kos/tools/figures"
	"github.com/kos-sdn/kos/tools/kosinstall"
	"github.com/kos-sdn/kos/tools/poll"
)

// The live upgrade's TCP traffic: podnet chat in pods, holding connections
// to other pods' echoes across nodes.
const (
	// echoPort is where podnet serve echoes (podnetPort + 1).
	echoPort = 7778
	// chatConns is how many connections each pod holds to its peer.
	chatConns = 2
	// chatEvery is how often each connection sends a line.
	chatEvery = 100 * time.Millisecond
)

// chatWatch is podnet chat running in a pod through kubectl exec.
type chatWatch struct {
	pod string
	*report.ChatWatch
}

// startChat runs podnet chat in the pod of namespace ns towards the echoes
// at to, and waits until every connection has had an echo.
func (s *standard) startChat(t *testing.T, ns, pod string, to ...netip.Addr) *chatWatch {
	t.Helper()
	o := report.ChatOptions{Kubeconfig: s.env.Kubeconfig, Namespace: ns, Pod: pod, Binary: podnetBin, Conns: chatConns, Every: chatEvery, For: 20 * time.Minute}
	for _, a := range to {
		o.To = append(o.To, netip.AddrPortFrom(a, echoPort))
	}
	w, err := report.StartChat(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop() })
	poll.Until(t, time.Minute, "pod "+pod+"'s chat to have an echo on every connection", func(context.Context) error {
		if err := w.EndedEarly(); err != nil {
			return err
		}
		return w.Report().Settled()
	})
	return &chatWatch{pod: pod, ChatWatch: w}
}

// checkChats stops the chats, logs their reports and the figures
// live-<name>-tcp-connections-survived and live-<name>-tcp-longest-stall,
// and fails the test when a connection died or stalled longer than
// liveMaxGap: KOS keeps a workload's interface, address and MAC, and its
// datapath, through an upgrade, a rollback and an agent's restart, so
// nothing resets a connection and it stalls no longer than the traffic
// does. A chat whose report stream ended early is an error of the test's
// means, not of KOS: it fails too, so that it is looked at.
func checkChats(t *testing.T, name string, chats []*chatWatch) {
	t.Helper()
	opened, alive := 0, 0
	var stall time.Duration
	for _, c := range chats {
		early := c.EndedEarly()
		r := c.Stop()
		t.Logf("TCP from pod %s (%s): %s", c.pod, name, r)
		if early != nil {
			t.Errorf("TCP from pod %s: %v", c.pod, early)
		}
		opened += r.Opened
		alive += r.Alive
		stall = max(stall, r.LongestStall())
		if r.Alive != r.Opened {
			t.Errorf("TCP from pod %s (%s): %d of %d connections died: %q", c.pod, name, r.Opened-r.Alive, r.Opened, r.Errors)
		}
	}
	figures.Count(t, "live-"+name+"-tcp-connections-survived", alive, fmt.Sprintf("of %d", opened))
	figures.Duration(t, "live-"+name+"-tcp-longest-stall", stall)
	if stall > liveMaxGap {
		t.Errorf("TCP (%s): a connection went %s without an echo, want at most %s", name, stall, liveMaxGap)
	}
}

// liveTraffic is the traffic of a liveNetwork: pings between the guests
// (pods on blue, namespaces on red) of every subnet across nodes, and TCP
// between the pods.
type liveTraffic struct {
	watches []*pairWatch
	chats   []*chatWatch
	// stopPings stops the pings and sets each watch's stats, once.
	stopPings func()
}

// startTraffic starts pings between neighbouring guests of each subnet, each
// first answered, and the pods' chats, each to the next node's pod.
func (net *liveNetwork) startTraffic(t *testing.T) *liveTraffic {
	t.Helper()
	tr := &liveTraffic{}
	for _, subnet := range []string{"blue", "red"} {
		gs := net.guestsOf(subnet)
		for i, from := range gs {
			to := gs[(i+1)%len(gs)]
			awaitPing(t, from, to.IP, time.Minute)
			w, err := kosinstall.WatchPing(from, to.IP, livePingInterval)
			if err != nil {
				t.Fatal(err)
			}
			tr.watches = append(tr.watches, &pairWatch{from: from, to: to, watch: w})
		}
	}
	tr.stopPings = sync.OnceFunc(func() {
		for _, w := range tr.watches {
			w.stats = w.watch.Stop()
		}
	})
	t.Cleanup(tr.stopPings)
	pods := net.guestsOf("blue")
	for i, from := range pods {
		to := pods[(i+1)%len(pods)]
		tr.chats = append(tr.chats, net.lu.startChat(t, net.ns, from.Attachment.Name, to.IP))
	}
	return tr
}

// check stops the traffic and checks it: no pair went longer than liveMaxGap
// without a reply, every pair answered since since, and the TCP
// connections are all alive (checkChats). It logs the figures
// live-<name>-longest-ping-gap and the pings lost.
func (tr *liveTraffic) check(t *testing.T, name string, since time.Time) {
	t.Helper()
	var longest time.Duration
	lost := 0
	tr.stopPings()
	for _, w := range tr.watches {
		t.Logf("pings %s (%s) -> %s (%s), %s: %s", w.from.Attachment.Name, w.from.Attachment.Spec.Node, w.to.Attachment.Name, w.to.Attachment.Spec.Node, name, w.stats)
		longest = max(longest, w.stats.LongestGap)
		lost += w.stats.Lost
		if w.stats.LongestGap > liveMaxGap {
			t.Errorf("pings %s -> %s went %s without a reply (ending %s), want at most %s", w.from.Attachment.Name, w.to.Attachment.Name, w.stats.LongestGap, w.stats.GapEnded.Format(time.TimeOnly), liveMaxGap)
		}
		if err := w.watch.AnsweredSince(since); err != nil {
			t.Errorf("pings %s -> %s after %s: %v", w.from.Attachment.Name, w.to.Attachment.Name, name, err)
		}
	}
	figures.Duration(t, "live-"+name+"-longest-ping-gap", longest)
	figures.Count(t, "live-"+name+"-pings-lost", lost, fmt.Sprintf("over %d pairs at one per %s", len(tr.watches), livePingInterval))
	checkChats(t, name, tr.chats)
}
