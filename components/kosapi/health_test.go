package kosapi

import (
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDetectDeadConnections(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want map[string]string
	}{{
		name: "unset: KOS's figures",
		want: map[string]string{"HTTP2_READ_IDLE_TIMEOUT_SECONDS": "10", "HTTP2_PING_TIMEOUT_SECONDS": "5"},
	}, {
		name: "the operator's figure kept",
		env:  map[string]string{"HTTP2_READ_IDLE_TIMEOUT_SECONDS": "0"},
		want: map[string]string{"HTTP2_READ_IDLE_TIMEOUT_SECONDS": "0", "HTTP2_PING_TIMEOUT_SECONDS": "5"},
	}, {
		name: "set empty counts as set",
		env:  map[string]string{"HTTP2_PING_TIMEOUT_SECONDS": ""},
		want: map[string]string{"HTTP2_READ_IDLE_TIMEOUT_SECONDS": "10", "HTTP2_PING_TIMEOUT_SECONDS": ""},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, v := range healthCheck {
				t.Setenv(v.name, "") // restored after the test
				os.Unsetenv(v.name)
			}
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			if err := DetectDeadConnections(); err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, v := range healthCheck {
				got[v.name] = os.Getenv(v.name)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("environment after DetectDeadConnections (-want +got):\n%s", diff)
			}
		})
	}
}
