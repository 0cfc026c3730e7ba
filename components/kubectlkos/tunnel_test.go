package kubectlkos

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/rest"
)

// TestTunnelAsk sends requests as the tunnel does at the far end of a
// port-forward, to a server with a self-signed certificate that plays the
// agent: the user's bearer token goes along, the certificate is not
// checked, the kubeconfig's impersonation does not, and a refusal says
// which right the agent wants.
func TestTunnelAsk(t *testing.T) {
	t.Parallel()
	var asked []string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked = append(asked, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization")+" "+r.Header.Get("Impersonate-User"))
		switch r.URL.Path {
		case "/debug/status":
			w.Write([]byte(`{"node":"n1"}`))
		case "/debug/probes":
			// The agent's answers to a probe's start and removal.
			if r.Method == http.MethodPost {
				w.WriteHeader(http.StatusCreated)
			} else {
				w.WriteHeader(http.StatusNoContent)
			}
		case "/debug/flows":
			http.Error(w, `Forbidden: user "alice" cannot get nodes/kos-debug of node n1`, http.StatusForbidden)
		default:
			http.Error(w, "ovs-appctl: exit status 1", http.StatusInternalServerError)
		}
	}))
	defer srv.Close()
	_, port, err := net.SplitHostPort(strings.TrimPrefix(srv.URL, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	local, _ := strconv.Atoi(port)
	// The kubeconfig's cluster has a CA of its own, which the agent's
	// certificate is not signed by.
	tun := tunnel{config: &rest.Config{
		Host:            "https://kube-apiserver.example:6443",
		BearerToken:     "alice-token",
		Impersonate:     rest.ImpersonationConfig{UserName: "bob"},
		TLSClientConfig: rest.TLSClientConfig{ServerName: "kube-apiserver.example"},
	}}
	ctx := context.Background()
	body, err := tun.ask(ctx, local, http.MethodGet, "/debug/status", nil)
	if err != nil || string(body) != `{"node":"n1"}` {
		t.Errorf("GET /debug/status = %q, %v; want the status", body, err)
	}
	if _, err := tun.ask(ctx, local, http.MethodPost, "/debug/probes", []byte(`{}`)); err != nil {
		t.Errorf("POST /debug/probes answered 201 = %v, want no error", err)
	}
	if _, err := tun.ask(ctx, local, http.MethodDelete, "/debug/probes", nil); err != nil {
		t.Errorf("DELETE /debug/probes answered 204 = %v, want no error", err)
	}
	if _, err := tun.ask(ctx, local, http.MethodGet, "/debug/flows", nil); err == nil || !strings.Contains(err.Error(), "403") || !strings.Contains(err.Error(), "nodes/kos-debug") {
		t.Errorf("GET /debug/flows = %v, want the 403 with the right the agent wants", err)
	}
	if _, err := tun.ask(ctx, local, http.MethodPost, "/debug/trace", []byte(`{}`)); err == nil || !strings.Contains(err.Error(), "500: ovs-appctl: exit status 1") {
		t.Errorf("POST /debug/trace = %v, want the agent's 500", err)
	}
	want := []string{
		"GET /debug/status Bearer alice-token ",
		"POST /debug/probes Bearer alice-token ",
		"DELETE /debug/probes Bearer alice-token ",
		"GET /debug/flows Bearer alice-token ",
		"POST /debug/trace Bearer alice-token ",
	}
	if diff := cmp.Diff(asked, want); diff != "" {
		t.Errorf("requests (-got +want):\n%s", diff)
	}
}
