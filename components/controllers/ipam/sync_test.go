package ipam

// This file tests how sync gives an attachment an address: a free one,
// the one it asks for, and the status it writes.

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
)

// TestSyncNewAddress checks how an attachment without an address gets the
// first free one of its subnet, and what it is told when there is none.
func TestSyncNewAddress(t *testing.T) {
	runSync(t, []syncCase{
		{
			name: "new attachment: locks the first free address and writes it",
			objs: objects(validSubnet(), testAttachment(), otherLock("10.0.0.2")),
			wantActions: []string{
				"create iplocks a/v1-1-10-0-0-3 (owner att-uid, subnet s)",
				"update networkattachments/status a/att rv=10: 10.0.0.3 on VNI 1, lock created-v1-1-10-0-0-3",
			},
			wantRecord: recWritten(name3, createdUID(name3)),
		},
		{
			name:       "address taken on the server though the cache thinks it free: the next one",
			objs:       objects(validSubnet(), testAttachment()),
			serverOnly: objects(otherLock("10.0.0.2")),
			wantActions: []string{
				"create iplocks a/v1-1-10-0-0-2 (owner att-uid, subnet s)",
				"create iplocks a/v1-1-10-0-0-3 (owner att-uid, subnet s)",
				"update networkattachments/status a/att rv=10: 10.0.0.3 on VNI 1, lock created-v1-1-10-0-0-3",
			},
			wantRecord: recWritten(name3, createdUID(name3)),
		},
		{
			name:     "every address tried is taken on the server: retried",
			objs:     objects(validSubnet(), testAttachment()),
			reactors: []reactor{fail("create", "iplocks", apierrors.NewAlreadyExists(locksGR, "taken"))},
			wantActions: func() []string {
				var want []string
				for i := 2; i < 2+createAttempts; i++ {
					want = append(want, fmt.Sprintf("create iplocks a/v1-1-10-0-0-%d (owner att-uid, subnet s)", i))
				}
				return want
			}(),
			wantErr: true,
		},
		{
			name:        "lock create fails: retried",
			objs:        objects(validSubnet(), testAttachment()),
			reactors:    []reactor{fail("create", "iplocks", errBroken)},
			wantActions: []string{"create iplocks a/v1-1-10-0-0-2 (owner att-uid, subnet s)"},
			wantErr:     true,
		},
		{
			name: "subnet full: the status reports contention",
			objs: objects(testSubnet("10.0.0.0/30", true), testAttachment(),
				otherLock("10.0.0.0"), otherLock("10.0.0.1"), otherLock("10.0.0.2"), otherLock("10.0.0.3")),
			wantActions: []string{
				`update networkattachments/status a/att rv=10: no address, "Referenced subnet has run out of IPs", contention`,
			},
			wantEvents: []string{"Warning NoAddress Referenced subnet has run out of IPs"},
		},
		{
			name:        "status write conflicts: the record keeps the lock, retried",
			objs:        objects(validSubnet(), testAttachment()),
			reactors:    []reactor{fail("update", "networkattachments", conflict)},
			wantActions: take2(),
			wantRecord:  rec2(created2, ""),
			wantErr:     true,
		},
		{
			name:        "a lock that fits no longer is released before a new one is taken",
			objs:        objects(validSubnet(), testAttachment(), testLockVNI(2, "10.0.0.5", attUID)),
			wantActions: take2("delete iplocks a/v1-2-10-0-0-5 (uid v1-2-10-0-0-5-uid)"),
			wantRecord:  recWritten(name2, created2),
		},
	})
}

// TestSyncRequestedAddress checks requested addresses (spec.ipv4): an
// attachment gets exactly that one, or a status that says why not.
func TestSyncRequestedAddress(t *testing.T) {
	runSync(t, []syncCase{
		{
			name: "asks for a free address: gets exactly that one",
			objs: objects(validSubnet(), asking(testAttachment(), "10.0.0.7")),
			wantActions: []string{
				"create iplocks a/v1-1-10-0-0-7 (owner att-uid, subnet s)",
				assigned7,
			},
			wantRecord: recWritten(name7, createdUID(name7)),
		},
		{
			name: "asks for an address it holds: no request",
			objs: objects(validSubnet(), l7, asking(addressed(l7), "10.0.0.7")),
		},
		{
			name: "asks for an address outside the subnet: the status says so",
			objs: objects(validSubnet(), asking(testAttachment(), "10.0.1.7")),
			wantActions: []string{
				`update networkattachments/status a/att rv=10: no address, "` + outside("10.0.1.7") + `"`,
			},
			wantEvents: []string{"Warning NoAddress " + outside("10.0.1.7")},
		},
		{
			name: "asks for the subnet's broadcast address: the status says it is outside",
			objs: objects(validSubnet(), asking(testAttachment(), "10.0.0.255")),
			wantActions: []string{
				`update networkattachments/status a/att rv=10: no address, "` + outside("10.0.0.255") + `"`,
			},
			wantEvents: []string{"Warning NoAddress " + outside("10.0.0.255")},
		},
		{
			name: "asks for an address outside the subnet, the status says so already: no request",
			objs: objects(validSubnet(), asking(noAddress(outside("10.0.1.7")), "10.0.1.7")),
		},
		{
			name:        "asks for an address another attachment holds: the status names the holder, no retry",
			objs:        objects(validSubnet(), otherAttachment(), otherLock("10.0.0.7"), asking(testAttachment(), "10.0.0.7")),
			wantActions: held7(`update networkattachments/status a/att rv=10: no address, "` + taken7 + `"`),
			wantEvents:  []string{"Warning NoAddress " + taken7},
		},
		{
			name:        "asks for a taken address, the status says so already: no write, no event",
			objs:        objects(validSubnet(), otherAttachment(), otherLock("10.0.0.7"), asking(noAddress(taken7), "10.0.0.7")),
			wantActions: held7(),
		},
		{
			name:        "asks for an address held by a lock the cache lacks: retried, since no deletion of it may be heard",
			objs:        objects(validSubnet(), otherAttachment(), asking(noAddress(taken7), "10.0.0.7")),
			serverOnly:  objects(otherLock("10.0.0.7")),
			wantActions: held7(),
			wantErr:     true,
		},
		{
			name:        "asks for an address held by a deleted attachment's lock: released and taken",
			objs:        objects(validSubnet(), otherLock("10.0.0.7"), asking(testAttachment(), "10.0.0.7")),
			wantActions: retake7(held7()...),
			wantRecord:  recWritten(name7, createdUID(name7)),
		},
		{
			name:        "asks for the address of an earlier attachment of the same name: its lock goes first",
			objs:        objects(validSubnet(), testLock("10.0.0.7", "earlier-uid"), asking(testAttachment(), "10.0.0.7")),
			wantActions: retake7("get networkattachments a/att"),
			wantRecord:  recWritten(name7, createdUID(name7)),
		},
		{
			name:       "asks for the address of an earlier attachment of the same name, whose lock the cache lacks: released and taken",
			objs:       objects(validSubnet(), asking(testAttachment(), "10.0.0.7")),
			serverOnly: objects(testLock("10.0.0.7", "earlier-uid")),
			wantActions: retake7(
				"create iplocks a/v1-1-10-0-0-7 (owner att-uid, subnet s)",
				"get iplocks a/v1-1-10-0-0-7",
				"get networkattachments a/att",
			),
			wantRecord: recWritten(name7, createdUID(name7)),
		},
		{
			name:       "asks for an address it locked already, the cache lags: the lock is written",
			objs:       objects(validSubnet(), asking(testAttachment(), "10.0.0.7")),
			serverOnly: objects(l7),
			wantActions: []string{
				"create iplocks a/v1-1-10-0-0-7 (owner att-uid, subnet s)",
				"get iplocks a/v1-1-10-0-0-7",
				"update networkattachments/status a/att rv=10: 10.0.0.7 on VNI 1, lock v1-1-10-0-0-7-uid",
			},
			wantRecord: recWritten(name7, l7.UID),
		},
		{
			name: "asks for an address: a lock it holds on another goes",
			objs: objects(validSubnet(), l2, asking(testAttachment(), "10.0.0.7")),
			wantActions: []string{
				"delete iplocks a/v1-1-10-0-0-2 (uid v1-1-10-0-0-2-uid)",
				"create iplocks a/v1-1-10-0-0-7 (owner att-uid, subnet s)",
				assigned7,
			},
			wantRecord: recWritten(name7, createdUID(name7)),
		},
		{
			name:        "asked for and held, its lock went to another: the address is cleared and the holder named",
			objs:        objects(validSubnet(), otherAttachment(), otherLock("10.0.0.7"), asking(addressed(l7), "10.0.0.7")),
			wantActions: held7(`update networkattachments/status a/att rv=10: no address, "` + taken7 + `"`),
			wantEvents:  []string{"Warning NoAddress " + taken7},
		},
		{
			name:        "asks for an address, the holder's read fails: retried",
			objs:        objects(validSubnet(), otherAttachment(), otherLock("10.0.0.7"), asking(testAttachment(), "10.0.0.7")),
			reactors:    []reactor{fail("get", "networkattachments", errBroken)},
			wantActions: held7(),
			wantErr:     true,
		},
	})
}

// TestStatusWriteLeavesManagedFieldsOut checks that the controller's status
// writes carry no managed fields, which the server ignores on a write of
// /status, and that leaving them out does not touch the cached attachment.
func TestStatusWriteLeavesManagedFieldsOut(t *testing.T) {
	att := testAttachment()
	att.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "creator", Operation: metav1.ManagedFieldsOperationUpdate}}
	c, client, _ := newTestController(t, objects(validSubnet(), att), objects(validSubnet(), att))
	if err := c.sync(context.Background(), cache.NewObjectName(testNS, attName)); err != nil {
		t.Fatalf("sync: %v", err)
	}
	var writes int
	for _, a := range client.Actions() {
		u, ok := a.(k8stesting.UpdateAction)
		if !ok || a.GetSubresource() != "status" {
			continue
		}
		writes++
		if mf := u.GetObject().(*v1alpha1.NetworkAttachment).ManagedFields; mf != nil {
			t.Errorf("managed fields of the status write = %v, want none", mf)
		}
	}
	if writes != 1 {
		t.Errorf("status writes = %d, want 1 (the address)", writes)
	}
	cached, err := c.attachments.NetworkAttachments(testNS).Get(attName)
	if err != nil {
		t.Fatalf("getting the cached attachment: %v", err)
	}
	if diff := cmp.Diff(cached.ManagedFields, att.ManagedFields); diff != "" {
		t.Errorf("managed fields of the cached attachment (-got +want):\n%s", diff)
	}
}
