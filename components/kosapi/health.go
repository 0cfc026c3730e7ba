package kosapi

import (
	"fmt"
	"os"
)

// A node lost without a word (power, network) leaves its kos-apiserver
// replica among the Service's endpoints until the cluster marks the node
// NotReady, up to a minute, and every HTTP/2 connection a component holds
// to that replica open and silent. client-go finds such a connection dead
// only when a health-check ping goes unanswered: by default a ping after
// 30 s without a frame, and 15 s to wait for its answer, 45 s in which
// every request and watch on the connection waits. KOS components check
// sooner; the figures are client-go's environment variables, so an
// operator can still set others in the pod's environment.
var healthCheck = []struct{ name, value string }{
	// Seconds without a frame after which a connection is pinged.
	{"HTTP2_READ_IDLE_TIMEOUT_SECONDS", "10"},
	// Seconds to wait for the ping's answer before dropping the
	// connection and what waits on it.
	{"HTTP2_PING_TIMEOUT_SECONDS", "5"},
}

// DetectDeadConnections has the process's Kubernetes clients made after it
// find a dead HTTP/2 connection within 15 s instead of client-go's 45:
// it sets client-go's health-check variables (see healthCheck) where the
// environment does not set them already. Call it before making clients.
func DetectDeadConnections() error {
	for _, v := range healthCheck {
		if _, set := os.LookupEnv(v.name); set {
			continue
		}
		if err := os.Setenv(v.name, v.value); err != nil {
			return fmt.Errorf("setting %s: %w", v.name, err)
		}
	}
	return nil
}
