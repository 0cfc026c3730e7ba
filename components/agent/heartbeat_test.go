package agent

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

func TestHeartbeatBeats(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t0 := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakePassiveClock(t0)
	client := fake.NewClientset()
	var healthErr error
	hb := &Heartbeat{Client: client.CoordinationV1(), Namespace: "kos-node", Node: "n1", Clock: clk,
		Healthy: func() error { return healthErr }}
	lease := func() *coordinationv1.Lease {
		t.Helper()
		l, err := client.CoordinationV1().Leases("kos-node").Get(ctx, "n1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	verbs := func() []string {
		var got []string
		for _, a := range client.Actions() {
			got = append(got, a.GetVerb())
		}
		client.ClearActions()
		return got
	}

	// Forbidden, as with 0.3.0's manifests: the agent goes on.
	forbidden := func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, "n1", errors.New("no rights"))
	}
	client.PrependReactor("*", "leases", forbidden)
	if got := hb.beat(ctx); got != beatForbidden {
		t.Fatalf("a forbidden beat: %q, want %q", got, beatForbidden)
	}
	client.ReactionChain = client.ReactionChain[1:]
	client.ClearActions()

	if got := hb.beat(ctx); got != beatRenewed {
		t.Fatalf("a good beat: %q, want %q", got, beatRenewed)
	}
	want := coordinationv1.LeaseSpec{
		HolderIdentity: ptr.To("n1"), LeaseDurationSeconds: ptr.To[int32](40),
		AcquireTime: &metav1.MicroTime{Time: t0}, RenewTime: &metav1.MicroTime{Time: t0},
	}
	if diff := cmp.Diff(lease().Spec, want); diff != "" {
		t.Fatalf("created lease (-got +want):\n%s", diff)
	}
	if diff := cmp.Diff(verbs(), []string{"get", "create", "get"}); diff != "" {
		t.Fatalf("requests of the first beat (-got +want):\n%s", diff)
	}

	// A renewal updates what it wrote last, without reading it.
	clk.SetTime(t0.Add(10 * time.Second))
	hb.beat(ctx)
	want.RenewTime = &metav1.MicroTime{Time: t0.Add(10 * time.Second)}
	if diff := cmp.Diff(lease().Spec, want); diff != "" {
		t.Fatalf("renewed lease (-got +want):\n%s", diff)
	}
	if diff := cmp.Diff(verbs(), []string{"update", "get"}); diff != "" {
		t.Fatalf("requests of a renewal (-got +want):\n%s", diff)
	}

	// An unhealthy agent does not vouch for its attachments.
	healthErr = errors.New("the first reconcile of the fabric is not done")
	clk.SetTime(t0.Add(20 * time.Second))
	if got := hb.beat(ctx); got != beatUnhealthy {
		t.Fatalf("an unhealthy beat: %q, want %q", got, beatUnhealthy)
	}
	if diff := cmp.Diff(lease().Spec, want); diff != "" {
		t.Fatalf("lease after an unhealthy beat (-got +want):\n%s", diff)
	}
	healthErr = nil

	// Someone deleted the Lease: the failed update makes the next beat
	// read and create it again.
	if err := client.CoordinationV1().Leases("kos-node").Delete(ctx, "n1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	client.ClearActions()
	hb.beat(ctx)
	hb.beat(ctx)
	if diff := cmp.Diff(verbs(), []string{"update", "get", "create"}); diff != "" {
		t.Fatalf("requests after the lease was deleted (-got +want):\n%s", diff)
	}
	if got := lease().Spec.RenewTime.Time; !got.Equal(t0.Add(20 * time.Second)) {
		t.Errorf("renewTime = %s, want %s", got, t0.Add(20*time.Second))
	}
}

func TestHeartbeatRunStopsWithContext(t *testing.T) {
	t.Parallel()
	client := fake.NewClientset()
	hb := &Heartbeat{Client: client.CoordinationV1(), Namespace: "kos-node", Node: "n1", Interval: 10 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); hb.Run(ctx) }()
	time.Sleep(50 * time.Millisecond)
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if _, err := client.CoordinationV1().Leases("kos-node").Get(context.Background(), "n1", metav1.GetOptions{}); err != nil {
		t.Fatalf("no lease after running: %v", err)
	}
}

// TestHeartbeatForbiddenBacksOff: without rights (0.3.0's manifests) the
// heartbeat asks once, then only every heartbeatForbiddenRetry, however
// short its interval.
func TestHeartbeatForbiddenBacksOff(t *testing.T) {
	t.Parallel()
	client := fake.NewClientset()
	client.PrependReactor("*", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, "n1", errors.New("no rights"))
	})
	hb := &Heartbeat{Client: client.CoordinationV1(), Namespace: "kos-node", Node: "n1", Interval: 5 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	hb.Run(ctx)
	if got := len(client.Actions()); got != 1 {
		t.Errorf("%d requests in 200ms of a forbidden heartbeat every 5ms, want 1", got)
	}
}
