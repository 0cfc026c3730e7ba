package apiserver_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/tools/poll"
)

// TestIntegrationProtectedCleanup checks that what protects a running pod's
// attachment and a Subnet in use leaves Kubernetes's own clean-up working,
// with kube-controller-manager's garbage collector and namespace controller
// (their own ServiceAccounts, --use-service-account-credentials) and no
// kos-controller-manager: a deleted pod's attachment is deleted by the
// garbage collector through its owner reference, and a deleted namespace
// holding a pod, its attachment and their Subnet goes entirely.
//
// It runs on the control plane with kube-controller-manager (controllersEnv),
// as the shared one has none.
func TestIntegrationProtectedCleanup(t *testing.T) {
	ctx := context.Background()
	env, _ := controllersEnv(t)
	kube, err := kubernetes.NewForConfig(env.RESTConfig)
	if err != nil {
		t.Fatalf("creating a client: %v", err)
	}
	c := kosClient(t, env.RESTConfig)

	// A pod (never scheduled: no scheduler runs) with an attachment it
	// owns, as kos-controller-manager makes it, in a Subnet.
	podWithAttachment := func(ns string, vni uint32) *v1alpha1.NetworkAttachment {
		t.Helper()
		mustCreateSubnet(t, c, newSubnet(ns, "blue", fmt.Sprintf("10.%d.0.0/24", vni-100), vni))
		var pod *corev1.Pod
		// The ServiceAccount controller makes the namespace's default
		// ServiceAccount, which admission wants, in a moment.
		poll.Until(t, time.Minute, "pod web-0 created in "+ns, func(ctx context.Context) error {
			pod, err = kube.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "web-0"},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "kos.example.com/pause:never-pulled"}}},
			}, metav1.CreateOptions{})
			return err
		})
		a := newAttachment(ns, "web-0-net1", "node-1", "blue")
		a.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID,
			Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(false),
		}}
		return mustCreateAttachment(t, c, a)
	}
	namespace := func() string {
		t.Helper()
		ns, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "kos-cleanup-"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating a namespace: %v", err)
		}
		return ns.Name
	}

	// The pod goes: the garbage collector deletes its attachment (it
	// discovers the KOS resources through the aggregator within its
	// 30 s resync), and then the Subnet may go.
	ns := namespace()
	att := podWithAttachment(ns, 150)
	if err := kube.CoreV1().Pods(ns).Delete(ctx, "web-0", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	gone(t, "the garbage collector deletes the pod's attachment", func(ctx context.Context) error {
		_, err := c.NetworkV1alpha1().NetworkAttachments(ns).Get(ctx, att.Name, metav1.GetOptions{})
		return err
	})
	if err := c.NetworkV1alpha1().Subnets(ns).Delete(ctx, "blue", metav1.DeleteOptions{}); err != nil {
		t.Errorf("deleting the subnet once its attachment went with its pod: %v", err)
	}

	// The namespace goes, with its pod, the pod's attachment and the
	// Subnet they use.
	doomed := namespace()
	podWithAttachment(doomed, 151)
	if err := kube.CoreV1().Namespaces().Delete(ctx, doomed, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	gone(t, "namespace "+doomed+" deleted with everything in it", func(ctx context.Context) error {
		ns, err := kube.CoreV1().Namespaces().Get(ctx, doomed, metav1.GetOptions{})
		if err == nil {
			return fmt.Errorf("still there: %s, %+v", ns.Status.Phase, ns.Status.Conditions)
		}
		return err
	})
}

// gone waits, up to 3 minutes, until get answers NotFound.
func gone(t *testing.T, what string, get func(context.Context) error) {
	t.Helper()
	poll.Until(t, 3*time.Minute, what, func(ctx context.Context) error {
		err := get(ctx)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err == nil {
			return fmt.Errorf("still there")
		}
		return err
	})
}
