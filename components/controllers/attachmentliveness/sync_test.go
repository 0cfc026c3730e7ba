package attachmentliveness

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	coordinationlisters "k8s.io/client-go/listers/coordination/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/controllers/keyqueue"
	"github.com/kos-sdn/kos/components/generated/clientset/versioned/fake"
)

const leaseNamespace = "kos-node"

var t0 = time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)

func lease(node string, renewed time.Time, seconds int32) *coordinationv1.Lease {
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: leaseNamespace, Name: node},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(node), RenewTime: &metav1.MicroTime{Time: renewed}},
	}
	if seconds > 0 {
		l.Spec.LeaseDurationSeconds = ptr.To(seconds)
	}
	return l
}

func attachment(name, node string, ready metav1.ConditionStatus, reason string) *v1alpha1.NetworkAttachment {
	return &v1alpha1.NetworkAttachment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Generation: 1,
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "someone"}}},
		Spec: v1alpha1.NetworkAttachmentSpec{Node: node, Subnet: "s1"},
		Status: v1alpha1.NetworkAttachmentStatus{IPv4: "10.0.0.5", Conditions: []metav1.Condition{{
			Type: v1alpha1.NetworkAttachmentReady, Status: ready, Reason: reason, ObservedGeneration: 1,
			LastTransitionTime: metav1.NewTime(t0.Add(-time.Hour)),
		}}},
	}
}

// gauge remembers the value it was set to.
type gauge struct{ v float64 }

func (g *gauge) Set(v float64) { g.v = v }

type testController struct {
	*Controller
	client      *fake.Clientset
	clock       *clocktesting.FakeClock
	leases      cache.Indexer
	attachments cache.Indexer
}

// newTestController returns a controller on a fake clientset and a fake
// clock at t0, with its caches holding leases and atts.
func newTestController(t *testing.T, leases []*coordinationv1.Lease, atts ...*v1alpha1.NetworkAttachment) *testController {
	t.Helper()
	leaseIndexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, l := range leases {
		if err := leaseIndexer.Add(l); err != nil {
			t.Fatal(err)
		}
	}
	attIndexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{attachmentsByNodeIndex: attachmentNode})
	var objs []runtime.Object
	for _, a := range atts {
		objs = append(objs, a.DeepCopy())
		if err := attIndexer.Add(a); err != nil {
			t.Fatal(err)
		}
	}
	clk := clocktesting.NewFakeClock(t0)
	c := &Controller{
		client:      fake.NewSimpleClientset(objs...),
		leases:      coordinationlisters.NewLeaseLister(leaseIndexer).Leases(leaseNamespace),
		attachments: attIndexer,
		queue:       keyqueue.New(QueueName),
		clock:       clk,
		grace:       DefaultGrace,
		seen:        map[string]heartbeat{},
		silent:      map[string]bool{},
		silentNodes: &gauge{},
	}
	t.Cleanup(c.queue.ShutDown)
	return &testController{Controller: c, client: c.client.(*fake.Clientset), clock: clk, leases: leaseIndexer, attachments: attIndexer}
}

// statusWrites returns the Ready conditions the controller wrote, by
// attachment, and checks that no write carried managed fields.
func (tc *testController) statusWrites(t *testing.T) map[string]*metav1.Condition {
	t.Helper()
	got := map[string]*metav1.Condition{}
	for _, a := range tc.client.Actions() {
		u, ok := a.(k8stesting.UpdateAction)
		if !ok || a.GetSubresource() != "status" {
			continue
		}
		att := u.GetObject().(*v1alpha1.NetworkAttachment)
		if att.ManagedFields != nil {
			t.Errorf("the status write of %s carries managed fields", att.Name)
		}
		got[att.Name] = meta.FindStatusCondition(att.Status.Conditions, v1alpha1.NetworkAttachmentReady)
	}
	tc.client.ClearActions()
	return got
}

func (tc *testController) wantSilentNodes(t *testing.T, want float64) {
	t.Helper()
	if got := tc.silentNodes.(*gauge).v; got != want {
		t.Errorf("silent nodes gauge = %v, want %v", got, want)
	}
}

// syncNode syncs node at the fake clock's time now.
func (tc *testController) syncNode(t *testing.T, node string, at time.Duration) error {
	t.Helper()
	tc.clock.SetTime(t0.Add(at))
	return tc.sync(context.Background(), cache.NewObjectName("", node))
}

func TestJudge(t *testing.T) {
	tests := []struct {
		name        string
		lease       *coordinationv1.Lease
		at          time.Duration // since the first look, at t0
		renewed     *time.Time    // a renewal seen at "at"
		want        verdict
		wantRecheck time.Duration
	}{
		{name: "no lease is never judged", lease: nil, at: time.Hour, want: unjudged},
		{name: "fresh, no renewal seen yet", lease: lease("n1", t0, 40), at: 10 * time.Second, want: pending, wantRecheck: 35 * time.Second},
		{name: "within the grace", lease: lease("n1", t0, 40), at: 44 * time.Second, want: pending, wantRecheck: time.Second},
		{name: "stale", lease: lease("n1", t0, 40), at: 45 * time.Second, want: silent},
		{name: "no duration means the default", lease: lease("n1", t0, 0), at: 44 * time.Second, want: pending, wantRecheck: time.Second},
		{name: "short lease", lease: lease("n1", t0, 2), at: 8 * time.Second, want: silent},
		{name: "renewed", lease: lease("n1", t0, 40), at: 10 * time.Second, renewed: ptr.To(t0.Add(10 * time.Second)),
			want: alive, wantRecheck: 45 * time.Second},
		// The agent's clock is an hour behind: what counts is when this
		// controller saw the renewal.
		{name: "a renewal restarts the count whatever its time says", lease: lease("n1", t0.Add(-time.Hour), 40),
			at: 50 * time.Second, renewed: ptr.To(t0.Add(-time.Hour + 10*time.Second)), want: alive, wantRecheck: 45 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestController(t, nil)
			c.judge("n1", tc.lease) // the first look, at t0
			c.clock.SetTime(t0.Add(tc.at))
			l := tc.lease
			if tc.renewed != nil {
				l = lease("n1", *tc.renewed, 40)
			}
			v, silence, recheck := c.judge("n1", l)
			if v != tc.want {
				t.Errorf("verdict = %d, want %d", v, tc.want)
			}
			if (silence != "") != (tc.want == silent) {
				t.Errorf("silence = %q with verdict %d", silence, v)
			}
			if recheck != tc.wantRecheck {
				t.Errorf("recheck = %s, want %s", recheck, tc.wantRecheck)
			}
		})
	}
}

func TestSyncMarksAndClears(t *testing.T) {
	tc := newTestController(t, []*coordinationv1.Lease{lease("n1", t0, 40)},
		attachment("ready", "n1", metav1.ConditionTrue, v1alpha1.ReasonReady),
		attachment("failed", "n1", metav1.ConditionFalse, v1alpha1.ReasonExecFailed),
		attachment("elsewhere", "n2", metav1.ConditionTrue, v1alpha1.ReasonReady),
	)
	ignoreTime := cmpopts.IgnoreFields(metav1.Condition{}, "LastTransitionTime")

	for _, at := range []time.Duration{0, 44 * time.Second} {
		if err := tc.syncNode(t, "n1", at); err != nil {
			t.Fatal(err)
		}
		if got := tc.statusWrites(t); len(got) != 0 {
			t.Fatalf("at %s: wrote %v to a live node's attachments", at, got)
		}
	}

	if err := tc.syncNode(t, "n1", 45*time.Second); err != nil {
		t.Fatal(err)
	}
	want := map[string]*metav1.Condition{"ready": {
		Type: v1alpha1.NetworkAttachmentReady, Status: metav1.ConditionUnknown, ObservedGeneration: 1,
		Reason:  v1alpha1.ReasonAgentNotHeartbeating,
		Message: "The agent of node n1 has not renewed its Lease kos-node/n1 (duration 40s) since 2026-11-29T06:00:00Z",
	}}
	if diff := cmp.Diff(tc.statusWrites(t), want, ignoreTime); diff != "" {
		t.Fatalf("writes to a stale node's attachments (-got +want):\n%s", diff)
	}
	tc.wantSilentNodes(t, 1)

	// n2 has no Lease: its agent never heartbeat, and is not judged.
	if err := tc.syncNode(t, "n2", time.Hour); err != nil {
		t.Fatal(err)
	}
	if got := tc.statusWrites(t); len(got) != 0 {
		t.Fatalf("wrote %v to the attachments of a node without a Lease", got)
	}

	// The cache sees the mark; a sync while still stale writes nothing.
	marked, err := tc.client.NetworkV1alpha1().NetworkAttachments("ns").Get(context.Background(), "ready", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := tc.attachments.Update(marked); err != nil {
		t.Fatal(err)
	}
	tc.client.ClearActions()
	if err := tc.syncNode(t, "n1", 60*time.Second); err != nil {
		t.Fatal(err)
	}
	if got := tc.statusWrites(t); len(got) != 0 {
		t.Fatalf("wrote %v again to marked attachments", got)
	}

	// The agent is back: the mark goes, and the server derives Ready.
	if err := tc.leases.Update(lease("n1", t0.Add(70*time.Second), 40)); err != nil {
		t.Fatal(err)
	}
	if err := tc.syncNode(t, "n1", 70*time.Second); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(tc.statusWrites(t), map[string]*metav1.Condition{"ready": nil}); diff != "" {
		t.Fatalf("writes when the agent is back (-got +want):\n%s", diff)
	}
	tc.wantSilentNodes(t, 0)

	// The Lease is deleted (the agent is gone for good, or downgraded):
	// a node without a Lease is not judged, so a mark goes too.
	if err := tc.leases.Delete(lease("n1", t0, 40)); err != nil {
		t.Fatal(err)
	}
	if err := tc.syncNode(t, "n1", time.Hour); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(tc.statusWrites(t), map[string]*metav1.Condition{"ready": nil}); diff != "" {
		t.Fatalf("writes after the Lease is deleted (-got +want):\n%s", diff)
	}
}

func TestSyncWriteErrors(t *testing.T) {
	tests := []struct {
		name    string
		reactor k8stesting.ReactionFunc
		wantErr bool
	}{
		{"a conflict is retried", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "networkattachments"}, "ready", errors.New("stale"))
		}, true},
		{"a deleted attachment needs nothing", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewNotFound(schema.GroupResource{Resource: "networkattachments"}, "ready")
		}, false},
		// An older kos-apiserver derives Ready whatever was asked: no
		// retry changes that.
		{"a server that keeps no mark is not retried", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, attachment("ready", "n1", metav1.ConditionTrue, v1alpha1.ReasonReady), nil
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tc := newTestController(t, []*coordinationv1.Lease{lease("n1", t0, 40)},
				attachment("ready", "n1", metav1.ConditionTrue, v1alpha1.ReasonReady))
			tc.client.PrependReactor("update", "networkattachments", tt.reactor)
			if err := tc.syncNode(t, "n1", 0); err != nil {
				t.Fatal(err)
			}
			err := tc.syncNode(t, "n1", time.Minute)
			if (err != nil) != tt.wantErr {
				t.Errorf("sync error = %v, want error %v", err, tt.wantErr)
			}
		})
	}
}

// TestSyncAfterRestart: a controller that starts (or takes the lead) with
// marks already made leaves them until it has judged the node itself.
func TestSyncAfterRestart(t *testing.T) {
	marked := attachment("ready", "n1", metav1.ConditionUnknown, v1alpha1.ReasonAgentNotHeartbeating)
	tc := newTestController(t, []*coordinationv1.Lease{lease("n1", t0.Add(-time.Hour), 40)}, marked)
	for _, at := range []time.Duration{0, 44 * time.Second, 45 * time.Second} {
		if err := tc.syncNode(t, "n1", at); err != nil {
			t.Fatal(err)
		}
		if got := tc.statusWrites(t); len(got) != 0 {
			t.Fatalf("at %s after the start: wrote %v", at, got)
		}
	}
	tc.wantSilentNodes(t, 1)
	// The agent is back.
	if err := tc.leases.Update(lease("n1", t0.Add(50*time.Second), 40)); err != nil {
		t.Fatal(err)
	}
	if err := tc.syncNode(t, "n1", 50*time.Second); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(tc.statusWrites(t), map[string]*metav1.Condition{"ready": nil}); diff != "" {
		t.Fatalf("writes when the agent is back (-got +want):\n%s", diff)
	}
}
