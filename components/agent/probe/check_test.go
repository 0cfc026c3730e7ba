package probe

import (
	"strings"
	"testing"

	"github.com/kos-sdn/kos/components/agent/api"
)

func TestValidateCheck(t *testing.T) {
	ok := api.ProbeCheckRequest{Namespace: "kos-check-x", Name: "kos-check-a", To: "172.31.254.3", MTU: 1450, TimeoutSeconds: 2}
	tests := []struct {
		name   string
		change func(*api.ProbeCheckRequest)
		// want are the parts of the error, none for a valid request.
		want []string
	}{
		{name: "valid", change: func(*api.ProbeCheckRequest) {}},
		{name: "smallest MTU and longest timeout", change: func(r *api.ProbeCheckRequest) { r.MTU, r.TimeoutSeconds = 68, MaxTimeoutSeconds }},
		{name: "IPv6", change: func(r *api.ProbeCheckRequest) { r.To = "fd00::1" }, want: []string{`destination "fd00::1"`}},
		{name: "flow text", change: func(r *api.ProbeCheckRequest) { r.To = "10.0.0.1,in_port=1" }, want: []string{"want an IPv4 address"}},
		{name: "no MTU", change: func(r *api.ProbeCheckRequest) { r.MTU = 0 }, want: []string{"mtu 0"}},
		{name: "huge MTU", change: func(r *api.ProbeCheckRequest) { r.MTU = 70000 }, want: []string{"mtu 70000"}},
		{name: "no timeout", change: func(r *api.ProbeCheckRequest) { r.TimeoutSeconds = 0 }, want: []string{"timeoutSeconds 0"}},
		{name: "long timeout", change: func(r *api.ProbeCheckRequest) { r.TimeoutSeconds = 6 }, want: []string{"timeoutSeconds 6"}},
		{name: "every problem at once", change: func(r *api.ProbeCheckRequest) {
			r.Namespace, r.Name, r.To, r.MTU, r.TimeoutSeconds = "Bad NS", "", "x", 1, -1
		}, want: []string{`namespace "Bad NS"`, `name ""`, `destination "x"`, "mtu 1", "timeoutSeconds -1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := ok
			tt.change(&req)
			err := ValidateCheck(req)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("ValidateCheck(%+v) = %v, want nil", req, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("ValidateCheck(%+v) = nil, want an error", req)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("ValidateCheck(%+v) = %q, want it to say %q", req, err, w)
				}
			}
		})
	}
}

func TestValidateStart(t *testing.T) {
	if err := ValidateStart(api.ProbeRequest{Namespace: "ns", Name: "a.b"}); err != nil {
		t.Errorf("ValidateStart of a valid request: %v", err)
	}
	err := ValidateStart(api.ProbeRequest{Namespace: "ns/x", Name: ""})
	if err == nil || !strings.Contains(err.Error(), `namespace "ns/x"`) || !strings.Contains(err.Error(), `name ""`) {
		t.Errorf("ValidateStart of a bad namespace and no name = %v, want both named", err)
	}
}
