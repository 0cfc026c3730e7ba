package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	agentapi "github.com/kos-sdn/kos/components/agent/api"
	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/tools/poll"
)

// TestIntegrationProbes runs two agents on two simulated nodes (real Open
// vSwitch, userspace datapath) against the real control plane, and asks
// their debug endpoints for the probes of `kubectl kos check`: probes on
// labelled attachments of the two nodes reach each other with ping,
// full-size ping with Don't Fragment and TCP, and fail all three to an
// address nobody has; an unlabelled attachment gets no probe (403), nor one
// of another node (404); DELETE gives the interface back to the node
// without the probe's address and leaves no namespace; deleting a probed
// attachment removes its probe.
func TestIntegrationProbes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	k := newAPI(t)
	startControllers(t)

	a, b := startTwoNodes(t, ctx)
	nsA, nsB := a.ns, b.ns
	cfgA, cfgB := agentConfig(t, k.node("a"), hostA, a.fabric), agentConfig(t, k.node("b"), hostB, b.fabric)
	// The agents run in the test's network namespace; their switches'
	// ports live in the nodes'.
	cfgA.CNI.HostNetns, cfgB.CNI.HostNetns = "/run/netns/"+nsA.Name, "/run/netns/"+nsB.Name
	agentA := startAgent(t, cfgA)
	agentB := startAgent(t, cfgB)
	debugA := httptest.NewServer(agentA.agent.DebugHandler())
	defer debugA.Close()
	debugB := httptest.NewServer(agentB.agent.DebugHandler())
	defer debugB.Close()

	const vni = 321
	k.subnet("s1", "10.32.0.0/24", vni)
	labelled := func(att *v1alpha1.NetworkAttachment) { att.Labels = map[string]string{agentapi.ProbeLabel: "true"} }
	k.attachment("p1", k.node("a"), "s1", labelled)
	k.attachment("p2", k.node("b"), "s1", labelled)
	k.attachment("w1", k.node("a"), "s1")
	for name, host := range map[string]string{"p1": hostA, "p2": hostB, "w1": hostA} {
		poll.Until(t, settle, name+" is ready", k.ready(name, host))
	}
	p1, p2 := k.get("p1"), k.get("p2")
	netnsBefore := netnsDescriptors(t)

	if code, out := request(ctx, t, debugA.URL, http.MethodGet, agentapi.PathProbes, nil); code != http.StatusOK {
		t.Fatalf("GET %s: %d %s, want 200", agentapi.PathProbes, code, out)
	}
	start := func(base, name string) (int, string) {
		return request(ctx, t, base, http.MethodPost, agentapi.PathProbes, agentapi.ProbeRequest{Namespace: k.ns, Name: name})
	}
	for _, tt := range []struct {
		base, name string
		want       int
	}{
		{debugA.URL, "w1", http.StatusForbidden}, // no check label: a workload's
		{debugA.URL, "p2", http.StatusNotFound},  // node B's
		{debugA.URL, "p1", http.StatusCreated},
		{debugA.URL, "p1", http.StatusCreated}, // again: the same probe
		{debugB.URL, "p2", http.StatusCreated},
	} {
		if code, out := start(tt.base, tt.name); code != tt.want {
			t.Fatalf("POST %s {%s}: %d %s, want %d", agentapi.PathProbes, tt.name, code, out, tt.want)
		}
	}
	if _, err := nsA.Run(ctx, "ip", "link", "show", p1.Status.IfcName); err == nil {
		t.Errorf("interface %s of p1 is still in node A's namespace under its probe", p1.Status.IfcName)
	}
	if _, err := nsA.Run(ctx, "ip", "link", "show", k.get("w1").Status.IfcName); err != nil {
		t.Errorf("interface of w1, refused a probe, left node A's namespace: %v", err)
	}
	if got := netnsDescriptors(t); got != netnsBefore+2 {
		t.Errorf("%d network namespace descriptors with two probes, want %d", got, netnsBefore+2)
	}

	mtu := int(min(p1.Status.MTU, p2.Status.MTU))
	check := func(base string, from *v1alpha1.NetworkAttachment, to string) (agentapi.ProbeCheckResult, error) {
		code, out := request(ctx, t, base, http.MethodPost, agentapi.PathProbeCheck, agentapi.ProbeCheckRequest{
			Namespace: k.ns, Name: from.Name, To: to, MTU: mtu, TimeoutSeconds: 2,
		})
		var res agentapi.ProbeCheckResult
		if code != http.StatusOK {
			return res, fmt.Errorf("POST %s: %d %s", agentapi.PathProbeCheck, code, out)
		}
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			return res, err
		}
		return res, nil
	}
	passes := func(base string, from *v1alpha1.NetworkAttachment, to string) func(context.Context) error {
		return func(context.Context) error {
			res, err := check(base, from, to)
			if err != nil {
				return err
			}
			if !res.Ping.OK || !res.FullSizePing.OK || !res.TCP.OK {
				return fmt.Errorf("check from %s to %s: %+v", from.Name, to, res)
			}
			t.Logf("check from %s to %s (MTU %d): %+v", from.Name, to, mtu, res)
			return nil
		}
	}
	poll.Until(t, settle, "p1's probe reaches p2's", passes(debugA.URL, p1, p2.Status.IPv4))
	poll.Until(t, settle, "p2's probe reaches p1's", passes(debugB.URL, p2, p1.Status.IPv4))
	// An address of the subnet that nobody has answers nothing.
	res, err := check(debugA.URL, p1, "10.32.0.250")
	if err != nil {
		t.Fatal(err)
	}
	if res.Ping.OK || res.FullSizePing.OK || res.TCP.OK {
		t.Errorf("check to an address nobody has: %+v, want three failures", res)
	}
	// A check of an attachment without a probe is 404.
	if code, out := request(ctx, t, debugA.URL, http.MethodPost, agentapi.PathProbeCheck, agentapi.ProbeCheckRequest{
		Namespace: k.ns, Name: "w1", To: p2.Status.IPv4, MTU: mtu, TimeoutSeconds: 1,
	}); code != http.StatusNotFound {
		t.Errorf("check from w1, which has no probe: %d %s, want 404", code, out)
	}

	// DELETE gives the interface back, without the probe's address, and
	// closes the probe's namespace.
	q := url.Values{"namespace": {k.ns}, "name": {"p1"}}
	if code, out := request(ctx, t, debugA.URL, http.MethodDelete, agentapi.PathProbes+"?"+q.Encode(), nil); code != http.StatusNoContent {
		t.Fatalf("DELETE %s: %d %s, want 204", agentapi.PathProbes, code, out)
	}
	out, err := nsA.Run(ctx, "ip", "-o", "addr", "show", "dev", p1.Status.IfcName)
	if err != nil {
		t.Errorf("interface %s is not back in node A's namespace: %v", p1.Status.IfcName, err)
	} else if strings.Contains(out, p1.Status.IPv4) {
		t.Errorf("interface %s came back with the probe's address: %s", p1.Status.IfcName, out)
	}
	if got := netnsDescriptors(t); got != netnsBefore+1 {
		t.Errorf("%d network namespace descriptors after DELETE, want %d", got, netnsBefore+1)
	}
	res, err = check(debugB.URL, p2, p1.Status.IPv4)
	if err != nil {
		t.Fatal(err)
	}
	if res.TCP.OK {
		t.Errorf("TCP to p1's removed probe: %+v, want a failure", res.TCP)
	}

	// Deleting p2's attachment removes its probe.
	k.delete("p2")
	poll.Until(t, settle, "p2's probe is gone with its attachment", func(context.Context) error {
		if got := netnsDescriptors(t); got != netnsBefore {
			return fmt.Errorf("%d network namespace descriptors, want %d", got, netnsBefore)
		}
		return nil
	})
}

// request sends body as JSON, if not nil, and returns the status and body.
func request(ctx context.Context, t *testing.T, base, method, path string, body any) (int, string) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, r)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(out))
}

// netnsDescriptors counts the test process's descriptors of network
// namespaces: a probe holds one.
func netnsDescriptors(t *testing.T) int {
	t.Helper()
	fds, err := filepath.Glob("/proc/self/fd/*")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, fd := range fds {
		if l, err := os.Readlink(fd); err == nil && strings.HasPrefix(l, "net:[") {
			n++
		}
	}
	return n
}
