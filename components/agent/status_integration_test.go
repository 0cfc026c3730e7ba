package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	agentapi "github.com/kos-sdn/kos/components/agent/api"
	"github.com/kos-sdn/kos/components/fabric"
	"github.com/kos-sdn/kos/tools/poll"
)

// TestIntegrationDebugEndpoints runs an agent on a real Open vSwitch and
// asks its debug endpoints, as `kubectl kos` does through the pod proxy:
// the status counts what the switch holds, the flows and tunnels are the
// switch's, and ofproto/trace follows a packet from a local attachment to
// a remote one into the tunnel, and one to an address nobody holds to a
// drop.
func TestIntegrationDebugEndpoints(t *testing.T) {
	k := newAPI(t)
	const vni = 251
	k.subnet("s1", "10.251.0.0/24", vni)
	_, fab := startOVS(t)
	r := startAgent(t, agentConfig(t, k.node("a"), hostA, fab))
	k.attachment("a1", k.node("a"), "s1")
	k.address("a1", "10.251.0.5", vni)
	k.remote("c1", k.node("c"), "s1", "10.251.0.6", vni, hostC)
	poll.Until(t, settle, "the switch holds a1 and c1", holds(fab, &fabric.Inventory{
		Local:  []fabric.LocalAttachment{local(vni, "10.251.0.5")},
		Remote: []fabric.RemoteAttachment{remote(vni, "10.251.0.6", hostC)},
	}))
	srv := httptest.NewServer(r.agent.DebugHandler())
	defer srv.Close()

	var st agentapi.Status
	poll.Until(t, settle, "the status to count a1 and c1", func(ctx context.Context) error {
		body, err := call(ctx, srv.URL, http.MethodGet, agentapi.PathStatus, nil)
		if err != nil {
			return err
		}
		st = agentapi.Status{}
		if err := json.Unmarshal(body, &st); err != nil {
			return err
		}
		if !st.Ready || st.Local != 1 || st.Remote != 1 || st.LocalAttachments != 1 || st.Networks != 1 {
			return fmt.Errorf("status %+v, want ready with one local and one remote attachment in one network", st)
		}
		return nil
	})
	// 4 default flows, 4 of the local attachment, 3 of the remote one.
	if st.Flows != 11 || st.Node != k.node("a") || st.LastReconcileReason != "start" || st.LastReconcile.IsZero() || st.LastCheck.IsZero() || len(st.Errors) != 0 {
		t.Errorf("status %+v: want 11 flows, node %s, the start's reconcile, a check and no errors", st, k.node("a"))
	}

	ctx := t.Context()
	for path, want := range map[string][]string{
		agentapi.PathFlows:   {"cookie=0x6b", "actions=resubmit(,1)"},
		agentapi.PathTunnels: {"# ovs-vsctl show", `Port vtep`, "remote_ip=flow", "# ovs-appctl tnl/ports/show -v"},
		agentapi.PathRoutes:  {"# the node's IPv4 routes", "# ovs-appctl ovs/route/show"},
	} {
		body, err := call(ctx, srv.URL, http.MethodGet, path, nil)
		if err != nil {
			t.Errorf("GET %s: %v", path, err)
			continue
		}
		for _, w := range want {
			if !strings.Contains(string(body), w) {
				t.Errorf("GET %s does not say %q:\n%s", path, w, body)
			}
		}
	}

	for _, tt := range []struct {
		req  agentapi.TraceRequest
		want []string
	}{
		{agentapi.TraceRequest{Namespace: k.ns, Name: "a1", To: "10.251.0.6"}, []string{"set_field:" + hostC + "->tun_dst", "output:", "Datapath actions:"}},
		{agentapi.TraceRequest{Namespace: k.ns, Name: "a1", To: "10.251.0.6", Protocol: agentapi.ProtocolTCP, Port: 443}, []string{"tp_dst=443", "->tun_dst"}},
		{agentapi.TraceRequest{Namespace: k.ns, Name: "a1", To: "10.251.0.6", Protocol: agentapi.ProtocolARP}, []string{"arp_tpa=10.251.0.6", "->tun_dst"}},
		{agentapi.TraceRequest{Namespace: k.ns, Name: "a1", To: "10.251.0.99"}, []string{"Datapath actions: drop"}},
	} {
		body, err := json.Marshal(tt.req)
		if err != nil {
			t.Fatal(err)
		}
		out, err := call(ctx, srv.URL, http.MethodPost, agentapi.PathTrace, body)
		if err != nil {
			t.Errorf("trace %+v: %v", tt.req, err)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(string(out), w) {
				t.Errorf("trace %+v does not say %q:\n%s", tt.req, w, out)
			}
		}
	}
	// c1 is not this node's: nothing to trace from.
	body, _ := json.Marshal(agentapi.TraceRequest{Namespace: k.ns, Name: "c1", To: "10.251.0.5"})
	if out, err := call(ctx, srv.URL, http.MethodPost, agentapi.PathTrace, body); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("trace from a remote attachment: %v, %q; want 404", err, out)
	}
}

// call asks the agent's debug endpoint path and returns its answer, or an
// error with the status when it is not 200.
func call(ctx context.Context, base, method, path string, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, base+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return out, fmt.Errorf("%s %s: %d: %s", method, path, resp.StatusCode, out)
	}
	return out, nil
}
