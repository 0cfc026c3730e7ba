package debugserver

import (
	"context"
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// TestAccessAttributes checks what a SubjectAccessReview asks of each
// request: reads need get, a trace create, on nodes/kos-debug of the node.
func TestAccessAttributes(t *testing.T) {
	u := &user.DefaultInfo{Name: "alice"}
	for method, verb := range map[string]string{http.MethodGet: "get", http.MethodHead: "get", http.MethodPost: "create", http.MethodPut: "create", http.MethodDelete: "create"} {
		got := accessAttributes(&authenticator.Response{User: u}, httptest.NewRequest(method, "/debug/x", nil), "node-a")
		want := authorizer.AttributesRecord{User: u, Verb: verb, APIVersion: "v1", Resource: "nodes", Subresource: "kos-debug", Name: "node-a", ResourceRequest: true, Path: "/debug/x"}
		if diff := cmp.Diff(got, want); diff != "" {
			t.Errorf("%s: attributes (-got +want):\n%s", method, diff)
		}
	}
}

// TestLoopbackOnly checks that a loopback-only server binds the loopback
// address at the port asked for, over HTTPS, and needs no cluster.
func TestLoopbackOnly(t *testing.T) {
	s, err := New(Config{BindAddress: ":0", LoopbackOnly: true}, http.NotFoundHandler())
	if err != nil {
		t.Fatal(err)
	}
	if got := s.URL(); !strings.HasPrefix(got, "https://127.0.0.1:") {
		t.Errorf("URL() = %q, want https://127.0.0.1:<port>", got)
	}
	ctx, cancel := context.WithCancel(t.Context())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx) }()
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := client.Get(s.URL() + "/debug/status")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /debug/status without credentials: %d, want the handler's 404", resp.StatusCode)
	}
	cancel()
	if err := <-served; err != nil {
		t.Errorf("Serve: %v", err)
	}
	if _, err := New(Config{BindAddress: ":0"}, http.NotFoundHandler()); err == nil {
		t.Error("New without a cluster client and node name succeeded, want an error")
	}
}
