package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

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

// chatReport is podnet chat's report (podnet's ChatReport).
type chatReport struct {
	Opened         int      `json:"opened"`
	Alive          int      `json:"alive"`
	Errors         []string `json:"errors"`
	Sent           int64    `json:"sent"`
	Echoed         int64    `json:"echoed"`
	LongestStallMS int64    `json:"longestStallMS"`
	StalledNowMS   int64    `json:"stalledNowMS"`
}

func (r chatReport) String() string {
	return fmt.Sprintf("%d of %d connections alive, %d lines sent, %d echoed, longest stall %d ms, errors %q", r.Alive, r.Opened, r.Sent, r.Echoed, r.LongestStallMS, r.Errors)
}

// chatWatch is podnet chat running in a pod through kubectl exec, and its
// latest report. KOS's datapath is not on the way of kubectl exec (the
// kube-apiserver reaches kubelet over the nodes' underlay), so an upgrade of
// KOS does not end it.
type chatWatch struct {
	pod  string
	cmd  *exec.Cmd
	done chan struct{} // closed once kubectl exec ended
	stop func() chatReport

	// Written by the reading goroutine until done is closed.
	mu      sync.Mutex
	last    chatReport
	reports int
	stderr  strings.Builder
	err     error
	stopped bool
}

// startChat runs podnet chat in the pod of namespace ns towards the echoes
// at to, and waits until every connection has had an echo.
func (s *standard) startChat(t *testing.T, ns, pod string, to ...netip.Addr) *chatWatch {
	t.Helper()
	args := []string{"--kubeconfig", s.env.Kubeconfig, "-n", ns, "exec", pod, "--", podnetBin, "chat", "-conns", fmt.Sprint(chatConns), "-every", chatEvery.String(), "-for", "20m"}
	for _, a := range to {
		args = append(args, netip.AddrPortFrom(a, echoPort).String())
	}
	c := &chatWatch{pod: pod, cmd: exec.Command("kubectl", args...), done: make(chan struct{})}
	c.cmd.Stderr = &c.stderr
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("kubectl exec %s -- podnet chat: %v", pod, err)
	}
	go func() {
		defer close(c.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var r chatReport
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				continue // not a report
			}
			c.mu.Lock()
			c.last, c.reports = r, c.reports+1
			c.mu.Unlock()
		}
		err := c.cmd.Wait()
		c.mu.Lock()
		c.err = err
		c.mu.Unlock()
	}()
	c.stop = sync.OnceValue(func() chatReport {
		c.mu.Lock()
		c.stopped = true
		c.mu.Unlock()
		_ = c.cmd.Process.Kill()
		<-c.done
		return c.report()
	})
	t.Cleanup(func() { c.stop() })
	poll.Until(t, time.Minute, "pod "+pod+"'s chat to have an echo on every connection", func(context.Context) error {
		if err := c.endedEarly(); err != nil {
			return err
		}
		r := c.report()
		if r.Opened == 0 || r.Alive != r.Opened || r.Echoed < int64(r.Opened) {
			return fmt.Errorf("%s", r)
		}
		return nil
	})
	return c
}

func (c *chatWatch) report() chatReport {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

// endedEarly returns why the chat's kubectl exec ended before stop, or nil.
func (c *chatWatch) endedEarly() error {
	select {
	case <-c.done:
	default:
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return nil
	}
	return fmt.Errorf("kubectl exec %s -- podnet chat ended by itself after %d reports: %v: %s", c.pod, c.reports, c.err, strings.TrimSpace(c.stderr.String()))
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
		early := c.endedEarly()
		r := c.stop()
		t.Logf("TCP from pod %s (%s): %s", c.pod, name, r)
		if early != nil {
			t.Errorf("TCP from pod %s: %v", c.pod, early)
		}
		opened += r.Opened
		alive += r.Alive
		stall = max(stall, time.Duration(r.LongestStallMS)*time.Millisecond)
		if r.Alive != r.Opened {
			t.Errorf("TCP from pod %s (%s): %d of %d connections died: %q", c.pod, name, r.Opened-r.Alive, r.Opened, r.Errors)
		}
	}
	countFigure(t, "live-"+name+"-tcp-connections-survived", alive, fmt.Sprintf("of %d", opened))
	figure(t, "live-"+name+"-tcp-longest-stall", stall)
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
	figure(t, "live-"+name+"-longest-ping-gap", longest)
	countFigure(t, "live-"+name+"-pings-lost", lost, fmt.Sprintf("over %d pairs at one per %s", len(tr.watches), livePingInterval))
	checkChats(t, name, tr.chats)
}
