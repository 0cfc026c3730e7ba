package agent

import (
	"context"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/fabric"
	"github.com/kos-sdn/kos/components/fabric/logging"
	"github.com/kos-sdn/kos/components/generated/clientset/versioned/fake"
)

// TestSyncRemovesWhatReconcileProgrammed plays, step by step and with no
// goroutine of the agent's running, the interleavings of a full reconcile
// and a worker in which the reconcile programs an attachment's address
// that the worker never synced; the worker's sync of the attachment's
// deletion must then remove what the reconcile programmed, rather than
// leave it to the next periodic reconcile.
func TestSyncRemovesWhatReconcileProgrammed(t *testing.T) {
	const node = "node-a"
	at := func(ip string) func(*v1alpha1.NetworkAttachment) {
		return func(att *v1alpha1.NetworkAttachment) { att.Status.IPv4, att.Status.AddressVNI = ip, 7 }
	}
	// Steps a test takes: the informer delivers a change to the cache
	// (its event queued but not yet synced), a worker syncs the key, or
	// a full reconcile runs.
	type step struct {
		cache     func(*v1alpha1.NetworkAttachment) // nil: the attachment is deleted
		sync      bool
		reconcile bool
	}
	tests := []struct {
		name  string
		steps []step
	}{{
		name: "reconciled before its first sync, then deleted",
		steps: []step{
			{cache: at("10.0.0.1")},
			{reconcile: true},
			{},
			{sync: true},
		},
	}, {
		name: "synced, moved and reconciled before its next sync, then deleted",
		steps: []step{
			{cache: at("10.0.0.1")},
			{sync: true},
			{cache: at("10.0.0.2")},
			{reconcile: true},
			{},
			{sync: true},
		},
	}, {
		name: "reconciled, deleted, then reconciled again before the sync",
		steps: []step{
			{cache: at("10.0.0.1")},
			{reconcile: true},
			{},
			{reconcile: true},
			{sync: true},
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), ktesting.NewLogger(t, ktesting.NewConfig())))
			t.Cleanup(cancel)
			base := &v1alpha1.NetworkAttachment{
				ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: "uid-a"},
				Spec:       v1alpha1.NetworkAttachmentSpec{Node: node, Subnet: "s"},
			}
			client := fake.NewSimpleClientset(base.DeepCopy())
			fab := logging.New()
			a, err := New(Config{NodeName: node, HostIP: netip.MustParseAddr("192.168.100.1"), Client: client, Fabric: fab})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(a.state.stopNetworks)
			store := a.localInformer.GetIndexer()
			for i, s := range tc.steps {
				switch {
				case s.reconcile:
					if ok, _ := a.reconcileFabric(ctx, reconcilePeriodic); !ok {
						t.Fatalf("step %d: the reconcile failed", i)
					}
				case s.sync:
					if err := a.sync(ctx, "ns/a"); err != nil {
						t.Fatalf("step %d: syncing: %v", i, err)
					}
				case s.cache == nil:
					if err := store.Delete(base); err != nil {
						t.Fatal(err)
					}
				default:
					att := base.DeepCopy()
					s.cache(att)
					if err := store.Update(att); err != nil {
						t.Fatal(err)
					}
				}
			}
			got, err := fab.List(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(got, &fabric.Inventory{}, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("the fabric after the deletion's sync (-got +want):\n%s", diff)
			}
			a.state.mu.Lock()
			installed, owned := len(a.state.installed), len(a.state.owned)
			a.state.mu.Unlock()
			if installed != 0 || owned != 0 {
				t.Errorf("the agent believes the fabric holds %d addresses, for %d attachments; want none", installed, owned)
			}
		})
	}
}

// TestStatusWriteLeavesManagedFieldsOut checks that the agent's status write
// carries no managed fields, which the server ignores on a write of
// /status, and that leaving them out does not touch the cached attachment.
func TestStatusWriteLeavesManagedFieldsOut(t *testing.T) {
	const node = "node-a"
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), ktesting.NewLogger(t, ktesting.NewConfig())))
	t.Cleanup(cancel)
	att := &v1alpha1.NetworkAttachment{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns", Name: "a", UID: "uid-a",
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "ipam", Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status"}},
		},
		Spec:   v1alpha1.NetworkAttachmentSpec{Node: node, Subnet: "s"},
		Status: v1alpha1.NetworkAttachmentStatus{IPv4: "10.0.0.1", AddressVNI: 7},
	}
	client := fake.NewSimpleClientset(att.DeepCopy())
	a, err := New(Config{NodeName: node, HostIP: netip.MustParseAddr("192.168.100.1"), Client: client, Fabric: logging.New()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.state.stopNetworks)
	if err := a.localInformer.GetIndexer().Add(att.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	if err := a.sync(ctx, "ns/a"); err != nil {
		t.Fatalf("syncing: %v", err)
	}
	var written []*v1alpha1.NetworkAttachment
	for _, action := range client.Actions() {
		if u, ok := action.(k8stesting.UpdateAction); ok && action.GetSubresource() == "status" {
			written = append(written, u.GetObject().(*v1alpha1.NetworkAttachment))
		}
	}
	if len(written) != 1 {
		t.Fatalf("status writes = %d, want 1 (the interface)", len(written))
	}
	if written[0].Status.HostIP == "" || written[0].ManagedFields != nil {
		t.Errorf("the status write: host IP %q, managed fields %v; want the host IP and no managed fields", written[0].Status.HostIP, written[0].ManagedFields)
	}
	obj, _, err := a.localInformer.GetIndexer().GetByKey("ns/a")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(obj.(*v1alpha1.NetworkAttachment).ManagedFields, att.ManagedFields); diff != "" {
		t.Errorf("managed fields of the cached attachment (-got +want):\n%s", diff)
	}
}
