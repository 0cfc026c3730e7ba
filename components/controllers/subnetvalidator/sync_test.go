package subnetvalidator

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/controllers/keyqueue"
	"github.com/kos-sdn/kos/components/generated/clientset/versioned/fake"
	listers "github.com/kos-sdn/kos/components/generated/listers/network/v1alpha1"
)

func subnet(ns, name, cidr string, vni uint32) v1alpha1.Subnet {
	return v1alpha1.Subnet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "/" + name + "-uid")},
		Spec:       v1alpha1.SubnetSpec{IPv4: cidr, VNI: vni},
	}
}

func TestConflicts(t *testing.T) {
	all := []v1alpha1.Subnet{
		subnet("a", "s1", "10.0.0.0/24", 1),
		subnet("a", "s2", "10.0.0.128/25", 1),
		subnet("a", "s3", "10.0.1.0/24", 1),
		subnet("b", "s4", "10.9.0.0/24", 1),
		subnet("a", "s5", "10.0.0.0/16", 2),
		subnet("b", "s6", "10.0.0.0/8", 1),
	}
	tests := []struct {
		name       string
		subject    int
		wantRivals []string
		want       []string
	}{
		{"overlap and other namespaces", 0, []string{"a/s2", "b/s4", "b/s6"}, []string{
			"CIDR overlaps with a/s2's (10.0.0.128/25)",
			"same VNI but different namespace wrt b/s4",
			"same VNI but different namespace wrt b/s6",
		}},
		{"disjoint in its namespace", 2, []string{"b/s4", "b/s6"}, []string{
			"same VNI but different namespace wrt b/s4",
			"same VNI but different namespace wrt b/s6",
		}},
		{"alone on its VNI", 4, nil, nil},
		{"other namespace, overlapping", 5, []string{"a/s1", "a/s2", "a/s3", "b/s4"}, []string{
			"CIDR overlaps with b/s4's (10.9.0.0/24)",
			"same VNI but different namespace wrt a/s1",
			"same VNI but different namespace wrt a/s2",
			"same VNI but different namespace wrt a/s3",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rivals, got := Conflicts(&all[tc.subject], all)
			if diff := cmp.Diff(got, tc.want); diff != "" {
				t.Errorf("problems (-got +want):\n%s", diff)
			}
			var gotRivals []string
			for k, uid := range rivals {
				if uid != types.UID(k+"-uid") {
					t.Errorf("rival %s has UID %s", k, uid)
				}
				gotRivals = append(gotRivals, k)
			}
			if diff := cmp.Diff(gotRivals, tc.wantRivals, cmpSorted); diff != "" {
				t.Errorf("rivals (-got +want):\n%s", diff)
			}
		})
	}
}

var cmpSorted = cmpopts.SortSlices(func(a, b string) bool { return a < b })

func TestConflictsCache(t *testing.T) {
	cc := newConflictsCache()
	cc.record("a/x", map[string]types.UID{"a/y": "y1", "b/z": "z1"})
	cc.record("a/w", map[string]types.UID{"a/y": "y1"})
	// x is checked again and now conflicts with z only.
	cc.record("a/x", map[string]types.UID{"b/z": "z1"})

	if got := cc.staleDependents("b/z", "z1"); len(got) != 0 {
		t.Errorf("staleDependents of an unchanged rival = %q, want none", got)
	}
	if diff := cmp.Diff(cc.forget("a/y"), []string{"a/w"}); diff != "" {
		t.Errorf("dependents of deleted a/y (-got +want):\n%s", diff)
	}
	if got := cc.forget("a/y"); len(got) != 0 {
		t.Errorf("forgetting a/y again = %q, want none", got)
	}
	// z is replaced by a subnet of the same name.
	if diff := cmp.Diff(cc.staleDependents("b/z", "z2"), []string{"a/x"}); diff != "" {
		t.Errorf("dependents of replaced b/z (-got +want):\n%s", diff)
	}
	if got := cc.forget("b/z"); len(got) != 0 {
		t.Errorf("dependents of b/z after they were handed out = %q, want none", got)
	}
	// A deleted dependent is no longer anyone's.
	cc.record("a/v", map[string]types.UID{"a/u": "u1"})
	cc.forget("a/v")
	if got := cc.forget("a/u"); len(got) != 0 {
		t.Errorf("dependents of a/u after a/v was deleted = %q, want none", got)
	}
}

// newTestController returns a controller on a fake clientset holding
// subnets, with its cache filled with the same subnets.
func newTestController(t *testing.T, subnets ...v1alpha1.Subnet) (*Controller, *fake.Clientset, *record.FakeRecorder, cache.Indexer) {
	t.Helper()
	var objs []runtime.Object
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for i := range subnets {
		objs = append(objs, &subnets[i])
		if err := indexer.Add(subnets[i].DeepCopy()); err != nil {
			t.Fatal(err)
		}
	}
	client := fake.NewSimpleClientset(objs...)
	recorder := record.NewFakeRecorder(100)
	c := &Controller{
		client:    client,
		subnets:   listers.NewSubnetLister(indexer),
		recorder:  recorder,
		queue:     keyqueue.New(QueueName),
		conflicts: newConflictsCache(),
	}
	t.Cleanup(c.queue.ShutDown)
	return c, client, recorder, indexer
}

func TestSync(t *testing.T) {
	ctx := context.Background()
	c, client, recorder, indexer := newTestController(t,
		subnet("a", "x", "10.0.0.0/24", 1),
		subnet("a", "y", "10.0.0.0/25", 1),
		subnet("a", "free", "10.1.0.0/24", 1),
	)
	for _, name := range []string{"x", "y", "free"} {
		key := cache.NewObjectName("a", name)
		if err := c.sync(ctx, key); err != nil {
			t.Fatalf("sync(%s): %v", key, err)
		}
	}
	status := func(name string) v1alpha1.SubnetStatus {
		got, err := client.NetworkV1alpha1().Subnets("a").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return got.Status
	}
	want := map[string]v1alpha1.SubnetStatus{
		"x":    {Errors: []string{"CIDR overlaps with a/y's (10.0.0.0/25)"}},
		"y":    {Errors: []string{"CIDR overlaps with a/x's (10.0.0.0/24)"}},
		"free": {Validated: true},
	}
	for name, w := range want {
		if diff := cmp.Diff(status(name), w); diff != "" {
			t.Errorf("status of %s (-got +want):\n%s", name, diff)
		}
	}
	if got := len(recorder.Events); got != 3 {
		t.Errorf("recorded %d events, want 3", got)
	}

	// y goes away: the next sync of its key hands x back to the queue.
	if err := client.NetworkV1alpha1().Subnets("a").Delete(ctx, "y", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := indexer.Delete(&v1alpha1.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "y"}}); err != nil {
		t.Fatal(err)
	}
	if err := c.sync(ctx, cache.NewObjectName("a", "y")); err != nil {
		t.Fatalf("sync(a/y): %v", err)
	}
	if got := c.queue.Len(); got != 1 {
		t.Fatalf("queue length after the rival's deletion = %d, want 1", got)
	}
	key, _ := c.queue.Get()
	if key != "a/x" {
		t.Fatalf("queued %q, want a/x", key)
	}
	c.queue.Done(key)
	if err := c.sync(ctx, cache.NewObjectName("a", "x")); err != nil {
		t.Fatalf("sync(a/x): %v", err)
	}
	if diff := cmp.Diff(status("x"), v1alpha1.SubnetStatus{Validated: true}); diff != "" {
		t.Errorf("status of x after its rival left (-got +want):\n%s", diff)
	}
}

func TestConflictsCacheWatch(t *testing.T) {
	cc := newConflictsCache()
	cc.watch("a/x")
	cc.forget("a/y")                // deleted while x was being checked
	cc.staleDependents("b/z", "z2") // replaced while x was being checked
	cc.staleDependents("a/w", "w1") // synced, unchanged
	got := cc.record("a/x", map[string]types.UID{"a/y": "y1", "b/z": "z1", "a/w": "w1"})
	if diff := cmp.Diff(got, []string{"a/y", "b/z"}); diff != "" {
		t.Errorf("rivals gone during the check (-got +want):\n%s", diff)
	}
	// A rival that the check saw already replaced is not gone.
	cc.watch("a/v")
	cc.staleDependents("b/z", "z2")
	if got := cc.record("a/v", map[string]types.UID{"b/z": "z2"}); len(got) != 0 {
		t.Errorf("record after a replacement the check saw = %q, want none", got)
	}
	cc.unwatch("a/v")
	cc.unwatch("a/x")
	// Without a watch, nothing is reported.
	cc.forget("a/y")
	if got := cc.record("a/x", map[string]types.UID{"a/y": "y1"}); len(got) != 0 {
		t.Errorf("record without a watch = %q, want none", got)
	}
	if len(cc.watches) != 0 {
		t.Errorf("watches left after unwatch: %v", cc.watches)
	}
}

// TestSyncRivalDeletedDuringCheck deletes a rival, and syncs its deletion,
// right after the live list of another subnet's check and before that check
// records its conflicts: the check must still end with the subnet
// validated, without waiting for a resync.
func TestSyncRivalDeletedDuringCheck(t *testing.T) {
	ctx := context.Background()
	c, client, _, indexer := newTestController(t,
		subnet("a", "x", "10.0.0.0/24", 1),
		subnet("a", "y", "10.0.0.0/25", 1),
	)
	gvr := v1alpha1.SchemeGroupVersion.WithResource("subnets")
	gvk := v1alpha1.SchemeGroupVersion.WithKind("Subnet")
	injected := false
	client.PrependReactor("list", "subnets", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if injected {
			return false, nil, nil
		}
		injected = true
		// The list sees y; then y goes away, and its deletion is synced,
		// while the check of x has not yet recorded its conflicts. The
		// fake client is locked here: only its tracker may be used.
		list, err := client.Tracker().List(gvr, gvk, "")
		if err != nil {
			return true, nil, err
		}
		if err := client.Tracker().Delete(gvr, "a", "y"); err != nil {
			t.Errorf("deleting y: %v", err)
		}
		if err := indexer.Delete(&v1alpha1.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "y"}}); err != nil {
			t.Errorf("deleting y from the cache: %v", err)
		}
		if err := c.sync(ctx, cache.NewObjectName("a", "y")); err != nil {
			t.Errorf("sync(a/y): %v", err)
		}
		return true, list, nil
	})

	if err := c.sync(ctx, cache.NewObjectName("a", "x")); err != nil {
		t.Fatalf("sync(a/x): %v", err)
	}
	if !injected {
		t.Fatal("the check of x listed no subnets")
	}
	if got := c.queue.Len(); got != 1 {
		t.Fatalf("queue length after the rival left during the check = %d, want 1", got)
	}
	key, _ := c.queue.Get()
	if key != "a/x" {
		t.Fatalf("queued %q, want a/x", key)
	}
	c.queue.Done(key)
	if err := c.sync(ctx, cache.NewObjectName("a", "x")); err != nil {
		t.Fatalf("sync(a/x) again: %v", err)
	}
	got, err := client.NetworkV1alpha1().Subnets("a").Get(ctx, "x", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(got.Status, v1alpha1.SubnetStatus{Validated: true}); diff != "" {
		t.Errorf("status of x after its rival left (-got +want):\n%s", diff)
	}
}
