package apiserver_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	kosclient "github.com/kos-sdn/kos/components/generated/clientset/versioned"
	"github.com/kos-sdn/kos/tools/testenv"
)

// TestIntegrationRestart checks that objects survive a restart of kos-apiserver
// and a restart of its etcd, which here serves clients over TLS only, so that
// kos-apiserver's etcd client TLS flags are exercised too.
func TestIntegrationRestart(t *testing.T) {
	ctx := context.Background()
	kos := startKOS(t, testenv.KOSOptions{Name: "restart", DirectOnly: true, EtcdTLS: true})
	client := kosClient(t, kos.DirectConfig)
	c := client.NetworkV1alpha1()

	ns := newNamespace(t)
	mustCreateSubnet(t, client, newSubnet(ns, "s1", "10.90.0.0/24", 90))
	a := mustCreateAttachment(t, client, newAttachment(ns, "a1", "node-1", "s1"))
	a.Status.IPv4, a.Status.AddressVNI = "10.90.0.5", 90
	if _, err := c.NetworkAttachments(ns).UpdateStatus(ctx, a, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("setting the attachment status: %v", err)
	}
	if _, err := c.IPLocks(ns).Create(ctx, &v1alpha1.IPLock{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "v1-90-10-90-0-5"},
		Spec:       v1alpha1.IPLockSpec{SubnetName: "s1"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating an IP lock: %v", err)
	}
	want := snapshot(t, client, ns)

	began := time.Now()
	if err := kos.Stop(); err != nil {
		t.Fatalf("stopping kos-apiserver: %v", err)
	}
	stopped := time.Now()
	if err := kos.Restart(ctx); err != nil {
		t.Fatalf("restarting kos-apiserver: %v", err)
	}
	// Restart moves to another port when its own was taken meanwhile.
	client = kosClient(t, kos.DirectConfig)
	c = client.NetworkV1alpha1()
	t.Logf("kos-apiserver stopped in %s and was ready again %s later", stopped.Sub(began).Round(time.Millisecond), time.Since(stopped).Round(time.Millisecond))
	if diff := cmp.Diff(snapshot(t, client, ns), want); diff != "" {
		t.Errorf("objects after a kos-apiserver restart (-got +want):\n%s", diff)
	}

	began = time.Now()
	if err := kos.RestartEtcd(ctx); err != nil {
		t.Fatalf("restarting etcd: %v", err)
	}
	// kos-apiserver reconnects on its own; until then requests fail.
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := c.Subnets(ns).List(ctx, metav1.ListOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("kos-apiserver did not serve again after its etcd restarted: %v", err)
	}
	t.Logf("etcd restarted and kos-apiserver served again within %s", time.Since(began).Round(time.Millisecond))
	if diff := cmp.Diff(snapshot(t, client, ns), want); diff != "" {
		t.Errorf("objects after an etcd restart (-got +want):\n%s", diff)
	}
	// And it still writes.
	mustCreateSubnet(t, client, newSubnet(ns, "s2", "10.90.1.0/24", 90))
}

// objects are the KOS objects of one namespace.
type objects struct {
	Subnets     []v1alpha1.Subnet
	Attachments []v1alpha1.NetworkAttachment
	Locks       []v1alpha1.IPLock
}

// snapshot reads every KOS object of ns from etcd (a quorum read, not the cache).
func snapshot(t *testing.T, client kosclient.Interface, ns string) objects {
	t.Helper()
	ctx := context.Background()
	c := client.NetworkV1alpha1()
	subnets, err := c.Subnets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("listing subnets: %v", err)
	}
	atts, err := c.NetworkAttachments(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("listing attachments: %v", err)
	}
	locks, err := c.IPLocks(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("listing IP locks: %v", err)
	}
	got := objects{Subnets: subnets.Items, Attachments: atts.Items, Locks: locks.Items}
	if len(got.Subnets) == 0 || len(got.Attachments) == 0 || len(got.Locks) == 0 {
		t.Fatalf("snapshot of %s lacks objects: %d subnets, %d attachments, %d locks", ns, len(got.Subnets), len(got.Attachments), len(got.Locks))
	}
	return got
}
