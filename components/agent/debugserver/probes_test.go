package debugserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kos-sdn/kos/components/agent/api"
	"github.com/kos-sdn/kos/components/agent/probe"
	"github.com/kos-sdn/kos/components/fabric"
)

// fakeProber answers by the attachment's name, and records its calls.
type fakeProber struct{ calls []string }

func (f *fakeProber) err(name string) error {
	switch name {
	case "workload":
		return fmt.Errorf("attachment ns/workload is %w", ErrNotProbeable)
	case "elsewhere":
		return fmt.Errorf("attachment ns/elsewhere is %w node-a", ErrNotLocal)
	case "pending":
		return fmt.Errorf("attachment ns/pending is %w", ErrNotReady)
	case "unprobed":
		return fmt.Errorf("%w on attachment ns/unprobed", probe.ErrNoProbe)
	case "broken":
		return errors.New("netlink says no")
	}
	return nil
}

func (f *fakeProber) StartProbe(_ context.Context, req api.ProbeRequest) error {
	f.calls = append(f.calls, "start "+req.Name)
	return f.err(req.Name)
}

func (f *fakeProber) CheckProbe(_ context.Context, req api.ProbeCheckRequest) (api.ProbeCheckResult, error) {
	f.calls = append(f.calls, "check "+req.Name+" "+req.To)
	return api.ProbeCheckResult{Ping: api.ProbeOutcome{OK: true}, FullSizePing: api.ProbeOutcome{OK: true}, TCP: api.ProbeOutcome{Detail: "refused"}}, f.err(req.Name)
}

func (f *fakeProber) StopProbe(_ context.Context, req api.ProbeRequest) error {
	f.calls = append(f.calls, "stop "+req.Name)
	return f.err(req.Name)
}

// noAgent is an Agent that the probe paths never ask.
type noAgent struct{}

func (noAgent) Status(context.Context) api.Status { return api.Status{} }
func (noAgent) LocalAttachment(string, string) (fabric.LocalAttachment, error) {
	return fabric.LocalAttachment{}, ErrNotLocal
}
func (noAgent) NetworkPolicy(vni uint32) fabric.NetworkPolicy { return fabric.NetworkPolicy{VNI: vni} }

// TestProbeEndpoints checks how the probe paths validate requests and
// what status each of the Prober's errors gets; a request refused before
// the Prober never reaches it.
func TestProbeEndpoints(t *testing.T) {
	check := func(name, to string, mtu, timeout int) string {
		b, _ := json.Marshal(api.ProbeCheckRequest{Namespace: "ns", Name: name, To: to, MTU: mtu, TimeoutSeconds: timeout})
		return string(b)
	}
	tests := []struct {
		name, method, path, body string
		wantCode                 int
		wantCall                 string
	}{
		{name: "served", method: http.MethodGet, path: api.PathProbes, wantCode: http.StatusOK},
		{name: "start", method: http.MethodPost, path: api.PathProbes, body: `{"namespace":"ns","name":"kos-check-a"}`, wantCode: http.StatusCreated, wantCall: "start kos-check-a"},
		{name: "start a workload's", method: http.MethodPost, path: api.PathProbes, body: `{"namespace":"ns","name":"workload"}`, wantCode: http.StatusForbidden, wantCall: "start workload"},
		{name: "start another node's", method: http.MethodPost, path: api.PathProbes, body: `{"namespace":"ns","name":"elsewhere"}`, wantCode: http.StatusNotFound, wantCall: "start elsewhere"},
		{name: "start one not ready", method: http.MethodPost, path: api.PathProbes, body: `{"namespace":"ns","name":"pending"}`, wantCode: http.StatusConflict, wantCall: "start pending"},
		{name: "start fails", method: http.MethodPost, path: api.PathProbes, body: `{"namespace":"ns","name":"broken"}`, wantCode: http.StatusInternalServerError, wantCall: "start broken"},
		{name: "start: not JSON", method: http.MethodPost, path: api.PathProbes, body: `name=a`, wantCode: http.StatusBadRequest},
		{name: "start: unknown field", method: http.MethodPost, path: api.PathProbes, body: `{"namespace":"ns","name":"a","netns":"/proc/1/ns/net"}`, wantCode: http.StatusBadRequest},
		{name: "start: bad name", method: http.MethodPost, path: api.PathProbes, body: `{"namespace":"ns","name":"../a"}`, wantCode: http.StatusBadRequest},
		{name: "start: too large", method: http.MethodPost, path: api.PathProbes, body: `{"namespace":"ns","name":"` + strings.Repeat("a", 5<<10) + `"}`, wantCode: http.StatusBadRequest},
		{name: "check", method: http.MethodPost, path: api.PathProbeCheck, body: check("kos-check-a", "172.31.254.3", 1450, 2), wantCode: http.StatusOK, wantCall: "check kos-check-a 172.31.254.3"},
		{name: "check without probe", method: http.MethodPost, path: api.PathProbeCheck, body: check("unprobed", "172.31.254.3", 1450, 2), wantCode: http.StatusNotFound, wantCall: "check unprobed 172.31.254.3"},
		{name: "check: IPv6", method: http.MethodPost, path: api.PathProbeCheck, body: check("a", "fd00::1", 1450, 2), wantCode: http.StatusBadRequest},
		{name: "check: no MTU", method: http.MethodPost, path: api.PathProbeCheck, body: check("a", "172.31.254.3", 0, 2), wantCode: http.StatusBadRequest},
		{name: "check: long timeout", method: http.MethodPost, path: api.PathProbeCheck, body: check("a", "172.31.254.3", 1450, 60), wantCode: http.StatusBadRequest},
		{name: "check: GET", method: http.MethodGet, path: api.PathProbeCheck, wantCode: http.StatusMethodNotAllowed},
		{name: "stop", method: http.MethodDelete, path: api.PathProbes + "?namespace=ns&name=kos-check-a", wantCode: http.StatusNoContent, wantCall: "stop kos-check-a"},
		{name: "stop: no name", method: http.MethodDelete, path: api.PathProbes + "?namespace=ns", wantCode: http.StatusBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &fakeProber{}
			rec := httptest.NewRecorder()
			Handler(noAgent{}, nil, p).ServeHTTP(rec, httptest.NewRequest(tt.method, tt.path, strings.NewReader(tt.body)))
			if rec.Code != tt.wantCode {
				t.Errorf("status %d (%s), want %d", rec.Code, strings.TrimSpace(rec.Body.String()), tt.wantCode)
			}
			var want []string
			if tt.wantCall != "" {
				want = []string{tt.wantCall}
			}
			if diff := cmp.Diff(p.calls, want); diff != "" {
				t.Errorf("calls of the Prober (-got +want):\n%s", diff)
			}
			if tt.name == "check" {
				var got api.ProbeCheckResult
				if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || got.Ping.OK != true || got.TCP.Detail != "refused" {
					t.Errorf("body %q (%v), want the Prober's result", rec.Body.String(), err)
				}
			}
		})
	}
}

// TestNoProbes checks that an agent without probes answers their paths
// 404, as agents before probes do: `kubectl kos check` then skips.
func TestNoProbes(t *testing.T) {
	rec := httptest.NewRecorder()
	Handler(noAgent{}, nil, nil).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, api.PathProbes, nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("GET %s without probes: %d, want 404", api.PathProbes, rec.Code)
	}
}
