package ipam

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/generated/clientset/versioned/fake"
	"github.com/kos-sdn/kos/components/generated/informers/externalversions"
)

// The objects of the sync tests live in namespace a. The attachment synced
// is a/att, on subnet a/s (10.0.0.0/24, VNI 1, assignable 10.0.0.2-254).
// intN always answers 0, so the first free address is the one picked.
const (
	testNS     = "a"
	attName    = "att"
	attUID     = types.UID("att-uid")
	subnetName = "s"
	subnetUID  = types.UID("s-uid")
	// attRV is the resourceVersion of the attachment the caches hold.
	attRV = "10"
)

var subnetCreated = metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))

func testSubnet(cidr string, validated bool) *v1alpha1.Subnet {
	return &v1alpha1.Subnet{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: subnetName, UID: subnetUID, CreationTimestamp: subnetCreated},
		Spec:       v1alpha1.SubnetSpec{IPv4: cidr, VNI: 1},
		Status:     v1alpha1.SubnetStatus{Validated: validated},
	}
}

func objects(objs ...runtime.Object) []runtime.Object { return objs }

// validSubnet is a/s, validated.
func validSubnet() *v1alpha1.Subnet { return testSubnet("10.0.0.0/24", true) }

// testAttachment returns a/att without status.
func testAttachment() *v1alpha1.NetworkAttachment {
	return &v1alpha1.NetworkAttachment{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: attName, UID: attUID, ResourceVersion: attRV},
		Spec:       v1alpha1.NetworkAttachmentSpec{Node: "n1", Subnet: subnetName},
	}
}

// addressed returns a/att (UID attUID) whose status names the address of
// lock l, as a write of this controller leaves it.
func addressed(l *v1alpha1.IPLock) *v1alpha1.NetworkAttachment {
	att := testAttachment()
	vni, addr, err := ParseLockName(l.Name)
	if err != nil {
		panic(err)
	}
	created := subnetCreated
	att.Status = v1alpha1.NetworkAttachmentStatus{IPv4: addr.String(), AddressVNI: vni, LockUID: string(l.UID), SubnetCreationTime: &created}
	return att
}

// withRV returns att with resourceVersion rv.
func withRV(att *v1alpha1.NetworkAttachment, rv string) *v1alpha1.NetworkAttachment {
	att.ResourceVersion = rv
	return att
}

// noAddress returns a/att whose status says problem.
func noAddress(problem string) *v1alpha1.NetworkAttachment {
	att := testAttachment()
	att.Status.Errors.IPAM = []string{problem}
	return att
}

// testLock returns the lock of addr on VNI 1 taken from subnet a/s by the
// attachment a/att with UID owner; its UID is its name with "-uid".
func testLock(addr string, owner types.UID) *v1alpha1.IPLock {
	return testLockVNI(1, addr, owner)
}

func testLockVNI(vni uint32, addr string, owner types.UID) *v1alpha1.IPLock {
	name := lockName(vni, addr)
	return &v1alpha1.IPLock{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: testNS,
			Name:      name,
			UID:       types.UID(name + "-uid"),
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: v1alpha1.SchemeGroupVersion.String(),
				Kind:       "NetworkAttachment",
				Name:       attName,
				UID:        owner,
				Controller: ptrTo(true),
			}},
		},
		Spec: v1alpha1.IPLockSpec{SubnetName: subnetName},
	}
}

// asking returns att with spec.ipv4 addr: it asks for that address.
func asking(att *v1alpha1.NetworkAttachment, addr string) *v1alpha1.NetworkAttachment {
	att.Spec.IPv4 = addr
	return att
}

// otherAttachment returns a/other, the attachment that holds otherLock's
// addresses.
func otherAttachment() *v1alpha1.NetworkAttachment {
	return &v1alpha1.NetworkAttachment{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "other", UID: "other-uid", ResourceVersion: "5"},
		Spec:       v1alpha1.NetworkAttachmentSpec{Node: "n2", Subnet: subnetName},
	}
}

// otherLock returns the lock of addr held by another attachment, a/other.
func otherLock(addr string) *v1alpha1.IPLock {
	l := testLock(addr, "other-uid")
	l.OwnerReferences[0].Name = "other"
	return l
}

func lockName(vni uint32, addr string) string {
	return LockName(vni, netip.MustParseAddr(addr))
}

// createdUID is the UID the fake server gives the lock it creates.
func createdUID(name string) types.UID { return types.UID("created-" + name) }

// reactor injects a server's answer to one kind of request.
type reactor struct {
	verb, resource string
	react          k8stesting.ReactionFunc
}

// fail answers every matching request with err.
func fail(verb, resource string, err error) reactor {
	return reactor{verb, resource, func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, err }}
}

var (
	locksGR       = v1alpha1.Resource("iplocks")
	attachmentsGR = v1alpha1.Resource("networkattachments")
	errBroken     = apierrors.NewInternalError(fmt.Errorf("etcd is unhappy"))
)

// newTestController returns a controller on a fake clientset that holds
// server, with informer caches (never started) that hold cached. Locks the
// fake server creates get the UID createdUID(name), and every write of an
// attachment's status increments its resourceVersion; reactors come before
// these.
func newTestController(t *testing.T, cached, server []runtime.Object, reactors ...reactor) (*Controller, *fake.Clientset, *record.FakeRecorder) {
	t.Helper()
	client := fake.NewSimpleClientset(server...)
	// The server's answers are copies: the objects the actions hold stay as
	// the controller sent them.
	client.PrependReactor("create", "iplocks", func(action k8stesting.Action) (bool, runtime.Object, error) {
		a := action.(k8stesting.CreateAction)
		l := a.GetObject().(*v1alpha1.IPLock).DeepCopy()
		l.UID = createdUID(l.Name)
		if err := client.Tracker().Create(a.GetResource(), l, a.GetNamespace()); err != nil {
			return true, nil, err
		}
		return true, l, nil
	})
	client.PrependReactor("update", "networkattachments", func(action k8stesting.Action) (bool, runtime.Object, error) {
		a := action.(k8stesting.UpdateAction)
		att := a.GetObject().(*v1alpha1.NetworkAttachment).DeepCopy()
		rv, err := strconv.Atoi(att.ResourceVersion)
		if err != nil {
			return true, nil, fmt.Errorf("resourceVersion %q: %w", att.ResourceVersion, err)
		}
		att.ResourceVersion = strconv.Itoa(rv + 1)
		if err := client.Tracker().Update(a.GetResource(), att, a.GetNamespace()); err != nil {
			return true, nil, err
		}
		return true, att, nil
	})
	for i := len(reactors) - 1; i >= 0; i-- {
		client.PrependReactor(reactors[i].verb, reactors[i].resource, reactors[i].react)
	}

	factory := externalversions.NewSharedInformerFactory(client, 0)
	informers := factory.Network().V1alpha1()
	recorder := record.NewFakeRecorder(100)
	c, err := NewController(client, informers.Subnets(), informers.NetworkAttachments(), informers.IPLocks(), recorder, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.queue.ShutDown)
	c.intN = func(uint64) uint64 { return 0 }
	for _, obj := range cached {
		var indexer cache.Indexer
		switch obj.(type) {
		case *v1alpha1.Subnet:
			indexer = c.subnetIndex
		case *v1alpha1.NetworkAttachment:
			indexer = c.attachmentIndex
		case *v1alpha1.IPLock:
			indexer = c.lockIndex
		default:
			t.Fatalf("no cache for %T", obj)
		}
		if err := indexer.Add(obj.DeepCopyObject()); err != nil {
			t.Fatal(err)
		}
	}
	return c, client, recorder
}

// describeActions returns one line per request the controller made, other
// than lists and watches (the informers never started, so there are none).
func describeActions(actions []k8stesting.Action) []string {
	var out []string
	for _, a := range actions {
		what := a.GetResource().Resource
		if sub := a.GetSubresource(); sub != "" {
			what += "/" + sub
		}
		// The cases are the implementations: the interfaces overlap (every
		// delete is a GetAction).
		switch a := a.(type) {
		case k8stesting.GetActionImpl:
			out = append(out, fmt.Sprintf("get %s %s/%s", what, a.GetNamespace(), a.GetName()))
		case k8stesting.CreateActionImpl:
			l, ok := a.GetObject().(*v1alpha1.IPLock)
			if !ok {
				out = append(out, fmt.Sprintf("create %s %T", what, a.GetObject()))
				continue
			}
			owner := "none"
			if ref := ownerRef(l); ref != nil {
				owner = string(ref.UID)
			}
			out = append(out, fmt.Sprintf("create %s %s/%s (owner %s, subnet %s)", what, a.GetNamespace(), l.Name, owner, l.Spec.SubnetName))
		case k8stesting.UpdateActionImpl:
			att, ok := a.GetObject().(*v1alpha1.NetworkAttachment)
			if !ok {
				out = append(out, fmt.Sprintf("update %s %T", what, a.GetObject()))
				continue
			}
			// rv is the resourceVersion the write was based on.
			out = append(out, fmt.Sprintf("update %s %s/%s rv=%s: %s", what, a.GetNamespace(), att.Name, att.ResourceVersion, describeStatus(&att.Status)))
		case k8stesting.DeleteActionImpl:
			uid := "none"
			if p := a.GetDeleteOptions().Preconditions; p != nil && p.UID != nil {
				uid = string(*p.UID)
			}
			out = append(out, fmt.Sprintf("delete %s %s/%s (uid %s)", what, a.GetNamespace(), a.GetName(), uid))
		case k8stesting.ListActionImpl, k8stesting.WatchActionImpl:
		default:
			out = append(out, fmt.Sprintf("%s %s", a.GetVerb(), what))
		}
	}
	return out
}

func describeStatus(st *v1alpha1.NetworkAttachmentStatus) string {
	if st.IPv4 == "" {
		s := fmt.Sprintf("no address, %q", strings.Join(st.Errors.IPAM, "; "))
		if st.AddressContention {
			s += ", contention"
		}
		return s
	}
	s := fmt.Sprintf("%s on VNI %d, lock %s", st.IPv4, st.AddressVNI, st.LockUID)
	switch {
	case st.SubnetCreationTime == nil:
		s += ", no subnet creation time"
	case !st.SubnetCreationTime.Equal(&subnetCreated):
		s += ", subnet created " + st.SubnetCreationTime.UTC().Format(time.RFC3339)
	}
	if len(st.Errors.IPAM) > 0 || st.AddressContention {
		s += fmt.Sprintf(", problems %q", st.Errors.IPAM)
	}
	return s
}

// drainEvents returns the events recorded so far.
func drainEvents(r *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-r.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

var cmpRecord = cmp.AllowUnexported(inflight{})

func TestSync(t *testing.T) {
	l2, l3 := testLock("10.0.0.2", attUID), testLock("10.0.0.3", attUID)
	name2, name3 := lockName(1, "10.0.0.2"), lockName(1, "10.0.0.3")
	created2 := createdUID(name2)
	// rec2 records that this controller locked 10.0.0.2 for a/att, based on
	// the cached attachment, and has not written it yet.
	rec2 := func(lockUID types.UID, writtenRV string) *inflight {
		return &inflight{attUID: attUID, subnetUID: subnetUID, lockName: name2, lockUID: lockUID, seenRV: attRV, writtenRV: writtenRV}
	}
	conflict := apierrors.NewConflict(attachmentsGR, attName, fmt.Errorf("the object has been modified"))
	assigned2 := fmt.Sprintf("update networkattachments/status a/att rv=10: 10.0.0.2 on VNI 1, lock %s", created2)
	l7, name7 := testLock("10.0.0.7", attUID), lockName(1, "10.0.0.7")
	taken7 := "Requested address 10.0.0.7 is taken by NetworkAttachment a/other"
	outside := func(addr string) string {
		return "Requested address " + addr + " is outside subnet s (10.0.0.0/24), whose assignable addresses are 10.0.0.2-10.0.0.254"
	}

	tests := []struct {
		name string
		// objs are in the caches and on the server; cacheOnly only in the
		// caches (the server deleted them since), serverOnly only on the
		// server (the caches have not seen them yet).
		objs, cacheOnly, serverOnly []runtime.Object
		reactors                    []reactor
		// record is the in-flight record of a/att before the sync,
		// wantRecord the one after.
		record, wantRecord *inflight
		wantActions        []string
		wantEvents         []string
		// wantErr says that the key is retried.
		wantErr bool
	}{
		// Orphan release: locks of a deleted attachment, or of an earlier
		// one of the same name, go once a live read confirms the owner
		// gone.
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

		// Addresses kept, and released when the subnet is not usable.
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
			wantRecord: &inflight{attUID: attUID, subnetUID: subnetUID, lockName: name3, lockUID: createdUID(name3), seenRV: attRV, writtenRV: "11"},
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
			wantRecord: &inflight{attUID: attUID, subnetUID: subnetUID, lockName: name3, lockUID: l3.UID, seenRV: attRV, writtenRV: "11"},
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

		// New addresses.
		{
			name: "new attachment: locks the first free address and writes it",
			objs: objects(validSubnet(), testAttachment(), otherLock("10.0.0.2")),
			wantActions: []string{
				"create iplocks a/v1-1-10-0-0-3 (owner att-uid, subnet s)",
				"update networkattachments/status a/att rv=10: 10.0.0.3 on VNI 1, lock created-v1-1-10-0-0-3",
			},
			wantRecord: &inflight{attUID: attUID, subnetUID: subnetUID, lockName: name3, lockUID: createdUID(name3), seenRV: attRV, writtenRV: "11"},
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
			wantRecord: &inflight{attUID: attUID, subnetUID: subnetUID, lockName: name3, lockUID: createdUID(name3), seenRV: attRV, writtenRV: "11"},
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
			name:     "status write conflicts: the record keeps the lock, retried",
			objs:     objects(validSubnet(), testAttachment()),
			reactors: []reactor{fail("update", "networkattachments", conflict)},
			wantActions: []string{
				"create iplocks a/v1-1-10-0-0-2 (owner att-uid, subnet s)",
				assigned2,
			},
			wantRecord: rec2(created2, ""),
			wantErr:    true,
		},
		{
			name: "a lock that fits no longer is released before a new one is taken",
			objs: objects(validSubnet(), testAttachment(), testLockVNI(2, "10.0.0.5", attUID)),
			wantActions: []string{
				"delete iplocks a/v1-2-10-0-0-5 (uid v1-2-10-0-0-5-uid)",
				"create iplocks a/v1-1-10-0-0-2 (owner att-uid, subnet s)",
				assigned2,
			},
			wantRecord: rec2(created2, "11"),
		},

		// Requested addresses (spec.ipv4): exactly that one, or a status
		// that says why not.
		{
			name: "asks for a free address: gets exactly that one",
			objs: objects(validSubnet(), asking(testAttachment(), "10.0.0.7")),
			wantActions: []string{
				"create iplocks a/v1-1-10-0-0-7 (owner att-uid, subnet s)",
				"update networkattachments/status a/att rv=10: 10.0.0.7 on VNI 1, lock created-v1-1-10-0-0-7",
			},
			wantRecord: &inflight{attUID: attUID, subnetUID: subnetUID, lockName: name7, lockUID: createdUID(name7), seenRV: attRV, writtenRV: "11"},
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
			name: "asks for an address another attachment holds: the status names the holder, no retry",
			objs: objects(validSubnet(), otherAttachment(), otherLock("10.0.0.7"), asking(testAttachment(), "10.0.0.7")),
			wantActions: []string{
				"create iplocks a/v1-1-10-0-0-7 (owner att-uid, subnet s)",
				"get iplocks a/v1-1-10-0-0-7",
				"get networkattachments a/other",
				`update networkattachments/status a/att rv=10: no address, "` + taken7 + `"`,
			},
			wantEvents: []string{"Warning NoAddress " + taken7},
		},
		{
			name: "asks for a taken address, the status says so already: no write, no event",
			objs: objects(validSubnet(), otherAttachment(), otherLock("10.0.0.7"), asking(noAddress(taken7), "10.0.0.7")),
			wantActions: []string{
				"create iplocks a/v1-1-10-0-0-7 (owner att-uid, subnet s)",
				"get iplocks a/v1-1-10-0-0-7",
				"get networkattachments a/other",
			},
		},
		{
			name:       "asks for an address held by a lock the cache lacks: retried, since no deletion of it may be heard",
			objs:       objects(validSubnet(), otherAttachment(), asking(noAddress(taken7), "10.0.0.7")),
			serverOnly: objects(otherLock("10.0.0.7")),
			wantActions: []string{
				"create iplocks a/v1-1-10-0-0-7 (owner att-uid, subnet s)",
				"get iplocks a/v1-1-10-0-0-7",
				"get networkattachments a/other",
			},
			wantErr: true,
		},
		{
			name: "asks for an address held by a deleted attachment's lock: released and taken",
			objs: objects(validSubnet(), otherLock("10.0.0.7"), asking(testAttachment(), "10.0.0.7")),
			wantActions: []string{
				"create iplocks a/v1-1-10-0-0-7 (owner att-uid, subnet s)",
				"get iplocks a/v1-1-10-0-0-7",
				"get networkattachments a/other",
				"delete iplocks a/v1-1-10-0-0-7 (uid v1-1-10-0-0-7-uid)",
				"create iplocks a/v1-1-10-0-0-7 (owner att-uid, subnet s)",
				"update networkattachments/status a/att rv=10: 10.0.0.7 on VNI 1, lock created-v1-1-10-0-0-7",
			},
			wantRecord: &inflight{attUID: attUID, subnetUID: subnetUID, lockName: name7, lockUID: createdUID(name7), seenRV: attRV, writtenRV: "11"},
		},
		{
			name: "asks for the address of an earlier attachment of the same name: its lock goes first",
			objs: objects(validSubnet(), testLock("10.0.0.7", "earlier-uid"), asking(testAttachment(), "10.0.0.7")),
			wantActions: []string{
				"get networkattachments a/att",
				"delete iplocks a/v1-1-10-0-0-7 (uid v1-1-10-0-0-7-uid)",
				"create iplocks a/v1-1-10-0-0-7 (owner att-uid, subnet s)",
				"update networkattachments/status a/att rv=10: 10.0.0.7 on VNI 1, lock created-v1-1-10-0-0-7",
			},
			wantRecord: &inflight{attUID: attUID, subnetUID: subnetUID, lockName: name7, lockUID: createdUID(name7), seenRV: attRV, writtenRV: "11"},
		},
		{
			name:       "asks for the address of an earlier attachment of the same name, whose lock the cache lacks: released and taken",
			objs:       objects(validSubnet(), asking(testAttachment(), "10.0.0.7")),
			serverOnly: objects(testLock("10.0.0.7", "earlier-uid")),
			wantActions: []string{
				"create iplocks a/v1-1-10-0-0-7 (owner att-uid, subnet s)",
				"get iplocks a/v1-1-10-0-0-7",
				"get networkattachments a/att",
				"delete iplocks a/v1-1-10-0-0-7 (uid v1-1-10-0-0-7-uid)",
				"create iplocks a/v1-1-10-0-0-7 (owner att-uid, subnet s)",
				"update networkattachments/status a/att rv=10: 10.0.0.7 on VNI 1, lock created-v1-1-10-0-0-7",
			},
			wantRecord: &inflight{attUID: attUID, subnetUID: subnetUID, lockName: name7, lockUID: createdUID(name7), seenRV: attRV, writtenRV: "11"},
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
			wantRecord: &inflight{attUID: attUID, subnetUID: subnetUID, lockName: name7, lockUID: l7.UID, seenRV: attRV, writtenRV: "11"},
		},
		{
			name: "asks for an address: a lock it holds on another goes",
			objs: objects(validSubnet(), l2, asking(testAttachment(), "10.0.0.7")),
			wantActions: []string{
				"delete iplocks a/v1-1-10-0-0-2 (uid v1-1-10-0-0-2-uid)",
				"create iplocks a/v1-1-10-0-0-7 (owner att-uid, subnet s)",
				"update networkattachments/status a/att rv=10: 10.0.0.7 on VNI 1, lock created-v1-1-10-0-0-7",
			},
			wantRecord: &inflight{attUID: attUID, subnetUID: subnetUID, lockName: name7, lockUID: createdUID(name7), seenRV: attRV, writtenRV: "11"},
		},
		{
			name: "asked for and held, its lock went to another: the address is cleared and the holder named",
			objs: objects(validSubnet(), otherAttachment(), otherLock("10.0.0.7"), asking(addressed(l7), "10.0.0.7")),
			wantActions: []string{
				"create iplocks a/v1-1-10-0-0-7 (owner att-uid, subnet s)",
				"get iplocks a/v1-1-10-0-0-7",
				"get networkattachments a/other",
				`update networkattachments/status a/att rv=10: no address, "` + taken7 + `"`,
			},
			wantEvents: []string{"Warning NoAddress " + taken7},
		},
		{
			name:        "asks for an address, the holder's read fails: retried",
			objs:        objects(validSubnet(), otherAttachment(), otherLock("10.0.0.7"), asking(testAttachment(), "10.0.0.7")),
			reactors:    []reactor{fail("get", "networkattachments", errBroken)},
			wantActions: []string{"create iplocks a/v1-1-10-0-0-7 (owner att-uid, subnet s)", "get iplocks a/v1-1-10-0-0-7", "get networkattachments a/other"},
			wantErr:     true,
		},

		// Adoption: a lock the attachment holds already, from a sync whose
		// status write failed, is written instead of taking another.
		{
			name: "cached lock of a failed write is adopted",
			objs: objects(validSubnet(), testAttachment(), l3),
			wantActions: []string{
				"update networkattachments/status a/att rv=10: 10.0.0.3 on VNI 1, lock v1-1-10-0-0-3-uid",
			},
			wantRecord: &inflight{attUID: attUID, subnetUID: subnetUID, lockName: name3, lockUID: l3.UID, seenRV: attRV, writtenRV: "11"},
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
			name:   "recorded lock released meanwhile: a new one",
			objs:   objects(validSubnet(), testAttachment()),
			record: rec2("released-uid", ""),
			wantActions: []string{
				"get iplocks a/v1-1-10-0-0-2",
				"create iplocks a/v1-1-10-0-0-2 (owner att-uid, subnet s)",
				assigned2,
			},
			wantRecord: rec2(created2, "11"),
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

		// The in-flight record: this controller's own writes, not yet in
		// its caches.
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
			name:   "record of an earlier attachment of the same name is void",
			objs:   objects(validSubnet(), testAttachment()),
			record: &inflight{attUID: "earlier-uid", subnetUID: subnetUID, lockName: name3, lockUID: l3.UID, seenRV: attRV, writtenRV: "11"},
			wantActions: []string{
				"create iplocks a/v1-1-10-0-0-2 (owner att-uid, subnet s)",
				assigned2,
			},
			wantRecord: rec2(created2, "11"),
		},
		{
			name:   "record of an earlier attachment of the same name is forgotten",
			objs:   objects(validSubnet(), l2, addressed(l2)),
			record: &inflight{attUID: "earlier-uid", subnetUID: subnetUID, lockName: name3, lockUID: l3.UID, seenRV: attRV, writtenRV: "11"},
		},
		{
			name:   "record of an earlier subnet of the same name is void",
			objs:   objects(validSubnet(), testAttachment()),
			record: &inflight{attUID: attUID, subnetUID: "earlier-s-uid", lockName: name3, lockUID: l3.UID, seenRV: attRV, writtenRV: "11"},
			wantActions: []string{
				"create iplocks a/v1-1-10-0-0-2 (owner att-uid, subnet s)",
				assigned2,
			},
			wantRecord: rec2(created2, "11"),
		},

		// Supersede: another copy of the controller wrote a different
		// address meanwhile; the lock this one took goes.
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
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cached := append(append([]runtime.Object{}, tc.objs...), tc.cacheOnly...)
			server := append(append([]runtime.Object{}, tc.objs...), tc.serverOnly...)
			c, client, recorder := newTestController(t, cached, server, tc.reactors...)
			key := testNS + "/" + attName
			if tc.record != nil {
				c.inflight.put(key, tc.record)
			}

			err := c.sync(context.Background(), cache.NewObjectName(testNS, attName))
			if gotErr := err != nil; gotErr != tc.wantErr {
				t.Errorf("sync returned %v; want an error (a retry): %t", err, tc.wantErr)
			}
			if diff := cmp.Diff(describeActions(client.Actions()), tc.wantActions); diff != "" {
				t.Errorf("requests (-got +want):\n%s", diff)
			}
			if diff := cmp.Diff(drainEvents(recorder), tc.wantEvents); diff != "" {
				t.Errorf("events (-got +want):\n%s", diff)
			}
			if diff := cmp.Diff(c.inflight.get(key), tc.wantRecord, cmpRecord); diff != "" {
				t.Errorf("in-flight record (-got +want):\n%s", diff)
			}
		})
	}
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
