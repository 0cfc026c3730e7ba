package agent

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/kos-sdn/kos/components/fabric/logging"
)

func TestHealth(t *testing.T) {
	const period = time.Second
	tests := []struct {
		name          string
		health        *health
		live, healthy bool
	}{
		{"starting", &health{}, true, false},
		{"starting, fabric failing", &health{lastCheck: time.Now(), lastCheckErr: errors.New("no switch")}, true, false},
		{"started", &health{ready: true, lastCheck: time.Now()}, true, true},
		{"started, fabric failing", &health{ready: true, lastCheck: time.Now(), lastCheckErr: errors.New("no switch")}, false, false},
		{"started, checks overdue", &health{ready: true, lastCheck: time.Now().Add(-time.Hour)}, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := [2]bool{tc.health.liveErr(period) == nil, tc.health.err(period) == nil}
			if diff := cmp.Diff(got, [2]bool{tc.live, tc.healthy}); diff != "" {
				t.Errorf("[live, healthy] (-got +want):\n%s", diff)
			}
		})
	}
}

// TestServerProbesWhileAPIHangs starts an agent whose KOS API answers
// nothing, as one slow to start, and asks its probes: it is live, so that
// the kubelet does not restart it into the same wait, and not ready.
func TestServerProbesWhileAPIHangs(t *testing.T) {
	hung, asked := make(chan struct{}), make(chan struct{}, 1)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case asked <- struct{}{}:
		default:
		}
		select {
		case <-hung:
		case <-r.Context().Done():
		}
	}))
	defer api.Close()
	defer close(hung)
	cfg := ServerConfig{
		Main: &rest.Config{Host: api.URL},
		KOS:  &rest.Config{Host: api.URL},
		Agent: Config{
			NodeName: "node-a",
			HostIP:   netip.MustParseAddr("192.168.100.1"),
			Fabric:   logging.New(),
		},
	}
	s, err := cfg.Complete().New()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), ktesting.NewLogger(t, ktesting.NewConfig())))
	done := make(chan error, 1)
	go func() { done <- s.agent.Run(ctx, 1) }()
	defer func() {
		cancel()
		<-done
	}()

	<-asked // the informer's list waits for an answer
	want := map[string]int{"/livez": http.StatusOK, "/readyz": http.StatusServiceUnavailable, "/healthz": http.StatusServiceUnavailable}
	got := map[string]int{}
	for path := range want {
		rec := httptest.NewRecorder()
		s.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		got[path] = rec.Code
	}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("probe answers (-got +want):\n%s", diff)
	}
}
