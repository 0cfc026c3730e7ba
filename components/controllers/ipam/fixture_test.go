package ipam

// This file holds what the sync tests share: their objects, a controller
// on a fake clientset with reactors, the descriptions of its requests, and
// the runner of the sync tables.

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
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

// The values the sync cases share: a/att's locks of 10.0.0.2, 10.0.0.3
// and 10.0.0.7 and their names, the UID the fake server gives the lock of
// 10.0.0.2 it creates, the write that assigns 10.0.0.2, a write conflict,
// and the problem of a requested address that another attachment holds.
var (
	l2, l3       = testLock("10.0.0.2", attUID), testLock("10.0.0.3", attUID)
	name2, name3 = lockName(1, "10.0.0.2"), lockName(1, "10.0.0.3")
	created2     = createdUID(name2)
	conflict     = apierrors.NewConflict(attachmentsGR, attName, fmt.Errorf("the object has been modified"))
	assigned2    = fmt.Sprintf("update networkattachments/status a/att rv=10: 10.0.0.2 on VNI 1, lock %s", created2)
	l7, name7    = testLock("10.0.0.7", attUID), lockName(1, "10.0.0.7")
	taken7       = "Requested address 10.0.0.7 is taken by NetworkAttachment a/other"
	assigned7    = fmt.Sprintf("update networkattachments/status a/att rv=10: 10.0.0.7 on VNI 1, lock %s", createdUID(name7))
)

// take2 returns the requests before, then the create of a/att's lock of
// 10.0.0.2 and the write that assigns it.
func take2(before ...string) []string {
	return append(before, "create iplocks a/v1-1-10-0-0-2 (owner att-uid, subnet s)", assigned2)
}

// retake7 returns the requests before, then the release of the lock of
// 10.0.0.7 that another attachment held, the create of a/att's and the
// write that assigns it.
func retake7(before ...string) []string {
	return append(before, "delete iplocks a/v1-1-10-0-0-7 (uid v1-1-10-0-0-7-uid)", "create iplocks a/v1-1-10-0-0-7 (owner att-uid, subnet s)", assigned7)
}

// held7 returns the requests that find 10.0.0.7 held by a/other (the
// create of a lock that fails, and live reads of the lock and its owner),
// then the requests then.
func held7(then ...string) []string {
	return append([]string{"create iplocks a/v1-1-10-0-0-7 (owner att-uid, subnet s)", "get iplocks a/v1-1-10-0-0-7", "get networkattachments a/other"}, then...)
}

// recWritten records that this controller locked lockName (lock UID
// lockUID) for a/att, based on the cached attachment, and wrote it.
func recWritten(lockName string, lockUID types.UID) *inflight {
	return &inflight{attUID: attUID, subnetUID: subnetUID, lockName: lockName, lockUID: lockUID, seenRV: attRV, writtenRV: "11"}
}

// rec2 records that this controller locked 10.0.0.2 for a/att, based on
// the cached attachment, and has not written it yet.
func rec2(lockUID types.UID, writtenRV string) *inflight {
	return &inflight{attUID: attUID, subnetUID: subnetUID, lockName: name2, lockUID: lockUID, seenRV: attRV, writtenRV: writtenRV}
}

// outside is the problem of a requested address outside subnet a/s.
func outside(addr string) string {
	return "Requested address " + addr + " is outside subnet s (10.0.0.0/24), whose assignable addresses are 10.0.0.2-10.0.0.254"
}

// syncCase is one case of the sync tables: the objects before a sync of
// a/att, and what the sync must do.
type syncCase struct {
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
}

// runSync runs each case's sync of a/att on a controller of its own and
// compares the requests, events, retry and in-flight record with the
// case's.
func runSync(t *testing.T, tests []syncCase) {
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
