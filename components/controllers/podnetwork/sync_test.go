package podnetwork

// This file holds the controller's unit tests: sync's decisions, the
// attachment it makes, which write failures it retries, the pod trimmed for
// the cache, and the keys the event handlers queue. The objects they start
// from and the fixture they run on are in sync_fixture_test.go.

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
)

func TestSync(t *testing.T) {
	web := newPod("web-0", "blue, red@data0, mac")
	blue := newDefinition(ns, "blue", kosConfig("s-blue"))
	red := newDefinition(ns, "red", kosConfig("s-red"))
	mac := newDefinition(ns, "mac", `{"cniVersion":"1.0.0","type":"macvlan","master":"eth0"}`)
	defs := []*unstructured.Unstructured{blue, red, mac}
	// A later pod of the same name.
	web2 := newPod("web-0", "blue, red@data0, mac", func(p *corev1.Pod) { p.UID = "web-0-second-uid" })

	tests := []struct {
		name       string
		pods       []*corev1.Pod
		nads       []*unstructured.Unstructured
		atts       []*v1alpha1.NetworkAttachment
		key        string
		wantWrites []string
		wantEvents []string
	}{
		{
			name:       "creates the kos networks' attachments",
			pods:       []*corev1.Pod{web},
			nads:       defs,
			key:        "web-0",
			wantWrites: []string{"create web-0-data0", "create web-0-net1"},
			wantEvents: []string{
				"Normal AttachmentCreated Created NetworkAttachment web-0-data0 for interface data0 in subnet s-red",
				"Normal AttachmentCreated Created NetworkAttachment web-0-net1 for interface net1 in subnet s-blue",
			},
		},
		{
			name: "leaves correct attachments",
			pods: []*corev1.Pod{web},
			nads: defs,
			atts: []*v1alpha1.NetworkAttachment{existing(web, "net1", "s-blue"), existing(web, "data0", "s-red")},
			key:  "web-0",
		},
		{
			name: "an unbound pod gets nothing",
			pods: []*corev1.Pod{newPod("web-0", "blue", func(p *corev1.Pod) { p.Spec.NodeName = "" })},
			nads: defs,
			key:  "web-0",
		},
		{
			name: "a host-network pod gets nothing",
			pods: []*corev1.Pod{newPod("web-0", "blue", func(p *corev1.Pod) { p.Spec.HostNetwork = true })},
			nads: defs,
			key:  "web-0",
		},
		{
			name:       "a finished pod loses its attachments",
			pods:       []*corev1.Pod{newPod("web-0", "blue", func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded })},
			nads:       defs,
			atts:       []*v1alpha1.NetworkAttachment{existing(web, "net1", "s-blue")},
			key:        "web-0",
			wantWrites: []string{"delete web-0-net1"},
			wantEvents: []string{"Normal AttachmentDeleted Deleted NetworkAttachment web-0-net1: the pod is gone, finished or not on a pod network"},
		},
		{
			name: "a deleted pod loses its attachments, and no one else's",
			nads: defs,
			atts: []*v1alpha1.NetworkAttachment{
				existing(web, "net1", "s-blue"), existing(web, "data0", "s-red"),
				existing(newPod("web-1", ""), "net1", "s-blue"),
				{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "by-hand"}, Spec: v1alpha1.NetworkAttachmentSpec{Node: "node-1", Subnet: "s-blue"}},
			},
			key:        "web-0",
			wantWrites: []string{"delete web-0-data0", "delete web-0-net1"},
		},
		{
			name:       "an unused interface no longer asked for goes",
			pods:       []*corev1.Pod{newPod("web-0", "blue")},
			nads:       defs,
			atts:       []*v1alpha1.NetworkAttachment{existing(web, "net1", "s-blue"), existing(web, "data0", "s-red")},
			key:        "web-0",
			wantWrites: []string{"delete web-0-data0"},
			wantEvents: []string{"Normal AttachmentDeleted Deleted NetworkAttachment web-0-data0: the pod no longer asks for its interface"},
		},
		{
			name: "a running interface no longer asked for stays",
			pods: []*corev1.Pod{newPod("web-0", "blue")},
			nads: defs,
			atts: []*v1alpha1.NetworkAttachment{existing(web, "net1", "s-blue"), plugged(existing(web, "data0", "s-red"), "10.2.0.5")},
			key:  "web-0",
			wantEvents: []string{
				"Normal AttachmentKept Kept NetworkAttachment web-0-data0 (subnet s-red, address 10.2.0.5) of the running interface data0, which the pod no longer asks for: a change applies to new sandboxes only; the attachment goes with the pod",
			},
		},
		{
			name: "a definition now of another subnet: a running interface keeps its attachment",
			pods: []*corev1.Pod{newPod("web-0", "blue")},
			nads: defs,
			atts: []*v1alpha1.NetworkAttachment{plugged(existing(web, "net1", "s-old"), "10.9.0.5")},
			key:  "web-0",
			wantEvents: []string{
				"Normal AttachmentKept Kept NetworkAttachment web-0-net1 (subnet s-old, address 10.9.0.5) of the running interface net1, which now asks for subnet s-blue on node node-1: a change applies to new sandboxes only; re-create the pod to apply it",
			},
		},
		{
			name:       "a definition now of another subnet: an attachment without an address is made again (delete first, create once the deletion is seen)",
			pods:       []*corev1.Pod{newPod("web-0", "blue")},
			nads:       defs,
			atts:       []*v1alpha1.NetworkAttachment{existing(web, "net1", "s-old")},
			key:        "web-0",
			wantWrites: []string{"delete web-0-net1"},
			wantEvents: []string{"Normal AttachmentDeleted Deleted NetworkAttachment web-0-net1: interface net1 now wants subnet s-blue on node node-1"},
		},
		{
			name: "an interface reported by its agent without an address is running",
			pods: []*corev1.Pod{newPod("web-0", "blue")},
			nads: defs,
			atts: []*v1alpha1.NetworkAttachment{func() *v1alpha1.NetworkAttachment {
				a := existing(web, "net1", "s-old")
				a.Status.HostIP = "192.0.2.1"
				return a
			}()},
			key: "web-0",
			wantEvents: []string{
				"Normal AttachmentKept Kept NetworkAttachment web-0-net1 (subnet s-old) of the running interface net1, which now asks for subnet s-blue on node node-1: a change applies to new sandboxes only; re-create the pod to apply it",
			},
		},
		{
			name:       "an earlier pod's attachments go first, running or not",
			pods:       []*corev1.Pod{web2},
			nads:       defs,
			atts:       []*v1alpha1.NetworkAttachment{plugged(existing(web, "net1", "s-blue"), "10.1.0.5"), existing(web2, "data0", "s-red")},
			key:        "web-0",
			wantWrites: []string{"delete web-0-net1"},
			wantEvents: []string{"Normal AttachmentDeleted Deleted NetworkAttachment web-0-net1: it belongs to an earlier pod of the same name"},
		},
		{
			name:       "a terminating pod gets no new attachment",
			pods:       []*corev1.Pod{newPod("web-0", "blue,red", func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{} })},
			nads:       defs,
			atts:       []*v1alpha1.NetworkAttachment{existing(web, "data0", "s-red")},
			key:        "web-0",
			wantWrites: []string{"delete web-0-data0"},
			wantEvents: []string{"Normal AttachmentDeleted Deleted NetworkAttachment web-0-data0: the pod no longer asks for its interface"},
		},
		{
			name:       "a finished pod loses its running attachments",
			pods:       []*corev1.Pod{newPod("web-0", "blue", func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed })},
			nads:       defs,
			atts:       []*v1alpha1.NetworkAttachment{plugged(existing(web, "net1", "s-blue"), "10.1.0.5")},
			key:        "web-0",
			wantWrites: []string{"delete web-0-net1"},
			wantEvents: []string{"Normal AttachmentDeleted Deleted NetworkAttachment web-0-net1: the pod is gone, finished or not on a pod network"},
		},
		{
			name: "a missing definition keeps its attachment",
			pods: []*corev1.Pod{newPod("web-0", "blue,gone@data0")},
			nads: defs,
			atts: []*v1alpha1.NetworkAttachment{existing(web, "net1", "s-blue"), existing(web, "data0", "s-red")},
			key:  "web-0",
			wantEvents: []string{
				"Warning NetworkNotFound NetworkAttachmentDefinition pods/gone of interface data0 not found",
			},
		},
		{
			name: "broken definitions",
			pods: []*corev1.Pod{newPod("web-0", "broken,nosubnet,old,blue")},
			nads: append([]*unstructured.Unstructured{
				newDefinition(ns, "broken", `{"type":"kos",`),
				newDefinition(ns, "nosubnet", `{"cniVersion":"1.0.0","type":"kos"}`),
				// kos-cni would refuse every ADD: no attachment, no
				// address, before any sandbox tries.
				newDefinition(ns, "old", `{"cniVersion":"0.2.0","type":"kos","subnet":"s-blue"}`),
			}, defs...),
			key:        "web-0",
			wantWrites: []string{"create web-0-net4"},
			wantEvents: []string{
				"Warning InvalidNetwork NetworkAttachmentDefinition pods/broken of interface net1: parsing the CNI configuration: unexpected end of JSON input",
				`Warning InvalidNetwork NetworkAttachmentDefinition pods/nosubnet of interface net2: the kos configuration has no "subnet": it must name a KOS Subnet in the NetworkAttachmentDefinition's namespace`,
				`Warning InvalidNetwork NetworkAttachmentDefinition pods/old of interface net3: the kos configuration's cniVersion "0.2.0" is not one kos-cni speaks (0.3.1, 0.4.0, 1.0.0, 1.1.0)`,
				"Normal AttachmentCreated Created NetworkAttachment web-0-net4 for interface net4 in subnet s-blue",
			},
		},
		{
			name:       "a malformed annotation changes nothing",
			pods:       []*corev1.Pod{newPod("web-0", "blue,")},
			nads:       defs,
			atts:       []*v1alpha1.NetworkAttachment{existing(web, "data0", "s-red")},
			key:        "web-0",
			wantEvents: []string{`Warning InvalidNetworks Annotation k8s.v1.cni.cncf.io/networks: network 2 (""): empty entry`},
		},
		{
			name: "a kos definition of another namespace",
			pods: []*corev1.Pod{newPod("web-0", "other/blue")},
			nads: []*unstructured.Unstructured{newDefinition("other", "blue", kosConfig("s-blue"))},
			key:  "web-0",
			wantEvents: []string{
				"Warning InvalidNetwork Interface net1 on NetworkAttachmentDefinition other/blue: the definition's subnet is in namespace other, but a KOS interface of a pod in namespace pods must use a subnet of its own namespace",
			},
		},
		{
			name: "another plugin's definition of another namespace is not KOS's business",
			pods: []*corev1.Pod{newPod("web-0", "other/mac")},
			nads: []*unstructured.Unstructured{newDefinition("other", "mac", `{"type":"macvlan"}`)},
			key:  "web-0",
		},
		{
			name:       "requested addresses: one, with its prefix length dropped, is asked for; two are refused; another plugin's are its own",
			pods:       []*corev1.Pod{newPod("web-0", `[{"name":"blue","ips":["10.1.0.5/24"]},{"name":"red","ips":["10.1.0.5","10.1.0.6"]},{"name":"mac","ips":["10.9.0.1","fd00::1"]}]`)},
			nads:       defs,
			key:        "web-0",
			wantWrites: []string{"create web-0-net1 at 10.1.0.5"},
			wantEvents: []string{
				"Warning InvalidNetwork Interface net2 on NetworkAttachmentDefinition pods/red: asks for 2 addresses (10.1.0.5, 10.1.0.6); a KOS interface has one",
				"Normal AttachmentCreated Created NetworkAttachment web-0-net1 for interface net1 in subnet s-blue, asking for address 10.1.0.5",
			},
		},
		{
			name: "a requested IPv6 address is refused",
			pods: []*corev1.Pod{newPod("web-0", `[{"name":"blue","ips":["fd00::5/64"]}]`)},
			nads: defs,
			key:  "web-0",
			wantEvents: []string{
				`Warning InvalidNetwork Interface net1 on NetworkAttachmentDefinition pods/blue: requested address "fd00::5/64" is not IPv4; KOS subnets are IPv4`,
			},
		},
		{
			name: "a requested MAC address is refused on kos, left to another plugin",
			pods: []*corev1.Pod{newPod("web-0", `[{"name":"blue","mac":"02:00:00:00:00:01"},{"name":"mac","mac":"02:00:00:00:00:02"}]`)},
			nads: defs,
			key:  "web-0",
			wantEvents: []string{
				`Warning InvalidNetwork Interface net1 on NetworkAttachmentDefinition pods/blue: the entry asks for MAC address 02:00:00:00:00:01, but a KOS interface has its attachment's MAC address, which follows from its IPv4 address: remove "mac"`,
			},
		},
		{
			name: "a refused address keeps the interface's attachment as it is",
			pods: []*corev1.Pod{newPod("web-0", `[{"name":"blue","ips":["10.1.0.5","10.1.0.6"]}]`)},
			nads: defs,
			atts: []*v1alpha1.NetworkAttachment{existingAt(web, "net1", "s-blue", "10.1.0.5")},
			key:  "web-0",
			wantEvents: []string{
				"Warning InvalidNetwork Interface net1 on NetworkAttachmentDefinition pods/blue: asks for 2 addresses (10.1.0.5, 10.1.0.6); a KOS interface has one",
			},
		},
		{
			name: "an attachment at the address asked for is left",
			pods: []*corev1.Pod{newPod("web-0", `[{"name":"blue","ips":["10.1.0.5"]}]`)},
			nads: defs,
			atts: []*v1alpha1.NetworkAttachment{existingAt(web, "net1", "s-blue", "10.1.0.5")},
			key:  "web-0",
		},
		{
			name:       "an interface waiting for an address that now asks for another: delete first, create once the deletion is seen",
			pods:       []*corev1.Pod{newPod("web-0", `[{"name":"blue","ips":["10.1.0.6"]}]`)},
			nads:       defs,
			atts:       []*v1alpha1.NetworkAttachment{existingAt(web, "net1", "s-blue", "10.1.0.5")},
			key:        "web-0",
			wantWrites: []string{"delete web-0-net1"},
			wantEvents: []string{"Normal AttachmentDeleted Deleted NetworkAttachment web-0-net1: interface net1 now wants subnet s-blue on node node-1 at address 10.1.0.6"},
		},
		{
			name: "a running interface that now asks for another address keeps its own",
			pods: []*corev1.Pod{newPod("web-0", `[{"name":"blue","ips":["10.1.0.6"]}]`)},
			nads: defs,
			atts: []*v1alpha1.NetworkAttachment{plugged(existingAt(web, "net1", "s-blue", "10.1.0.5"), "10.1.0.5")},
			key:  "web-0",
			wantEvents: []string{
				"Normal AttachmentKept Kept NetworkAttachment web-0-net1 (subnet s-blue, address 10.1.0.5) of the running interface net1, which now asks for subnet s-blue on node node-1 at address 10.1.0.6: a change applies to new sandboxes only; re-create the pod to apply it",
			},
		},
		{
			name:       "an interface waiting for an address that no longer asks for one: delete first",
			pods:       []*corev1.Pod{newPod("web-0", "blue")},
			nads:       defs,
			atts:       []*v1alpha1.NetworkAttachment{existingAt(web, "net1", "s-blue", "10.1.0.5")},
			key:        "web-0",
			wantWrites: []string{"delete web-0-net1"},
			wantEvents: []string{"Normal AttachmentDeleted Deleted NetworkAttachment web-0-net1: interface net1 now wants subnet s-blue on node node-1"},
		},
		{
			name: "a name taken by someone else's attachment",
			pods: []*corev1.Pod{newPod("web-0", "blue")},
			nads: defs,
			atts: []*v1alpha1.NetworkAttachment{
				{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-0-net1"}, Spec: v1alpha1.NetworkAttachmentSpec{Node: "node-1", Subnet: "s-blue"}},
			},
			key:        "web-0",
			wantEvents: []string{"Warning AttachmentConflict NetworkAttachment web-0-net1 for interface net1 exists and is not this pod's (it has no controller); the interface gets none"},
		},
		{
			name:       "a name taken by another pod's attachment",
			pods:       []*corev1.Pod{newPod("a-b", "blue@c")},
			nads:       defs,
			atts:       []*v1alpha1.NetworkAttachment{existing(newPod("a", ""), "b-c", "s-blue")},
			key:        "a-b",
			wantEvents: []string{"Warning AttachmentConflict NetworkAttachment a-b-c for interface c exists and is not this pod's (its controller is Pod a); the interface gets none"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.pods, tc.nads, tc.atts)
			if err := f.c.sync(context.Background(), cache.NewObjectName(ns, tc.key)); err != nil {
				t.Fatalf("sync: %v", err)
			}
			if diff := cmp.Diff(f.writes(), tc.wantWrites); diff != "" {
				t.Errorf("writes (-got +want):\n%s", diff)
			}
			if diff := cmp.Diff(f.events(), tc.wantEvents); diff != "" {
				t.Errorf("events (-got +want):\n%s", diff)
			}
		})
	}
}

// TestSyncAttachment checks the whole attachment made, and the
// preconditions of the deletion of an unused attachment: its UID and the
// resourceVersion it was judged unused at.
func TestSyncAttachment(t *testing.T) {
	pod := newPod("web-0", "blue")
	old := existing(newPod("web-0", ""), "net7", "s-blue")
	f := newFixture(t, []*corev1.Pod{pod}, []*unstructured.Unstructured{newDefinition(ns, "blue", kosConfig("s-blue"))}, []*v1alpha1.NetworkAttachment{old})
	if err := f.c.sync(context.Background(), cache.NewObjectName(ns, "web-0")); err != nil {
		t.Fatal(err)
	}
	got, err := f.client.NetworkV1alpha1().NetworkAttachments(ns).Get(context.Background(), "web-0-net1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := &v1alpha1.NetworkAttachment{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   ns,
			Name:        "web-0-net1",
			Labels:      map[string]string{"network.example.com/pod-uid": "web-0-uid"},
			Annotations: map[string]string{"network.example.com/pod": "web-0", "network.example.com/interface": "net1"},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Pod", Name: "web-0", UID: "web-0-uid",
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(false),
			}},
		},
		Spec: v1alpha1.NetworkAttachmentSpec{Node: "node-1", Subnet: "s-blue"},
	}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("attachment (-got +want):\n%s", diff)
	}
	var deletes []metav1.DeleteOptions
	for _, a := range f.client.Actions() {
		if d, ok := a.(k8stesting.DeleteActionImpl); ok {
			deletes = append(deletes, d.DeleteOptions)
		}
	}
	wantDeletes := []metav1.DeleteOptions{{Preconditions: &metav1.Preconditions{UID: &old.UID, ResourceVersion: ptr.To("5")}}}
	if diff := cmp.Diff(deletes, wantDeletes); diff != "" {
		t.Errorf("delete options (-got +want):\n%s", diff)
	}
}

// TestSyncWriteErrors checks which write failures are retried.
func TestSyncWriteErrors(t *testing.T) {
	pod := newPod("web-0", "blue")
	gr := v1alpha1.Resource("networkattachments")
	tests := []struct {
		name       string
		verb       string
		err        error
		atts       []*v1alpha1.NetworkAttachment
		wantErr    bool
		wantEvents []string
	}{
		{"create fails", "create", apierrors.NewServiceUnavailable("etcd is away"), nil, true,
			[]string{"Warning AttachmentFailed Creating NetworkAttachment web-0-net1 for interface net1: etcd is away"}},
		{"create finds it made", "create", apierrors.NewAlreadyExists(gr, "web-0-net1"), nil, false, nil},
		{"delete fails", "delete", errors.New("connection refused"), []*v1alpha1.NetworkAttachment{existing(pod, "net9", "s-blue")}, true,
			[]string{"Warning AttachmentFailed Deleting NetworkAttachment web-0-net9: connection refused", "Normal AttachmentCreated Created NetworkAttachment web-0-net1 for interface net1 in subnet s-blue"}},
		{"delete finds it replaced", "delete", apierrors.NewConflict(gr, "web-0-net9", errors.New("precondition failed: UID")), []*v1alpha1.NetworkAttachment{existing(pod, "net9", "s-blue")}, false,
			[]string{"Normal AttachmentCreated Created NetworkAttachment web-0-net1 for interface net1 in subnet s-blue"}},
		{"delete finds it gone", "delete", apierrors.NewNotFound(gr, "web-0-net9"), []*v1alpha1.NetworkAttachment{existing(pod, "net9", "s-blue")}, false,
			[]string{"Normal AttachmentCreated Created NetworkAttachment web-0-net1 for interface net1 in subnet s-blue"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, []*corev1.Pod{pod}, []*unstructured.Unstructured{newDefinition(ns, "blue", kosConfig("s-blue"))}, tc.atts)
			f.client.PrependReactor(tc.verb, "networkattachments", func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, tc.err
			})
			err := f.c.sync(context.Background(), cache.NewObjectName(ns, "web-0"))
			if (err != nil) != tc.wantErr {
				t.Errorf("sync error %v, want an error: %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(f.events(), tc.wantEvents); diff != "" {
				t.Errorf("events (-got +want):\n%s", diff)
			}
		})
	}
}

func TestTrimPod(t *testing.T) {
	now := metav1.Now()
	full := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: "web-0", UID: "u", ResourceVersion: "7", DeletionTimestamp: &now,
			Labels:        map[string]string{"app": "web"},
			Annotations:   map[string]string{NetworksAnnotation: "blue", "other": "x"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
		},
		Spec:   corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "c", Image: "i"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1"},
	}
	got, err := TrimPod(full)
	if err != nil {
		t.Fatal(err)
	}
	want := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: "web-0", UID: "u", ResourceVersion: "7", DeletionTimestamp: &now,
			Annotations: map[string]string{NetworksAnnotation: "blue"},
		},
		Spec:   corev1.PodSpec{NodeName: "node-1"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("trimmed pod (-got +want):\n%s", diff)
	}
	again, _ := TrimPod(got)
	if diff := cmp.Diff(again, want); diff != "" {
		t.Errorf("trimming twice (-got +want):\n%s", diff)
	}
	tomb := cache.DeletedFinalStateUnknown{Key: "pods/web-0", Obj: full}
	if got, _ := TrimPod(tomb); got != any(tomb) {
		t.Errorf("TrimPod changed a tombstone: %v", got)
	}
}

// TestHandlers checks which keys the event handlers queue.
func TestHandlers(t *testing.T) {
	web := newPod("web-0", "blue,other/red")
	db := newPod("db-0", "red")
	plain := newPod("plain", "")
	f := newFixture(t, []*corev1.Pod{web, db, plain}, nil, nil)
	c := f.c
	tests := []struct {
		name  string
		event func()
		want  []string
	}{
		{"a definition's pods", func() { c.enqueueDefinitionPods(newDefinition("other", "red", "")) }, []string{"pods/web-0"}},
		{"a deleted definition's pods", func() {
			c.enqueueDefinitionPods(cache.DeletedFinalStateUnknown{Key: "pods/red", Obj: newDefinition(ns, "red", "")})
		}, []string{"pods/db-0"}},
		{"a definition no pod names", func() { c.enqueueDefinitionPods(newDefinition(ns, "green", "")) }, nil},
		{"an attachment's pod", func() { c.enqueueAttachmentPod(existing(web, "net1", "s")) }, []string{"pods/web-0"}},
		{"a deleted attachment's pod", func() {
			c.enqueueAttachmentPod(cache.DeletedFinalStateUnknown{Key: "pods/web-0-net1", Obj: existing(db, "net1", "s")})
		}, []string{"pods/db-0"}},
		{"someone else's attachment", func() {
			c.enqueueAttachmentPod(&v1alpha1.NetworkAttachment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "x"}})
		}, nil},
		{"a pod's status update", func() {
			c.podUpdated(web, newPod("web-0", "blue,other/red", func(p *corev1.Pod) { p.ResourceVersion = "2" }))
		}, nil},
		{"a pod's resync", func() { c.podUpdated(web, web) }, []string{"pods/web-0"}},
		{"a pod's new annotation", func() {
			c.podUpdated(web, newPod("web-0", "blue", func(p *corev1.Pod) { p.ResourceVersion = "2" }))
		}, []string{"pods/web-0"}},
		{"a pod's binding", func() {
			c.podUpdated(newPod("web-0", "blue", func(p *corev1.Pod) { p.Spec.NodeName = "" }), newPod("web-0", "blue", func(p *corev1.Pod) { p.ResourceVersion = "2" }))
		}, []string{"pods/web-0"}},
		{"a pod's deletion", func() {
			c.podUpdated(web, newPod("web-0", "blue,other/red", func(p *corev1.Pod) { p.ResourceVersion = "2"; p.DeletionTimestamp = &metav1.Time{} }))
		}, []string{"pods/web-0"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.event()
			var got []string
			for c.queue.Len() > 0 {
				key, _ := c.queue.Get()
				c.queue.Done(key)
				got = append(got, key)
			}
			if diff := cmp.Diff(got, tc.want); diff != "" {
				t.Errorf("queued keys (-got +want):\n%s", diff)
			}
		})
	}
}
