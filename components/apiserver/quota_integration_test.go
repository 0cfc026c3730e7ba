package apiserver_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	kosclient "github.com/kos-sdn/kos/components/generated/clientset/versioned"
	"github.com/kos-sdn/kos/tools/poll"
)

// TestIntegrationResourceQuota checks that kos-apiserver enforces object-count
// ResourceQuotas of the main cluster on KOS objects, with the main cluster's
// kube-controller-manager counting them: N attachments fit, the (N+1)th is
// refused with the quota's message through both paths, and a delete frees a
// slot once the controller has counted again.
//
// It runs on the control plane with kube-controller-manager (controllersEnv),
// as the shared one has none.
func TestIntegrationResourceQuota(t *testing.T) {
	ctx := context.Background()
	env, kos := controllersEnv(t)
	kube, err := kubernetes.NewForConfig(env.RESTConfig)
	if err != nil {
		t.Fatalf("creating a client: %v", err)
	}
	nsObj, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "kos-quota-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating a namespace: %v", err)
	}
	ns := nsObj.Name
	aggregated, direct := kosClient(t, env.RESTConfig), kosClient(t, kos.DirectConfig)

	const (
		attachments corev1.ResourceName = "count/networkattachments.network.example.com"
		subnets     corev1.ResourceName = "count/subnets.network.example.com"
		n                               = 3
	)
	rq := &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kos"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{
			attachments: *resource.NewQuantity(n, resource.DecimalSI),
			subnets:     *resource.NewQuantity(1, resource.DecimalSI),
		}},
	}
	createQuotaCounted(t, kube, rq, attachments, subnets)

	mustCreateSubnet(t, aggregated, newSubnet(ns, "s1", "10.91.0.0/24", 91))
	_, err = aggregated.NetworkV1alpha1().Subnets(ns).Create(ctx, newSubnet(ns, "s2", "10.92.0.0/24", 92), metav1.CreateOptions{})
	wantQuotaRefusal(t, err, fmt.Sprintf(`subnets.network.example.com "s2" is forbidden: exceeded quota: kos, requested: %[1]s=1, used: %[1]s=1, limited: %[1]s=1`, subnets))

	for i := range n {
		mustCreateAttachment(t, aggregated, newAttachment(ns, fmt.Sprintf("a%d", i), "node-1", "s1"))
	}
	want := fmt.Sprintf(`exceeded quota: kos, requested: %[1]s=1, used: %[1]s=%[2]d, limited: %[1]s=%[2]d`, attachments, n)
	for path, c := range map[string]creator{"aggregated": {aggregated, ns}, "direct": {direct, ns}} {
		wantQuotaRefusal(t, c.create("over-"+path), fmt.Sprintf(`networkattachments.network.example.com "over-%s" is forbidden: %s`, path, want))
	}
	got, err := kube.CoreV1().ResourceQuotas(ns).Get(ctx, rq.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading the quota: %v", err)
	}
	if used := got.Status.Used[attachments]; used.Value() != n {
		t.Errorf("quota status.used[%s] = %s, want %d", attachments, used.String(), n)
	}

	// kube-controller-manager counts again after the delete; until then the
	// slot stays taken.
	if err := aggregated.NetworkV1alpha1().NetworkAttachments(ns).Delete(ctx, "a0", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting a0: %v", err)
	}
	began := time.Now()
	poll.Until(t, time.Minute, "an attachment created in the slot a delete freed", func(ctx context.Context) error {
		return creator{aggregated, ns}.create("after-delete")
	})
	t.Logf("the freed slot was usable %s after the delete", time.Since(began).Round(10*time.Millisecond))
	wantQuotaRefusal(t, creator{direct, ns}.create("over-again"), want)
}

// creator creates attachments on node-1 in subnet s1 of a namespace.
type creator struct {
	c  kosclient.Interface
	ns string
}

func (c creator) create(name string) error {
	_, err := c.c.NetworkV1alpha1().NetworkAttachments(c.ns).Create(context.Background(), newAttachment(c.ns, name, "node-1", "s1"), metav1.CreateOptions{})
	return err
}

// createQuotaCounted creates rq and waits until kube-controller-manager has
// counted every one of resources in its status.used. The controller finds
// the KOS resources through discovery every 30 seconds and counts a quota's
// resources when the quota is created, so a quota made before it found them
// is made again.
func createQuotaCounted(t *testing.T, kube kubernetes.Interface, rq *corev1.ResourceQuota, resources ...corev1.ResourceName) {
	t.Helper()
	quotas := kube.CoreV1().ResourceQuotas(rq.Namespace)
	created := time.Time{}
	poll.Until(t, 2*time.Minute, "kube-controller-manager counting the KOS objects of quota "+rq.Name, func(ctx context.Context) error {
		if created.IsZero() || time.Since(created) > 15*time.Second {
			err := quotas.Delete(ctx, rq.Name, metav1.DeleteOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				return err
			}
			if _, err := quotas.Create(ctx, rq, metav1.CreateOptions{}); err != nil {
				return err
			}
			created = time.Now()
		}
		got, err := quotas.Get(ctx, rq.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		var missing []string
		for _, r := range resources {
			if _, ok := got.Status.Used[r]; !ok {
				missing = append(missing, string(r))
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("status.used has no %s", strings.Join(missing, ", "))
		}
		return nil
	})
}

// wantQuotaRefusal fails the test unless err is a Forbidden that says want.
func wantQuotaRefusal(t *testing.T, err error, want string) {
	t.Helper()
	if !apierrors.IsForbidden(err) {
		t.Fatalf("got %v, want Forbidden", err)
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("refusal %q does not say %q", err, want)
	}
}
