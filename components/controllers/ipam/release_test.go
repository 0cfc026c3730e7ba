package ipam

// This file tests how sync takes addresses away: the locks of deleted
// attachments, addresses kept or cleared when their subnet is not usable,
// and the waiters a released lock wakes.

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
)

// TestSyncReleasesOrphans checks that the locks of a deleted attachment,
// or of an earlier one of the same name, go once a live read confirms
// the owner gone.
func TestSyncReleasesOrphans(t *testing.T) {
	runSync(t, []syncCase{
		{
			name: "deleted attachment: its lock is released",
			objs: objects(validSubnet(), l2),
			wantActions: []string{
				"get networkattachments a/att",
				"delete iplocks a/v1-1-10-0-0-2 (uid v1-1-10-0-0-2-uid)",
			},
		},
		{
			name:   "deleted attachment: its in-flight record is forgotten",
			objs:   objects(validSubnet()),
			record: rec2(created2, ""),
		},
		{
			name:        "attachment the cache has not seen yet keeps its lock",
			objs:        objects(validSubnet(), l2),
			serverOnly:  objects(addressed(l2)),
			wantActions: []string{"get networkattachments a/att"},
		},
		{
			name:        "live read of the owner fails: nothing released, retried",
			objs:        objects(validSubnet(), l2),
			reactors:    []reactor{fail("get", "networkattachments", errBroken)},
			wantActions: []string{"get networkattachments a/att"},
			wantErr:     true,
		},
		{
			name: "orphan lock already gone: not retried",
			objs: objects(validSubnet()), cacheOnly: objects(l2),
			wantActions: []string{
				"get networkattachments a/att",
				"delete iplocks a/v1-1-10-0-0-2 (uid v1-1-10-0-0-2-uid)",
			},
		},
		{
			name:     "orphan lock replaced by another's: not retried",
			objs:     objects(validSubnet(), l2),
			reactors: []reactor{fail("delete", "iplocks", apierrors.NewConflict(locksGR, name2, fmt.Errorf("precondition failed: UID")))},
			wantActions: []string{
				"get networkattachments a/att",
				"delete iplocks a/v1-1-10-0-0-2 (uid v1-1-10-0-0-2-uid)",
			},
		},
		{
			name:     "orphan release fails: retried",
			objs:     objects(validSubnet(), l2),
			reactors: []reactor{fail("delete", "iplocks", errBroken)},
			wantActions: []string{
				"get networkattachments a/att",
				"delete iplocks a/v1-1-10-0-0-2 (uid v1-1-10-0-0-2-uid)",
			},
			wantErr: true,
		},
		{
			name: "earlier attachment of the same name: its lock goes, the current one's stays",
			objs: objects(validSubnet(), testLock("10.0.0.2", "earlier-uid"), l3, addressed(l3)),
			wantActions: []string{
				"get networkattachments a/att",
				"delete iplocks a/v1-1-10-0-0-2 (uid v1-1-10-0-0-2-uid)",
			},
		},
	})
}

// TestSyncKeepsAddresses checks that an attachment keeps its address,
// and that it goes when the subnet is not usable.
func TestSyncKeepsAddresses(t *testing.T) {
	runSync(t, []syncCase{
		{
			name: "valid address: no request",
			objs: objects(validSubnet(), l2, addressed(l2)),
		},
		{
			name:        "valid address: a surplus lock is released",
			objs:        objects(validSubnet(), l2, l3, addressed(l2)),
			wantActions: []string{"delete iplocks a/v1-1-10-0-0-3 (uid v1-1-10-0-0-3-uid)"},
		},
		{
			name:        "lock the cache lacks is read live",
			objs:        objects(validSubnet(), addressed(l2)),
			serverOnly:  objects(l2),
			wantActions: []string{"get iplocks a/v1-1-10-0-0-2"},
		},
		{
			name:        "live read of the lock fails: retried",
			objs:        objects(validSubnet(), addressed(l2)),
			serverOnly:  objects(l2),
			reactors:    []reactor{fail("get", "iplocks", errBroken)},
			wantActions: []string{"get iplocks a/v1-1-10-0-0-2"},
			wantErr:     true,
		},
		{
			name: "lock named by the status is gone: the same address is locked again",
			objs: objects(validSubnet(), addressed(l3)),
			wantActions: []string{
				"get iplocks a/v1-1-10-0-0-3",
				"create iplocks a/v1-1-10-0-0-3 (owner att-uid, subnet s)",
				"update networkattachments/status a/att rv=10: 10.0.0.3 on VNI 1, lock created-v1-1-10-0-0-3",
			},
			wantRecord: recWritten(name3, createdUID(name3)),
		},
		{
			name: "lock named by the status went to another: the address is cleared before another is written",
			objs: objects(validSubnet(), otherAttachment(), addressed(l3)), serverOnly: objects(otherLock("10.0.0.3")),
			wantActions: []string{
				"get iplocks a/v1-1-10-0-0-3",
				"create iplocks a/v1-1-10-0-0-3 (owner att-uid, subnet s)",
				"get iplocks a/v1-1-10-0-0-3",
				"get networkattachments a/other",
				`update networkattachments/status a/att rv=10: no address, ""`,
				"create iplocks a/v1-1-10-0-0-2 (owner att-uid, subnet s)",
				"update networkattachments/status a/att rv=11: 10.0.0.2 on VNI 1, lock created-v1-1-10-0-0-2",
			},
			wantRecord: &inflight{attUID: attUID, subnetUID: subnetUID, lockName: name2, lockUID: created2, seenRV: "11", writtenRV: "12"},
		},
		{
			name: "address of another VNI (the subnet was made again): kept with its lock, the status says why",
			objs: objects(validSubnet(), testLockVNI(2, "10.0.0.5", attUID), addressed(testLockVNI(2, "10.0.0.5", attUID))),
			wantActions: []string{
				`update networkattachments/status a/att rv=10: 10.0.0.5 on VNI 2, lock v1-2-10-0-0-5-uid, problems ["Address 10.0.0.5 on VNI 2 is not one of subnet s (10.0.0.0/24 on VNI 1)"]`,
			},
			wantEvents: []string{"Warning AddressKept Kept address 10.0.0.5 on VNI 2 until the attachment is deleted: Address 10.0.0.5 on VNI 2 is not one of subnet s (10.0.0.0/24 on VNI 1)"},
		},
		{
			name: "address outside the block (the subnet was made again): kept, a surplus lock goes",
			objs: objects(testSubnet("10.0.1.0/24", true), testLock("10.0.0.5", attUID), testLock("10.0.1.9", attUID), addressed(testLock("10.0.0.5", attUID))),
			wantActions: []string{
				`update networkattachments/status a/att rv=10: 10.0.0.5 on VNI 1, lock v1-1-10-0-0-5-uid, problems ["Address 10.0.0.5 on VNI 1 is not one of subnet s (10.0.1.0/24 on VNI 1)"]`,
				"delete iplocks a/v1-1-10-0-1-9 (uid v1-1-10-0-1-9-uid)",
			},
			wantEvents: []string{"Warning AddressKept Kept address 10.0.0.5 on VNI 1 until the attachment is deleted: Address 10.0.0.5 on VNI 1 is not one of subnet s (10.0.1.0/24 on VNI 1)"},
		},
		{
			name: "subnet made again with the same block and VNI: the address stays",
			objs: objects(func() *v1alpha1.Subnet {
				s := validSubnet()
				s.CreationTimestamp = metav1.NewTime(subnetCreated.Add(time.Hour))
				return s
			}(), l3, addressed(l3)),
			wantActions: []string{
				"update networkattachments/status a/att rv=10: 10.0.0.3 on VNI 1, lock v1-1-10-0-0-3-uid, subnet created 2026-01-02T04:04:05Z",
			},
			wantRecord: recWritten(name3, l3.UID),
		},
		{
			name: "subnet missing: the address and its lock stay, the status says why",
			objs: objects(l2, addressed(l2)),
			wantActions: []string{
				`update networkattachments/status a/att rv=10: 10.0.0.2 on VNI 1, lock v1-1-10-0-0-2-uid, problems ["Referenced subnet does not exist"]`,
			},
			wantEvents: []string{"Warning AddressKept Kept address 10.0.0.2 on VNI 1 until the attachment is deleted: Referenced subnet does not exist"},
		},
		{
			name: "subnet missing, the kept address's status says so already: no request",
			objs: objects(l2, func() *v1alpha1.NetworkAttachment {
				a := addressed(l2)
				a.Status.Errors.IPAM = []string{ErrSubnetMissing}
				return a
			}()),
		},
		{
			name: "subnet missing: a surplus lock goes, the address's stays",
			objs: objects(l2, l3, addressed(l2)),
			wantActions: []string{
				`update networkattachments/status a/att rv=10: 10.0.0.2 on VNI 1, lock v1-1-10-0-0-2-uid, problems ["Referenced subnet does not exist"]`,
				"delete iplocks a/v1-1-10-0-0-3 (uid v1-1-10-0-0-3-uid)",
			},
			wantEvents: []string{"Warning AddressKept Kept address 10.0.0.2 on VNI 1 until the attachment is deleted: Referenced subnet does not exist"},
		},
		{
			name: "subnet missing, no address yet: the status says so, the lock goes",
			objs: objects(l2, testAttachment()),
			wantActions: []string{
				`update networkattachments/status a/att rv=10: no address, "Referenced subnet does not exist"`,
				"delete iplocks a/v1-1-10-0-0-2 (uid v1-1-10-0-0-2-uid)",
			},
			wantEvents: []string{"Warning NoAddress Referenced subnet does not exist"},
		},
		{
			name: "subnet not validated (made again): the address stays",
			objs: objects(testSubnet("10.0.0.0/24", false), l2, addressed(l2)),
			wantActions: []string{
				`update networkattachments/status a/att rv=10: 10.0.0.2 on VNI 1, lock v1-1-10-0-0-2-uid, problems ["Referenced subnet is not validated"]`,
			},
			wantEvents: []string{"Warning AddressKept Kept address 10.0.0.2 on VNI 1 until the attachment is deleted: Referenced subnet is not validated"},
		},
		{
			name:     "subnet missing, status write fails: retried",
			objs:     objects(l2, addressed(l2)),
			reactors: []reactor{fail("update", "networkattachments", conflict)},
			wantActions: []string{
				`update networkattachments/status a/att rv=10: 10.0.0.2 on VNI 1, lock v1-1-10-0-0-2-uid, problems ["Referenced subnet does not exist"]`,
			},
			wantErr: true,
		},
		{
			name: "subnet missing, the status says so already: no request",
			objs: objects(noAddress(ErrSubnetMissing)),
		},
		{
			name:   "subnet missing: the in-flight record is forgotten",
			objs:   objects(noAddress(ErrSubnetMissing)),
			record: rec2(created2, ""),
		},
	})
}

// TestLockDeletedWakesWaiters checks how an attachment that waits for a
// taken address gets it once the holder is gone: the deletion of a lock
// queues its owner and the attachments of its VNI without an address, among
// them those that asked for it.
func TestLockDeletedWakesWaiters(t *testing.T) {
	waiting := asking(noAddress("Requested address 10.0.0.7 is taken by NetworkAttachment a/other"), "10.0.0.7")
	addressedOne := addressed(testLock("10.0.0.3", "addressed-uid"))
	addressedOne.Name, addressedOne.UID = "addressed", "addressed-uid"
	c, _, _ := newTestController(t, objects(validSubnet(), waiting, addressedOne, otherAttachment()), nil)
	c.lockDeleted(cache.DeletedFinalStateUnknown{Key: testNS + "/" + lockName(1, "10.0.0.7"), Obj: otherLock("10.0.0.7")})
	var got []string
	for c.queue.Len() > 0 {
		key, _ := c.queue.Get()
		got = append(got, key)
		c.queue.Done(key)
	}
	slices.Sort(got)
	// a/other is queued as the lock's owner, a/att as a waiter.
	if diff := cmp.Diff(got, []string{"a/att", "a/other"}); diff != "" {
		t.Errorf("queued keys (-got +want):\n%s", diff)
	}
}
