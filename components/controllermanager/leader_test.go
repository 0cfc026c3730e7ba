package controllermanager_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/kos-sdn/kos/components/controllermanager"
	"github.com/kos-sdn/kos/tools/poll"
	"github.com/kos-sdn/kos/tools/testenv"
)

// TestIntegrationLeaderElection runs two managers that elect a leader on a
// Lease: only the holder runs the controllers, and when it stops, the other
// takes over.
func TestIntegrationLeaderElection(t *testing.T) {
	env := testenv.Shared(t)
	c := kosClient(t)
	kos := startKOS(t)
	ns := newNamespace(t)
	kube, err := kubernetes.NewForConfig(env.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	type candidate struct {
		identity string
		url      string
		stop     func()
	}
	var candidates []*candidate
	for _, identity := range []string{"first", "second"} {
		m, err := controllermanager.Config{
			Kube: env.RESTConfig,
			KOS:  kos.DirectConfig,
			LeaderElection: &controllermanager.LeaderElection{
				Namespace: ns, Name: "kos-controller-manager", Identity: identity,
				LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond,
			},
		}.Complete().New()
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(m.Handler())
		t.Cleanup(srv.Close)
		ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), klog.Background().WithName(identity)))
		done := make(chan error, 1)
		go func() { done <- m.Run(ctx) }()
		stop := func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("manager %s: %v", identity, err)
			}
		}
		t.Cleanup(func() {
			if ctx.Err() == nil {
				stop()
			}
		})
		candidates = append(candidates, &candidate{identity: identity, url: srv.URL, stop: stop})
		if identity == "first" {
			// Let the first one win, so that the test knows whom to stop.
			waitLeader(t, kube, ns, "first")
		}
	}

	ready := func(c *candidate) bool {
		code, err := httpGet(context.Background(), c.url+"/readyz")
		return err == nil && code == http.StatusOK
	}
	poll.Until(t, 30*time.Second, "the leader ready", func(context.Context) error {
		if !ready(candidates[0]) {
			return fmt.Errorf("the leader is not ready")
		}
		return nil
	})
	if ready(candidates[1]) {
		t.Error("the manager without the Lease is ready; want it standing by")
	}
	get(t, candidates[1].url+"/healthz", http.StatusOK)
	s := createSubnet(t, c, newSubnet(ns, "led", "10.160.0.0/24", 160))
	waitValidated(t, c, s)

	candidates[0].stop()
	waitLeader(t, kube, ns, "second")
	poll.Until(t, 30*time.Second, "the new leader ready", func(context.Context) error {
		if !ready(candidates[1]) {
			return fmt.Errorf("the new leader is not ready")
		}
		return nil
	})
	s2 := createSubnet(t, c, newSubnet(ns, "led-again", "10.160.1.0/24", 160))
	waitValidated(t, c, s2)
}

// waitLeader waits until the Lease names identity as its holder.
func waitLeader(t *testing.T, kube kubernetes.Interface, ns, identity string) {
	t.Helper()
	poll.Until(t, 30*time.Second, identity+" holds the Lease", func(ctx context.Context) error {
		lease, err := kube.CoordinationV1().Leases(ns).Get(ctx, "kos-controller-manager", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if h := lease.Spec.HolderIdentity; h == nil || *h != identity {
			return fmt.Errorf("holder %v", h)
		}
		return nil
	})
}
