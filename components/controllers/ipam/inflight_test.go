package ipam

// This file tests the sync of an attachment whose caches trail: a lock it
// holds already, this controller's own writes not yet in its caches, and
// another copy's write that supersedes them.

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
)

// TestSyncAdoptsHeldLock checks that a lock the attachment holds already,
// from a sync whose status write failed, is written instead of taking
// another.
func TestSyncAdoptsHeldLock(t *testing.T) {
	runSync(t, []syncCase{
		{
			name: "cached lock of a failed write is adopted",
			objs: objects(validSubnet(), testAttachment(), l3),
			wantActions: []string{
				"update networkattachments/status a/att rv=10: 10.0.0.3 on VNI 1, lock v1-1-10-0-0-3-uid",
			},
			wantRecord: recWritten(name3, l3.UID),
		},
		{
			name:       "recorded lock the cache lacks is adopted after a live read",
			objs:       objects(validSubnet(), testAttachment()),
			serverOnly: objects(l2),
			record:     rec2(l2.UID, ""),
			wantActions: []string{
				"get iplocks a/v1-1-10-0-0-2",
				"update networkattachments/status a/att rv=10: 10.0.0.2 on VNI 1, lock v1-1-10-0-0-2-uid",
			},
			wantRecord: rec2(l2.UID, "11"),
		},
		{
			name:        "recorded lock released meanwhile: a new one",
			objs:        objects(validSubnet(), testAttachment()),
			record:      rec2("released-uid", ""),
			wantActions: take2("get iplocks a/v1-1-10-0-0-2"),
			wantRecord:  recWritten(name2, created2),
		},
		{
			name:        "live read of the recorded lock fails: retried",
			objs:        objects(validSubnet(), testAttachment()),
			serverOnly:  objects(l2),
			record:      rec2(l2.UID, ""),
			reactors:    []reactor{fail("get", "iplocks", errBroken)},
			wantActions: []string{"get iplocks a/v1-1-10-0-0-2"},
			wantRecord:  rec2(l2.UID, ""),
			wantErr:     true,
		},
	})
}

// TestSyncInflightRecord checks the in-flight record: this controller's
// own writes, not yet in its caches.
func TestSyncInflightRecord(t *testing.T) {
	runSync(t, []syncCase{
		{
			name:       "address written, the cache has not caught up: no request",
			objs:       objects(validSubnet(), testAttachment()),
			serverOnly: objects(l2),
			record:     rec2(l2.UID, "11"),
			wantRecord: rec2(l2.UID, "11"),
		},
		{
			name:       "written address in the cache, its lock not yet: the record vouches, no live read",
			objs:       objects(validSubnet(), withRV(addressed(l2), "11")),
			serverOnly: objects(l2),
			record:     rec2(l2.UID, "11"),
			wantRecord: rec2(l2.UID, "11"),
		},
		{
			name:   "lock reaches the cache: the record is forgotten",
			objs:   objects(validSubnet(), l2, withRV(addressed(l2), "11")),
			record: rec2(l2.UID, "11"),
		},
		{
			name:        "record of an earlier attachment of the same name is void",
			objs:        objects(validSubnet(), testAttachment()),
			record:      &inflight{attUID: "earlier-uid", subnetUID: subnetUID, lockName: name3, lockUID: l3.UID, seenRV: attRV, writtenRV: "11"},
			wantActions: take2(),
			wantRecord:  recWritten(name2, created2),
		},
		{
			name:   "record of an earlier attachment of the same name is forgotten",
			objs:   objects(validSubnet(), l2, addressed(l2)),
			record: &inflight{attUID: "earlier-uid", subnetUID: subnetUID, lockName: name3, lockUID: l3.UID, seenRV: attRV, writtenRV: "11"},
		},
		{
			name:        "record of an earlier subnet of the same name is void",
			objs:        objects(validSubnet(), testAttachment()),
			record:      &inflight{attUID: attUID, subnetUID: "earlier-s-uid", lockName: name3, lockUID: l3.UID, seenRV: attRV, writtenRV: "11"},
			wantActions: take2(),
			wantRecord:  recWritten(name2, created2),
		},
	})
}

// TestSyncSuperseded checks that when another copy of the controller
// wrote a different address meanwhile, the lock this one took goes.
func TestSyncSuperseded(t *testing.T) {
	runSync(t, []syncCase{
		{
			name:        "recorded lock superseded by another's write: it is released",
			objs:        objects(validSubnet(), l3, withRV(addressed(l3), "12")),
			record:      rec2(created2, ""),
			wantActions: []string{"delete iplocks a/v1-1-10-0-0-2 (uid created-v1-1-10-0-0-2)"},
		},
		{
			name:        "release of a superseded lock fails: retried, the cache finds it later",
			objs:        objects(validSubnet(), l3, withRV(addressed(l3), "12")),
			record:      rec2(created2, ""),
			reactors:    []reactor{fail("delete", "iplocks", errBroken)},
			wantActions: []string{"delete iplocks a/v1-1-10-0-0-2 (uid created-v1-1-10-0-0-2)"},
			wantErr:     true,
		},
	})
}

// TestSyncRetryAdoptsItsLock follows one attachment through a status write
// that conflicts, the retry (which must write the lock already taken, not
// take a second), and the caches catching up with both writes.
func TestSyncRetryAdoptsItsLock(t *testing.T) {
	ctx := context.Background()
	ref := cache.NewObjectName(testNS, attName)
	failWrites := true
	c, client, _ := newTestController(t,
		objects(validSubnet(), testAttachment()),
		objects(validSubnet(), testAttachment()),
		reactor{"update", "networkattachments", func(k8stesting.Action) (bool, runtime.Object, error) {
			if failWrites {
				return true, nil, apierrors.NewConflict(attachmentsGR, attName, fmt.Errorf("the object has been modified"))
			}
			return false, nil, nil
		}},
	)
	name2 := lockName(1, "10.0.0.2")
	steps := []struct {
		name        string
		before      func(t *testing.T)
		wantActions []string
		wantErr     bool
	}{
		{
			name: "the write conflicts",
			wantActions: []string{
				"create iplocks a/v1-1-10-0-0-2 (owner att-uid, subnet s)",
				"update networkattachments/status a/att rv=10: 10.0.0.2 on VNI 1, lock created-v1-1-10-0-0-2",
			},
			wantErr: true,
		},
		{
			name:   "the retry writes the same lock",
			before: func(*testing.T) { failWrites = false },
			wantActions: []string{
				"get iplocks a/v1-1-10-0-0-2",
				"update networkattachments/status a/att rv=10: 10.0.0.2 on VNI 1, lock created-v1-1-10-0-0-2",
			},
		},
		{
			name: "a sync before the caches caught up does nothing",
		},
		{
			name: "the caches catch up",
			before: func(t *testing.T) {
				for _, step := range []struct {
					indexer cache.Indexer
					gvr     schema.GroupVersionResource
					name    string
				}{
					{c.attachmentIndex, v1alpha1.SchemeGroupVersion.WithResource("networkattachments"), attName},
					{c.lockIndex, v1alpha1.SchemeGroupVersion.WithResource("iplocks"), name2},
				} {
					obj, err := client.Tracker().Get(step.gvr, testNS, step.name)
					if err != nil {
						t.Fatal(err)
					}
					if err := step.indexer.Update(obj); err != nil {
						t.Fatal(err)
					}
				}
			},
		},
	}
	for _, step := range steps {
		if step.before != nil {
			step.before(t)
		}
		client.ClearActions()
		err := c.sync(ctx, ref)
		if gotErr := err != nil; gotErr != step.wantErr {
			t.Errorf("%s: sync returned %v; want an error (a retry): %t", step.name, err, step.wantErr)
		}
		if diff := cmp.Diff(describeActions(client.Actions()), step.wantActions); diff != "" {
			t.Errorf("%s: requests (-got +want):\n%s", step.name, diff)
		}
	}
	if rec := c.inflight.get(ref.String()); rec != nil {
		t.Errorf("in-flight record once the caches caught up = %+v, want none", rec)
	}
	locks, err := client.NetworkV1alpha1().IPLocks(testNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range locks.Items {
		names = append(names, l.Name)
	}
	if diff := cmp.Diff(names, []string{name2}); diff != "" {
		t.Errorf("locks on the server (-got +want):\n%s", diff)
	}
}
