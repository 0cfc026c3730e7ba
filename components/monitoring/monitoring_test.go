package monitoring

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestServe(t *testing.T) {
	reg := prometheus.NewRegistry()
	counter := prometheus.NewCounter(prometheus.CounterOpts{Name: "test_events_total", Help: "Events."})
	reg.MustRegister(counter)
	counter.Inc()
	ready := errors.New("not ready yet")
	h := Handler(reg,
		Check{Path: "/healthz", Func: func(*http.Request) error { return nil }},
		Check{Path: "/readyz", Func: func(*http.Request) error { return ready }},
		Check{Path: "/livez", Func: func(*http.Request) error { return ready }, Code: http.StatusInternalServerError},
	)
	s, err := Listen("127.0.0.1:0", h)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx) }()

	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + s.Addr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(body)
	}
	tests := []struct {
		path     string
		wantCode int
		wantBody string
	}{
		{"/metrics", http.StatusOK, "test_events_total 1"},
		{"/healthz", http.StatusOK, "ok\n"},
		{"/readyz", http.StatusServiceUnavailable, "not ready yet\n"},
		{"/livez", http.StatusInternalServerError, "not ready yet\n"},
		{"/nothing", http.StatusNotFound, "404 page not found\n"},
	}
	for _, tc := range tests {
		code, body := get(tc.path)
		if code != tc.wantCode || !strings.Contains(body, tc.wantBody) {
			t.Errorf("GET %s = %d %q, want %d with %q", tc.path, code, body, tc.wantCode, tc.wantBody)
		}
	}

	cancel()
	if err := <-served; err != nil {
		t.Errorf("Serve after ctx ended = %v, want nil", err)
	}
	if _, err := http.Get("http://" + s.Addr() + "/healthz"); err == nil {
		t.Error("the server still answers after Serve returned")
	}
}

func TestListenTaken(t *testing.T) {
	s, err := Listen("127.0.0.1:0", http.NotFoundHandler())
	if err != nil {
		t.Fatal(err)
	}
	defer s.listener.Close()
	if _, err := Listen(s.Addr(), http.NotFoundHandler()); err == nil {
		t.Errorf("Listen on the taken %s: got nil, want an error", s.Addr())
	}
}
