package cni

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestExchange runs the plugin's side of a request against answers an
// agent could give and some it could not: the request is the HTTP/1.0
// POST net/http's server reads, a whole answer gives its code and body,
// and an answer that is no HTTP, or shorter than it says, is an error.
func TestExchange(t *testing.T) {
	for _, tc := range []struct {
		name, answer string
		wantCode     int
		wantStatus   string
		wantBody     string
		wantErr      string
	}{
		{name: "a whole answer", answer: "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}", wantCode: 200, wantStatus: "200 OK", wantBody: "{}"},
		{name: "a body ended by the connection", answer: "HTTP/1.1 500 Internal Server Error\r\nConnection: close\r\n\r\nboom\n", wantCode: 500, wantStatus: "500 Internal Server Error", wantBody: "boom\n"},
		{name: "no HTTP", answer: "SSH-2.0-OpenSSH\r\n", wantErr: "not an HTTP status line"},
		{name: "a body shorter than it says", answer: "HTTP/1.0 200 OK\r\nContent-Length: 10\r\n\r\nshort", wantErr: "5 bytes of 10"},
		{name: "nothing", answer: "", wantErr: "reading the answer: EOF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, agent := net.Pipe()
			got := make(chan *http.Request, 1)
			go func() {
				defer agent.Close()
				req, err := http.ReadRequest(bufio.NewReader(agent))
				if err != nil {
					t.Errorf("the agent's side could not read the request: %v", err)
					got <- nil
					return
				}
				body, _ := io.ReadAll(req.Body)
				req.Body = io.NopCloser(strings.NewReader(string(body)))
				got <- req
				_, _ = io.WriteString(agent, tc.answer)
			}()
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			code, status, body, err := exchange(ctx, client, []byte(`{"command":"ADD"}`))
			client.Close()
			if req := <-got; req != nil {
				sent, _ := io.ReadAll(req.Body)
				if req.Method != http.MethodPost || req.URL.Path != RequestPath || req.Proto != "HTTP/1.0" ||
					req.Header.Get("Content-Type") != "application/json" || string(sent) != `{"command":"ADD"}` {
					t.Errorf("request: %s %s %s, Content-Type %q, body %q; want an HTTP/1.0 POST of the JSON to %s",
						req.Method, req.URL.Path, req.Proto, req.Header.Get("Content-Type"), sent, RequestPath)
				}
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || code != tc.wantCode || status != tc.wantStatus || string(body) != tc.wantBody {
				t.Errorf("got %d %q %q (%v), want %d %q %q", code, status, body, err, tc.wantCode, tc.wantStatus, tc.wantBody)
			}
		})
	}
}
