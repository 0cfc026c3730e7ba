package controllermanager_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/controllermanager"
	"github.com/kos-sdn/kos/components/controllers/podnetwork"
	"github.com/kos-sdn/kos/components/generated/clientset/versioned"
	"github.com/kos-sdn/kos/tools/poll"
	"github.com/kos-sdn/kos/tools/testenv"
)

// TestIntegrationRequestedAddresses runs the pod-network controller and
// IPAM against real servers with pods that ask for their addresses (the
// Multus ips field): a free address is given; one taken by another pod's
// interface leaves the asker waiting, with the holder named in its status,
// until the holder goes; one outside the subnet is reported; and a pod of
// a StatefulSet made again under the same name gets its address back.
// Nothing runs the pods, and no garbage collector runs.
func TestIntegrationRequestedAddresses(t *testing.T) {
	ctx := context.Background()
	env := testenv.Shared(t)
	c := kosClient(t)
	kube, err := kubernetes.NewForConfig(env.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(env.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	installDefinitionCRD(t, dyn)
	ns := newNamespace(t)
	startManagerWith(t, "manager", controllermanager.Config{
		SubnetValidatorWorkers: 1, IPAMWorkers: 2, PodNetworks: true, PodNetworkWorkers: 2,
	})
	if _, err := kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	waitValidated(t, c, createSubnet(t, c, newSubnet(ns, "net", "10.172.0.0/24", 172)))
	// VNI 172 is free again for a run with -count: the pods go, the
	// manager deletes their attachments, and the subnet, in use until
	// then, can go.
	t.Cleanup(func() {
		ctx := context.Background()
		if err := kube.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{}); err != nil {
			t.Errorf("deleting the pods: %v", err)
		}
		// Not poll.Until: it ends with the test's context, done by now.
		var err error
		_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			err = c.NetworkV1alpha1().Subnets(ns).Delete(ctx, "net", metav1.DeleteOptions{})
			return err == nil, nil
		})
		if err != nil {
			t.Errorf("deleting subnet net once unused: %v", err)
		}
	})
	createDefinition(t, dyn.Resource(podnetwork.NetworkAttachmentDefinitions).Namespace(ns), "net", `{"cniVersion":"1.0.0","type":"kos","subnet":"net"}`)
	pods := kube.CoreV1().Pods(ns)
	asking := func(addr string) string { return fmt.Sprintf(`[{"name":"net","ips":[%q]}]`, addr) }
	// Pods of a StatefulSet are deleted at once here: nothing runs them.
	deletePod := func(name string) {
		t.Helper()
		if err := pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
	}

	// A free address, with its prefix length.
	db := createPod(t, pods, "db-0", "node-1", asking("10.172.0.7/24"))
	dbAddressed := waitAddress(t, c, db, "db-0-net1", "10.172.0.7", nil)
	if dbAddressed.Spec.IPv4 != "10.172.0.7" {
		t.Errorf("db-0-net1 spec.ipv4 = %q, want 10.172.0.7", dbAddressed.Spec.IPv4)
	}

	// Taken: the asker waits, and its status names the holder.
	takenBy := fmt.Sprintf("Requested address 10.172.0.7 is taken by NetworkAttachment %s/db-0-net1", ns)
	intruder := createPod(t, pods, "intruder", "node-2", asking("10.172.0.7"))
	waitAddress(t, c, intruder, "intruder-net1", "", []string{takenBy})
	// Outside the subnet: reported.
	far := createPod(t, pods, "far", "node-2", asking("10.173.0.7"))
	waitAddress(t, c, far, "far-net1", "", []string{"Requested address 10.173.0.7 is outside subnet net (10.172.0.0/24), whose assignable addresses are 10.172.0.2-10.172.0.254"})
	// Still waiting, still holding: a passing moment would prove nothing.
	time.Sleep(time.Second)
	waitAddress(t, c, intruder, "intruder-net1", "", []string{takenBy})
	waitAddress(t, c, db, "db-0-net1", "10.172.0.7", nil)

	// The holder goes: the asker gets the address.
	deletePod(db.Name)
	intruderAddressed := waitAddress(t, c, intruder, "intruder-net1", "10.172.0.7", nil)

	// A StatefulSet's pod made again under its name, as soon as the old
	// one is gone, gets its address back: the new attachment, of the same
	// name, waits for the old one's deletion and its lock's release.
	web := createPod(t, pods, "web-0", "node-1", asking("10.172.0.9"))
	old := waitAddress(t, c, web, "web-0-net1", "10.172.0.9", nil)
	deletePod(web.Name)
	web = createPod(t, pods, "web-0", "node-3", asking("10.172.0.9"))
	again := waitAddress(t, c, web, "web-0-net1", "10.172.0.9", nil)
	if again.UID == old.UID || again.Spec.Node != "node-3" {
		t.Errorf("web-0-net1 after the pod was made again: UID %s (old %s), node %s; want a new attachment on node-3", again.UID, old.UID, again.Spec.Node)
	}
	locks, err := c.NetworkV1alpha1().IPLocks(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	holders := map[string]types.UID{}
	for _, l := range locks.Items {
		holders[l.Name] = metav1.GetControllerOf(&l).UID
	}
	if diff := cmp.Diff(holders, map[string]types.UID{"v1-172-10-172-0-7": intruderAddressed.UID, "v1-172-10-172-0-9": again.UID}); diff != "" {
		t.Errorf("IP locks to their controllers' UIDs (-got +want):\n%s", diff)
	}
}

// waitAddress waits until pod's attachment name (by the pod's UID label)
// has address ipv4 ("" for none) and the IPAM errors wantErrs, and returns
// it.
func waitAddress(t *testing.T, c versioned.Interface, pod *corev1.Pod, name, ipv4 string, wantErrs []string) *v1alpha1.NetworkAttachment {
	t.Helper()
	var att *v1alpha1.NetworkAttachment
	poll.Until(t, time.Minute, fmt.Sprintf("attachment %s has address %q and IPAM errors %q", name, ipv4, wantErrs), func(ctx context.Context) error {
		a, err := c.NetworkV1alpha1().NetworkAttachments(pod.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if uid := a.Labels[v1alpha1.PodUIDLabel]; uid != string(pod.UID) {
			return fmt.Errorf("the attachment is pod UID %s's, want %s's", uid, pod.UID)
		}
		if a.Status.IPv4 != ipv4 || !cmp.Equal(a.Status.Errors.IPAM, wantErrs) {
			return fmt.Errorf("address %q, IPAM errors %q", a.Status.IPv4, a.Status.Errors.IPAM)
		}
		att = a
		return nil
	})
	return att
}
