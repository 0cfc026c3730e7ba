// Package report is what podnet (tools/e2e/podnet) prints, for the programs
// that read it: the e2e tests and the demo. It also runs podnet chat in a
// pod through kubectl exec and keeps its newest report.
package report

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Transfer is what podnet send prints: how many bytes went, their SHA-256
// as sent and as the sink received them, and how fast.
type Transfer struct {
	Bytes    int64   `json:"bytes"`
	Sent     string  `json:"sent"`
	Received string  `json:"received"`
	Seconds  float64 `json:"seconds"`
	MBps     float64 `json:"MBps"`
}

// Chat is what podnet chat prints every second, about every connection it
// opened since it started.
type Chat struct {
	// Opened is how many connections were opened; Alive how many still
	// are; Errors say why the others ended.
	Opened int      `json:"opened"`
	Alive  int      `json:"alive"`
	Errors []string `json:"errors,omitempty"`
	// Sent and Echoed count the lines sent and echoed back, over all
	// connections.
	Sent   int64 `json:"sent"`
	Echoed int64 `json:"echoed"`
	// LongestStallMS is the longest time, in milliseconds, a connection
	// went without an echo while it had lines unanswered; StalledNowMS
	// how long the worst one has now.
	LongestStallMS int64 `json:"longestStallMS"`
	StalledNowMS   int64 `json:"stalledNowMS"`
}

func (r Chat) String() string {
	return fmt.Sprintf("%d of %d connections alive, %d lines sent, %d echoed, longest stall %d ms, errors %q", r.Alive, r.Opened, r.Sent, r.Echoed, r.LongestStallMS, r.Errors)
}

// LongestStall is LongestStallMS as a duration.
func (r Chat) LongestStall() time.Duration {
	return time.Duration(r.LongestStallMS) * time.Millisecond
}

// Settled returns nil once every connection is open, alive and has had an
// echo, and otherwise says how far it is.
func (r Chat) Settled() error {
	if r.Opened == 0 || r.Alive != r.Opened || r.Echoed < int64(r.Opened) {
		return fmt.Errorf("not every connection has had an echo: %s", r)
	}
	return nil
}

// Sum adds reports up: counts add, stalls take the longest.
func Sum(reports ...Chat) Chat {
	var t Chat
	for _, r := range reports {
		t.Opened += r.Opened
		t.Alive += r.Alive
		t.Errors = append(t.Errors, r.Errors...)
		t.Sent += r.Sent
		t.Echoed += r.Echoed
		t.LongestStallMS = max(t.LongestStallMS, r.LongestStallMS)
		t.StalledNowMS = max(t.StalledNowMS, r.StalledNowMS)
	}
	return t
}

// ChatOptions say where podnet chat runs and what it does.
type ChatOptions struct {
	// Kubeconfig, Namespace and Pod name the pod; Binary is podnet's path
	// in its image.
	Kubeconfig, Namespace, Pod, Binary string
	// Conns connections to each echo in To, each sending a line every
	// Every, for at most For.
	Conns int
	Every time.Duration
	For   time.Duration
	To    []netip.AddrPort
}

// ChatWatch is podnet chat running in a pod through kubectl exec, and its
// newest report. kubectl exec reaches the pod through kube-apiserver and
// kubelet over the nodes' underlay, so what happens to KOS does not end it.
type ChatWatch struct {
	pod  string
	cmd  *exec.Cmd
	done chan struct{} // closed once kubectl exec ended
	stop func() Chat

	mu      sync.Mutex
	last    Chat
	reports int
	stderr  strings.Builder
	err     error
	stopped bool
}

// StartChat starts podnet chat as o says. It does not wait for the
// connections: poll Report().Settled() for that.
func StartChat(o ChatOptions) (*ChatWatch, error) {
	args := []string{"--kubeconfig", o.Kubeconfig, "-n", o.Namespace, "exec", o.Pod, "--", o.Binary, "chat",
		"-conns", strconv.Itoa(o.Conns), "-every", o.Every.String(), "-for", o.For.String()}
	for _, a := range o.To {
		args = append(args, a.String())
	}
	c := &ChatWatch{pod: o.Pod, cmd: exec.Command("kubectl", args...), done: make(chan struct{})}
	c.cmd.Stderr = &lockedWriter{mu: &c.mu, b: &c.stderr}
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("kubectl exec %s -- podnet chat: %w", o.Pod, err)
	}
	go func() {
		defer close(c.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var r Chat
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
	c.stop = sync.OnceValue(func() Chat {
		c.mu.Lock()
		c.stopped = true
		c.mu.Unlock()
		_ = c.cmd.Process.Kill()
		<-c.done
		return c.Report()
	})
	return c, nil
}

// Report is the newest report.
func (c *ChatWatch) Report() Chat {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

// EndedEarly returns why kubectl exec ended before Stop, or nil while it
// runs or once stopped.
func (c *ChatWatch) EndedEarly() error {
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

// Stop ends the chat and returns its last report; calling it again returns
// the same.
func (c *ChatWatch) Stop() Chat { return c.stop() }

// lockedWriter writes to b under mu.
type lockedWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}
