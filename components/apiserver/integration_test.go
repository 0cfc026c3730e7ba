package apiserver_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	kosclient "github.com/kos-sdn/kos/components/generated/clientset/versioned"
	"github.com/kos-sdn/kos/tools/testenv"
)

// TestIntegrationAPI runs one kos-apiserver, with its own etcd, next to a real
// kube-apiserver that delegates to it through an APIService, and checks the
// API through both paths: the aggregator, as users see it, and directly, as
// the controllers and agents use it.
func TestIntegrationAPI(t *testing.T) {
	env := testenv.Shared(t)
	kos := startKOS(t, testenv.KOSOptions{Name: "api"})
	clients := apiClients{
		direct:     kosClient(t, kos.DirectConfig),
		aggregated: kosClient(t, env.RESTConfig),
	}

	t.Run("CRUDAndWatch", func(t *testing.T) { testCRUDAndWatch(t, clients) })
	t.Run("CreateValidation", func(t *testing.T) { testCreateValidation(t, clients) })
	t.Run("ConflictCheck", func(t *testing.T) { testConflictCheck(t, clients) })
	t.Run("Immutability", func(t *testing.T) { testImmutability(t, clients) })
	t.Run("StatusSpecSeparation", func(t *testing.T) { testStatusSpecSeparation(t, clients) })
	t.Run("StatusWriteWithoutManagedFields", func(t *testing.T) { testStatusWriteWithoutManagedFields(t, clients) })
	t.Run("WriteSections", func(t *testing.T) { testWriteSections(t, clients) })
	t.Run("FieldSelectors", func(t *testing.T) { testFieldSelectors(t, clients) })
	t.Run("DelegatedAuthorization", func(t *testing.T) { testDelegatedAuthorization(t, kos) })
	t.Run("Kubectl", func(t *testing.T) { testKubectl(t, clients) })
	t.Run("ReadyCondition", func(t *testing.T) { testReadyCondition(t, clients) })
}

// apiClients reach one kos-apiserver two ways.
type apiClients struct {
	direct, aggregated *kosclient.Clientset
}

// each is both clients, by name, for tests that check both paths.
func (c apiClients) each() map[string]*kosclient.Clientset {
	return map[string]*kosclient.Clientset{"direct": c.direct, "aggregated": c.aggregated}
}

// nextEvent returns the next event of w, failing the test after a timeout.
func nextEvent(t *testing.T, w watch.Interface) watch.Event {
	t.Helper()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			t.Fatal("watch closed early")
		}
		return ev
	case <-time.After(30 * time.Second):
		t.Fatal("no watch event within 30s")
	}
	return watch.Event{}
}

// eventSummary is what a test compares of a watch event.
type eventSummary struct {
	Type watch.EventType
	Name string
}

func summarize(t *testing.T, ev watch.Event) eventSummary {
	t.Helper()
	m, err := metaOf(ev.Object)
	if err != nil {
		t.Fatalf("watch event %s carries %T: %v", ev.Type, ev.Object, err)
	}
	return eventSummary{Type: ev.Type, Name: m.GetName()}
}

func metaOf(obj any) (metav1.Object, error) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("%T has no object metadata", obj)
	}
	return m, nil
}

func testCRUDAndWatch(t *testing.T, clients apiClients) {
	ctx := context.Background()
	ns := newNamespace(t)
	direct, aggregated := clients.direct.NetworkV1alpha1(), clients.aggregated.NetworkV1alpha1()

	// Watches through each path, of each kind of change made through the other.
	aggWatch, err := aggregated.NetworkAttachments(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("watching attachments through the aggregator: %v", err)
	}
	defer aggWatch.Stop()
	directWatch, err := direct.Subnets(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("watching subnets directly: %v", err)
	}
	defer directWatch.Stop()

	created := mustCreateSubnet(t, clients.aggregated, newSubnet(ns, "s1", "10.1.0.0/16", 11))
	got, err := direct.Subnets(ns).Get(ctx, "s1", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("getting the subnet directly: %v", err)
	}
	if diff := cmp.Diff(got, created); diff != "" {
		t.Errorf("subnet read directly differs from the one created through the aggregator (-got +want):\n%s", diff)
	}
	if diff := cmp.Diff(summarize(t, nextEvent(t, directWatch)), eventSummary{watch.Added, "s1"}); diff != "" {
		t.Errorf("direct subnet watch (-got +want):\n%s", diff)
	}

	mustCreateAttachment(t, clients.direct, newAttachment(ns, "a1", "node-1", "s1"))
	if diff := cmp.Diff(summarize(t, nextEvent(t, aggWatch)), eventSummary{watch.Added, "a1"}); diff != "" {
		t.Errorf("aggregated attachment watch after create (-got +want):\n%s", diff)
	}

	for name, c := range clients.each() {
		list, err := c.NetworkV1alpha1().NetworkAttachments(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("listing attachments %s: %v", name, err)
		}
		var names []string
		for _, a := range list.Items {
			names = append(names, a.Name)
		}
		if diff := cmp.Diff(names, []string{"a1"}); diff != "" {
			t.Errorf("attachments listed %s (-got +want):\n%s", name, diff)
		}
	}

	att, err := aggregated.NetworkAttachments(ns).Get(ctx, "a1", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("getting the attachment through the aggregator: %v", err)
	}
	att.Labels = map[string]string{"tier": "web"}
	if _, err := aggregated.NetworkAttachments(ns).Update(ctx, att, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("updating the attachment through the aggregator: %v", err)
	}
	if diff := cmp.Diff(summarize(t, nextEvent(t, aggWatch)), eventSummary{watch.Modified, "a1"}); diff != "" {
		t.Errorf("aggregated attachment watch after update (-got +want):\n%s", diff)
	}
	got2, err := direct.NetworkAttachments(ns).Get(ctx, "a1", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("getting the attachment directly: %v", err)
	}
	if diff := cmp.Diff(got2.Labels, map[string]string{"tier": "web"}); diff != "" {
		t.Errorf("labels read directly after an update through the aggregator (-got +want):\n%s", diff)
	}

	if err := direct.NetworkAttachments(ns).Delete(ctx, "a1", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting the attachment directly: %v", err)
	}
	if diff := cmp.Diff(summarize(t, nextEvent(t, aggWatch)), eventSummary{watch.Deleted, "a1"}); diff != "" {
		t.Errorf("aggregated attachment watch after delete (-got +want):\n%s", diff)
	}
	if _, err := aggregated.NetworkAttachments(ns).Get(ctx, "a1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("getting a deleted attachment: got %v, want NotFound", err)
	}

	lock := &v1alpha1.IPLock{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "v1-11-10-1-0-5"},
		Spec:       v1alpha1.IPLockSpec{SubnetName: "s1"},
	}
	if _, err := aggregated.IPLocks(ns).Create(ctx, lock, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating an IP lock through the aggregator: %v", err)
	}
	if _, err := aggregated.IPLocks(ns).Create(ctx, lock, metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
		t.Errorf("taking a taken IP lock: got %v, want AlreadyExists", err)
	}
	if err := direct.IPLocks(ns).Delete(ctx, lock.Name, metav1.DeleteOptions{}); err != nil {
		t.Errorf("deleting the IP lock directly: %v", err)
	}
}
