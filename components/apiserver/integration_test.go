package apiserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

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

// newNamespace creates a namespace in the main cluster, where the server's
// namespace lifecycle admission looks for it.
func newNamespace(t testing.TB) string {
	t.Helper()
	return testenv.Shared(t).NewNamespace(t, "kos-")
}

func newSubnet(ns, name, cidr string, vni uint32) *v1alpha1.Subnet {
	return &v1alpha1.Subnet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       v1alpha1.SubnetSpec{IPv4: cidr, VNI: vni},
	}
}

func newAttachment(ns, name, node, subnet string) *v1alpha1.NetworkAttachment {
	return &v1alpha1.NetworkAttachment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       v1alpha1.NetworkAttachmentSpec{Node: node, Subnet: subnet},
	}
}

func mustCreateSubnet(t testing.TB, c kosclient.Interface, s *v1alpha1.Subnet) *v1alpha1.Subnet {
	t.Helper()
	got, err := c.NetworkV1alpha1().Subnets(s.Namespace).Create(context.Background(), s, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating subnet %s/%s: %v", s.Namespace, s.Name, err)
	}
	return got
}

func mustCreateAttachment(t testing.TB, c kosclient.Interface, a *v1alpha1.NetworkAttachment) *v1alpha1.NetworkAttachment {
	t.Helper()
	got, err := c.NetworkV1alpha1().NetworkAttachments(a.Namespace).Create(context.Background(), a, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating attachment %s/%s: %v", a.Namespace, a.Name, err)
	}
	return got
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

// statusErrorStrings returns the causes of an Invalid error as
// "<field>: <message>" lines.
func statusErrorStrings(err error) []string {
	status, ok := err.(apierrors.APIStatus)
	if !ok || status.Status().Details == nil {
		return []string{fmt.Sprintf("not an API status error: %v", err)}
	}
	var out []string
	for _, c := range status.Status().Details.Causes {
		out = append(out, c.Field+": "+c.Message)
	}
	return out
}

func testCreateValidation(t *testing.T, clients apiClients) {
	ns := newNamespace(t)
	const inside = "must lie inside one RFC 1918 range (10.0.0.0/8, 172.16.0.0/12 or 192.168.0.0/16)"
	tests := []struct {
		name string
		cidr string
		vni  uint32
		want []string // causes; nil means the create succeeds
	}{
		{"vni 0", "10.10.0.0/24", 0, []string{"spec.vni: Invalid value: 0: must be in [1,2097151]"}},
		{"vni 1", "10.10.1.0/24", 1, nil},
		{"vni 2097151", "10.10.2.0/24", 2097151, nil},
		{"vni 2097152", "10.10.3.0/24", 2097152, []string{"spec.vni: Invalid value: 2097152: must be in [1,2097151]"}},
		{"cidr inside 172.16/12", "172.20.0.0/16", 2, nil},
		{"cidr inside 192.168/16", "192.168.7.0/24", 3, nil},
		{"cidr outside", "100.64.0.0/10", 4, []string{`spec.ipv4: Invalid value: "100.64.0.0/10": ` + inside}},
		{"cidr spanning two ranges", "128.0.0.0/1", 5, []string{`spec.ipv4: Invalid value: "128.0.0.0/1": spans 172.16.0.0/12 and 192.168.0.0/16; ` + inside}},
		{"cidr malformed", "10.0.0.0/40", 6, []string{`spec.ipv4: Invalid value: "10.0.0.0/40": must be an IPv4 CIDR block such as 10.1.0.0/16`}},
		{"both wrong", "banana", 0, []string{
			"spec.vni: Invalid value: 0: must be in [1,2097151]",
			`spec.ipv4: Invalid value: "banana": must be an IPv4 CIDR block such as 10.1.0.0/16`,
		}},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newSubnet(ns, fmt.Sprintf("s%d", i), tc.cidr, tc.vni)
			_, err := clients.aggregated.NetworkV1alpha1().Subnets(ns).Create(context.Background(), s, metav1.CreateOptions{})
			if tc.want == nil {
				if err != nil {
					t.Fatalf("create: %v, want success", err)
				}
				return
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("create: got %v, want an Invalid error", err)
			}
			if diff := cmp.Diff(statusErrorStrings(err), tc.want); diff != "" {
				t.Errorf("causes (-got +want):\n%s", diff)
			}
		})
	}

	t.Run("attachment without node or subnet", func(t *testing.T) {
		_, err := clients.aggregated.NetworkV1alpha1().NetworkAttachments(ns).Create(context.Background(), newAttachment(ns, "a", "", ""), metav1.CreateOptions{})
		want := []string{"spec.node: Required value: the name of a node", "spec.subnet: Required value: the name of a Subnet"}
		if diff := cmp.Diff(statusErrorStrings(err), want); diff != "" {
			t.Errorf("causes (-got +want):\n%s", diff)
		}
	})
}

func testConflictCheck(t *testing.T, clients apiClients) {
	ctx := context.Background()
	ns, other := newNamespace(t), newNamespace(t)
	subnets := clients.direct.NetworkV1alpha1().Subnets
	mustCreateSubnet(t, clients.direct, newSubnet(ns, "first", "10.20.0.0/24", 20))

	// The check reads the server's cache, which trails etcd a little; wait
	// until the cache holds the first subnet.
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := subnets(ns).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		return err == nil && len(list.Items) == 1, err
	})
	if err != nil {
		t.Fatalf("waiting for the cache: %v", err)
	}

	tests := []struct {
		name   string
		subnet *v1alpha1.Subnet
		want   []string
	}{
		{"overlapping CIDR", newSubnet(ns, "overlap", "10.20.0.128/25", 20), []string{
			`spec.ipv4: Invalid value: "10.20.0.128/25": CIDR overlaps with ` + ns + `/first's (10.20.0.0/24)`,
		}},
		{"other namespace", newSubnet(other, "elsewhere", "10.21.0.0/24", 20), []string{
			"spec.vni: Invalid value: 20: same VNI but different namespace wrt " + ns + "/first",
		}},
		{"disjoint CIDR, same namespace", newSubnet(ns, "second", "10.20.1.0/24", 20), nil},
		{"overlapping CIDR on another VNI", newSubnet(other, "other-vni", "10.20.0.0/24", 21), nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := subnets(tc.subnet.Namespace).Create(ctx, tc.subnet, metav1.CreateOptions{})
			if tc.want == nil {
				if err != nil {
					t.Fatalf("create: %v, want success", err)
				}
				return
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("create: got %v, want an Invalid error", err)
			}
			if diff := cmp.Diff(statusErrorStrings(err), tc.want); diff != "" {
				t.Errorf("causes (-got +want):\n%s", diff)
			}
		})
	}
}

func testImmutability(t *testing.T, clients apiClients) {
	ctx := context.Background()
	ns := newNamespace(t)
	c := clients.aggregated.NetworkV1alpha1()
	subnet := mustCreateSubnet(t, clients.aggregated, newSubnet(ns, "s1", "10.30.0.0/24", 30))
	att := mustCreateAttachment(t, clients.aggregated, newAttachment(ns, "a1", "node-1", "s1"))
	lock, err := c.IPLocks(ns).Create(ctx, &v1alpha1.IPLock{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "v1-30-10-30-0-5"},
		Spec:       v1alpha1.IPLockSpec{SubnetName: "s1"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating an IP lock: %v", err)
	}

	tests := []struct {
		name   string
		update func() error
		want   []string
	}{
		{"subnet vni", func() error {
			s := subnet.DeepCopy()
			s.Spec.VNI = 31
			_, err := c.Subnets(ns).Update(ctx, s, metav1.UpdateOptions{})
			return err
		}, []string{"spec.vni: Invalid value: 31: field is immutable"}},
		{"subnet cidr", func() error {
			s := subnet.DeepCopy()
			s.Spec.IPv4 = "10.30.1.0/24"
			_, err := c.Subnets(ns).Update(ctx, s, metav1.UpdateOptions{})
			return err
		}, []string{`spec.ipv4: Invalid value: "10.30.1.0/24": field is immutable`}},
		{"attachment node and subnet", func() error {
			a := att.DeepCopy()
			a.Spec.Node, a.Spec.Subnet = "node-2", "s2"
			_, err := c.NetworkAttachments(ns).Update(ctx, a, metav1.UpdateOptions{})
			return err
		}, []string{`spec.node: Invalid value: "node-2": field is immutable`, `spec.subnet: Invalid value: "s2": field is immutable`}},
		{"IP lock subnet", func() error {
			l := lock.DeepCopy()
			l.Spec.SubnetName = "s2"
			_, err := c.IPLocks(ns).Update(ctx, l, metav1.UpdateOptions{})
			return err
		}, []string{`spec.subnetName: Invalid value: "s2": field is immutable`}},
		{"attachment exec commands may change", func() error {
			a := att.DeepCopy()
			a.Spec.PostCreateExec = []string{"/bin/true"}
			_, err := c.NetworkAttachments(ns).Update(ctx, a, metav1.UpdateOptions{})
			return err
		}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.update()
			if tc.want == nil {
				if err != nil {
					t.Fatalf("update: %v, want success", err)
				}
				return
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("update: got %v, want an Invalid error", err)
			}
			if diff := cmp.Diff(statusErrorStrings(err), tc.want); diff != "" {
				t.Errorf("causes (-got +want):\n%s", diff)
			}
		})
	}
	got, err := c.Subnets(ns).Get(ctx, "s1", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("getting the subnet: %v", err)
	}
	if diff := cmp.Diff(got.Spec, subnet.Spec); diff != "" {
		t.Errorf("subnet spec after refused updates (-got +want):\n%s", diff)
	}
}

// testStatusWriteWithoutManagedFields checks what the agent and IPAM rely on
// when they leave the managed fields out of their status writes: a write of
// /status takes them from the stored object, whatever the request says,
// and adds the writer's entry.
func testStatusWriteWithoutManagedFields(t *testing.T, clients apiClients) {
	ctx := context.Background()
	ns := newNamespace(t)
	c := clients.direct.NetworkV1alpha1().NetworkAttachments(ns)
	mustCreateAttachment(t, clients.direct, newAttachment(ns, "a1", "node-1", "s1"))
	// fieldsOf returns the fields each manager owns, by manager and
	// subresource.
	fieldsOf := func(a *v1alpha1.NetworkAttachment) map[string]string {
		out := map[string]string{}
		for _, e := range a.ManagedFields {
			out[e.Manager+" "+e.Subresource] = string(e.FieldsV1.Raw)
		}
		return out
	}
	for _, w := range []struct {
		manager, fields string
		write           func(*v1alpha1.NetworkAttachmentStatus)
	}{
		{"ipam", `{"f:status":{"f:addressVNI":{},"f:ipv4":{}}}`, func(st *v1alpha1.NetworkAttachmentStatus) { st.IPv4, st.AddressVNI = "10.0.0.9", 9 }},
		{"agent", `{"f:status":{"f:hostIP":{}}}`, func(st *v1alpha1.NetworkAttachmentStatus) { st.HostIP = "192.168.0.9" }},
	} {
		current, err := c.Get(ctx, "a1", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("getting the attachment: %v", err)
		}
		upd := current.DeepCopy()
		upd.ManagedFields = nil
		w.write(&upd.Status)
		written, err := c.UpdateStatus(ctx, upd, metav1.UpdateOptions{FieldManager: w.manager})
		if err != nil {
			t.Fatalf("writing /status as %s: %v", w.manager, err)
		}
		want := fieldsOf(current)
		want[w.manager+" status"] = w.fields
		if diff := cmp.Diff(fieldsOf(written), want); diff != "" {
			t.Errorf("managed fields after %s's write without them (-got +want):\n%s", w.manager, diff)
		}
	}
}

func testStatusSpecSeparation(t *testing.T, clients apiClients) {
	ctx := context.Background()
	ns := newNamespace(t)
	c := clients.direct.NetworkV1alpha1()

	// A client cannot create an object with a status.
	a := newAttachment(ns, "a1", "node-1", "s1")
	a.Status = v1alpha1.NetworkAttachmentStatus{IPv4: "10.0.0.9", HostIP: "192.168.0.9"}
	created := mustCreateAttachment(t, clients.direct, a)
	// The server derives the conditions; testReadyCondition covers them.
	noConditions := cmpopts.IgnoreFields(v1alpha1.NetworkAttachmentStatus{}, "Conditions")
	if diff := cmp.Diff(created.Status, v1alpha1.NetworkAttachmentStatus{}, noConditions); diff != "" {
		t.Errorf("status after a create that set one (-got +want):\n%s", diff)
	}

	// The main resource ignores status changes.
	upd := created.DeepCopy()
	upd.Status.IPv4 = "10.0.0.9"
	upd.Spec.PostCreateExec = []string{"/bin/echo", "hi"}
	afterMain, err := c.NetworkAttachments(ns).Update(ctx, upd, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("updating through the main resource: %v", err)
	}
	if diff := cmp.Diff(afterMain.Status, v1alpha1.NetworkAttachmentStatus{}, noConditions); diff != "" {
		t.Errorf("status after an update of the main resource (-got +want):\n%s", diff)
	}
	if diff := cmp.Diff(afterMain.Spec.PostCreateExec, []string{"/bin/echo", "hi"}); diff != "" {
		t.Errorf("spec after an update of the main resource (-got +want):\n%s", diff)
	}

	// /status ignores spec and label changes.
	upd = afterMain.DeepCopy()
	upd.Status.IPv4 = "10.0.0.9"
	upd.Spec.PostCreateExec = []string{"rm", "-rf", "/"}
	upd.Spec.Node = "node-2"
	upd.Labels = map[string]string{"sneaky": "yes"}
	afterStatus, err := c.NetworkAttachments(ns).UpdateStatus(ctx, upd, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("updating /status: %v", err)
	}
	if diff := cmp.Diff(afterStatus.Spec, afterMain.Spec); diff != "" {
		t.Errorf("spec after an update of /status (-got +want):\n%s", diff)
	}
	if afterStatus.Labels != nil {
		t.Errorf("labels after an update of /status = %v, want none", afterStatus.Labels)
	}
	if afterStatus.Status.IPv4 != "10.0.0.9" {
		t.Errorf("status.ipv4 after an update of /status = %q, want 10.0.0.9", afterStatus.Status.IPv4)
	}

	// Subnets: a client cannot validate through create or the main resource,
	// and /status may not take validation back.
	s := newSubnet(ns, "s1", "10.40.0.0/24", 40)
	s.Status.Validated = true
	sub := mustCreateSubnet(t, clients.direct, s)
	if sub.Status.Validated {
		t.Errorf("status.validated after a create that set it = true, want false")
	}
	sub.Status.Validated = true
	sub, err = c.Subnets(ns).Update(ctx, sub, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("updating the subnet: %v", err)
	}
	if sub.Status.Validated {
		t.Errorf("status.validated after an update of the main resource = true, want false")
	}
	sub.Status.Validated = true
	sub.Status.Errors = nil
	sub, err = c.Subnets(ns).UpdateStatus(ctx, sub, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("validating through /status: %v", err)
	}
	if !sub.Status.Validated {
		t.Errorf("status.validated after /status set it = false, want true")
	}
	sub.Status.Validated = false
	_, err = c.Subnets(ns).UpdateStatus(ctx, sub, metav1.UpdateOptions{})
	want := []string{"status.validated: Invalid value: false: may not change from true to false"}
	if diff := cmp.Diff(statusErrorStrings(err), want); diff != "" {
		t.Errorf("taking validation back (-got +want):\n%s", diff)
	}
}

// writeTimes returns the write sections of an object by name.
func writeTimes(ws v1alpha1.WriteSet) map[string]time.Time {
	out := map[string]time.Time{}
	for _, w := range ws {
		out[w.Section] = w.ServerTime.Time
	}
	return out
}

func testWriteSections(t *testing.T, clients apiClients) {
	ctx := context.Background()
	ns := newNamespace(t)
	c := clients.direct.NetworkV1alpha1()
	atts := c.NetworkAttachments(ns)
	began := time.Now().Add(-time.Second) // the server's clock is this machine's

	forged := v1alpha1.WriteSet{
		{Section: v1alpha1.SectionSpec, ServerTime: metav1.NewMicroTime(time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC))},
		{Section: v1alpha1.SectionImpl, ServerTime: metav1.NewMicroTime(time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC))},
	}
	a := newAttachment(ns, "a1", "node-1", "s1")
	a.ExtendedMetadata.Writes = forged
	a = mustCreateAttachment(t, clients.direct, a)
	times := writeTimes(a.ExtendedMetadata.Writes)
	if len(times) != 1 || times[v1alpha1.SectionSpec].Before(began) {
		t.Fatalf("write sections after create = %v, want only a fresh spec section (forged ones ignored)", a.ExtendedMetadata.Writes)
	}

	// The times are kept with microseconds.
	raw, err := clients.direct.NetworkV1alpha1().RESTClient().Get().Namespace(ns).Resource("networkattachments").Name("a1").DoRaw(ctx)
	if err != nil {
		t.Fatalf("getting the raw attachment: %v", err)
	}
	if !regexp.MustCompile(`"serverTime":"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z"`).Match(raw) {
		t.Errorf("serverTime in %s lacks microseconds", raw)
	}

	steps := []struct {
		name    string
		status  bool // through /status, else the main resource
		mutate  func(*v1alpha1.NetworkAttachment)
		changed []string // the sections whose time must advance; all others stay
	}{
		{"address assigned", true, func(a *v1alpha1.NetworkAttachment) {
			a.Status.IPv4, a.Status.AddressVNI, a.Status.LockUID = "10.0.0.5", 1, "uid-1"
		}, []string{v1alpha1.SectionAddress}},
		{"interface reported", true, func(a *v1alpha1.NetworkAttachment) {
			a.Status.MACAddress, a.Status.IfcName, a.Status.HostIP = "06:00:00:05:00:01", "kos060000050001", "192.168.1.1"
		}, []string{v1alpha1.SectionImpl}},
		{"nothing changes", true, func(*v1alpha1.NetworkAttachment) {}, nil},
		{"forged times ignored", true, func(a *v1alpha1.NetworkAttachment) { a.ExtendedMetadata.Writes = forged }, nil},
		{"exec report", true, func(a *v1alpha1.NetworkAttachment) {
			now := metav1.NewTime(time.Now())
			a.Status.PostCreateExecReport = &v1alpha1.ExecReport{Command: []string{"true"}, StartTime: now, StopTime: now}
		}, []string{v1alpha1.SectionExecReport}},
		{"IPAM error", true, func(a *v1alpha1.NetworkAttachment) {
			a.Status.Errors.IPAM = []string{"Referenced subnet has run out of IPs"}
			a.Status.AddressContention = true
		}, []string{v1alpha1.SectionAddress}},
		{"host error", true, func(a *v1alpha1.NetworkAttachment) { a.Status.Errors.Host = []string{"boom"} }, []string{v1alpha1.SectionImpl}},
		{"address and interface at once", true, func(a *v1alpha1.NetworkAttachment) {
			a.Status.LockUID, a.Status.HostIP = "uid-2", "192.168.1.2"
		}, []string{v1alpha1.SectionAddress, v1alpha1.SectionImpl}},
		{"labels only", false, func(a *v1alpha1.NetworkAttachment) { a.Labels = map[string]string{"x": "y"} }, nil},
		{"spec", false, func(a *v1alpha1.NetworkAttachment) { a.Spec.PostDeleteExec = []string{"/bin/true"} }, []string{v1alpha1.SectionSpec}},
	}
	for _, step := range steps {
		before := writeTimes(a.ExtendedMetadata.Writes)
		upd := a.DeepCopy()
		step.mutate(upd)
		var err error
		if step.status {
			a, err = atts.UpdateStatus(ctx, upd, metav1.UpdateOptions{})
		} else {
			a, err = atts.Update(ctx, upd, metav1.UpdateOptions{})
		}
		if err != nil {
			t.Fatalf("%s: update: %v", step.name, err)
		}
		after := writeTimes(a.ExtendedMetadata.Writes)
		var advanced []string
		for section, at := range after {
			prev, ok := before[section]
			switch {
			case !ok || at.After(prev):
				advanced = append(advanced, section)
			case at.Before(prev):
				t.Errorf("%s: section %s went back from %s to %s", step.name, section, prev, at)
			}
		}
		for section := range before {
			if _, ok := after[section]; !ok {
				t.Errorf("%s: section %s disappeared", step.name, section)
			}
		}
		slices.Sort(advanced)
		want := slices.Sorted(slices.Values(step.changed))
		if diff := cmp.Diff(advanced, want); diff != "" {
			t.Errorf("%s: sections that advanced (-got +want):\n%s", step.name, diff)
		}
	}

	// Subnets have a spec and a status section; IP locks a spec section.
	s := mustCreateSubnet(t, clients.direct, newSubnet(ns, "s1", "10.50.0.0/24", 50))
	specTime := writeTimes(s.ExtendedMetadata.Writes)[v1alpha1.SectionSpec]
	s.Status.Validated = true
	s, err = c.Subnets(ns).UpdateStatus(ctx, s, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("validating the subnet: %v", err)
	}
	sTimes := writeTimes(s.ExtendedMetadata.Writes)
	if !sTimes[v1alpha1.SectionStatus].After(specTime) || !sTimes[v1alpha1.SectionSpec].Equal(specTime) || len(sTimes) != 2 {
		t.Errorf("subnet write sections after validation = %v, want spec unchanged at %s and a later status", s.ExtendedMetadata.Writes, specTime)
	}
	lock, err := c.IPLocks(ns).Create(ctx, &v1alpha1.IPLock{
		ObjectMeta:       metav1.ObjectMeta{Namespace: ns, Name: "v1-50-10-50-0-5"},
		ExtendedMetadata: v1alpha1.ExtendedObjectMeta{Writes: forged},
		Spec:             v1alpha1.IPLockSpec{SubnetName: "s1"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating an IP lock: %v", err)
	}
	if lt := writeTimes(lock.ExtendedMetadata.Writes); len(lt) != 1 || lt[v1alpha1.SectionSpec].Before(began) {
		t.Errorf("IP lock write sections = %v, want only a fresh spec section", lock.ExtendedMetadata.Writes)
	}
}

func testFieldSelectors(t *testing.T, clients apiClients) {
	ctx := context.Background()
	ns := newNamespace(t)
	c := clients.direct.NetworkV1alpha1()

	type attachment struct {
		name, node, subnet, ipv4, hostIP string
		vni                              uint32
	}
	for _, a := range []attachment{
		{"a1", "n1", "s1", "10.0.0.1", "192.168.0.1", 7},
		{"a2", "n1", "s2", "10.0.0.2", "192.168.0.2", 70},
		{"a3", "n2", "s1", "10.0.0.3", "192.168.0.1", 7},
		{"a4", "n2", "s2", "", "", 0},
	} {
		created := mustCreateAttachment(t, clients.direct, newAttachment(ns, a.name, a.node, a.subnet))
		if a.ipv4 == "" {
			continue
		}
		created.Status.IPv4, created.Status.HostIP, created.Status.AddressVNI = a.ipv4, a.hostIP, a.vni
		if _, err := c.NetworkAttachments(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("setting the status of %s: %v", a.name, err)
		}
	}
	mustCreateSubnet(t, clients.direct, newSubnet(ns, "s1", "10.60.0.0/24", 7))
	mustCreateSubnet(t, clients.direct, newSubnet(ns, "s2", "10.60.1.0/24", 70))
	for _, l := range []struct{ name, subnet string }{{"v1-7-10-60-0-5", "s1"}, {"v1-70-10-60-1-5", "s2"}} {
		_, err := c.IPLocks(ns).Create(ctx, &v1alpha1.IPLock{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: l.name},
			Spec:       v1alpha1.IPLockSpec{SubnetName: l.subnet},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating IP lock %s: %v", l.name, err)
		}
	}

	tests := []struct {
		resource, selector string
		want               []string
	}{
		{"networkattachments", "spec.node=n1", []string{"a1", "a2"}},
		{"networkattachments", "spec.subnet=s1", []string{"a1", "a3"}},
		{"networkattachments", "status.ipv4=10.0.0.2", []string{"a2"}},
		{"networkattachments", "status.hostIP=192.168.0.1", []string{"a1", "a3"}},
		{"networkattachments", "status.addressVNI=7", []string{"a1", "a3"}},
		{"networkattachments", "status.addressVNI=007", []string{"a1", "a3"}},
		{"networkattachments", "status.addressVNI=70", []string{"a2"}},
		{"networkattachments", "status.addressVNI!=7", []string{"a2", "a4"}},
		{"networkattachments", "status.addressVNI=0", []string{"a4"}},
		{"networkattachments", "spec.node=n1,status.addressVNI=7", []string{"a1"}},
		{"networkattachments", "status.hostIP!=", []string{"a1", "a2", "a3"}},
		{"networkattachments", "status.addressVNI=7,status.hostIP!=", []string{"a1", "a3"}},
		{"networkattachments", "metadata.name=a4", []string{"a4"}},
		{"subnets", "spec.vni=7", []string{"s1"}},
		{"subnets", "spec.vni=0070", []string{"s2"}},
		{"iplocks", "spec.subnetName=s1", []string{"v1-7-10-60-0-5"}},
	}
	for clientName, client := range clients.each() {
		for _, tc := range tests {
			t.Run(clientName+"/"+tc.resource+"/"+tc.selector, func(t *testing.T) {
				got := listNames(t, client, ns, tc.resource, tc.selector)
				if diff := cmp.Diff(got, tc.want); diff != "" {
					t.Errorf("names (-got +want):\n%s", diff)
				}
			})
		}
	}

	unsupported := []struct {
		resource, selector, want string
	}{
		{"networkattachments", "spec.foo=x", `field label "spec.foo" not supported for NetworkAttachment; supported labels: metadata.name, metadata.namespace, spec.node, spec.subnet, status.addressVNI, status.hostIP, status.ipv4`},
		{"networkattachments", "status.addressVNI=seven", `field label "status.addressVNI" of NetworkAttachment takes a decimal number in [0,4294967295], not "seven"`},
		{"subnets", "spec.ipv4=10.60.0.0/24", `field label "spec.ipv4" not supported for Subnet; supported labels: metadata.name, metadata.namespace, spec.vni`},
	}
	for clientName, client := range clients.each() {
		for _, tc := range unsupported {
			t.Run(clientName+"/unsupported/"+tc.selector, func(t *testing.T) {
				err := client.NetworkV1alpha1().RESTClient().Get().Namespace(ns).Resource(tc.resource).
					Param("fieldSelector", tc.selector).Do(ctx).Error()
				if !apierrors.IsBadRequest(err) {
					t.Fatalf("list with %q: got %v, want BadRequest", tc.selector, err)
				}
				if !strings.Contains(err.Error(), tc.want) {
					t.Errorf("error %q does not say %q", err, tc.want)
				}
			})
		}
	}

	// A watch on status.addressVNI sees an attachment when it gets an address
	// on that VNI, as the node agents rely on.
	t.Run("watch status.addressVNI", func(t *testing.T) {
		w, err := clients.aggregated.NetworkV1alpha1().NetworkAttachments(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "status.addressVNI=70"})
		if err != nil {
			t.Fatalf("watching: %v", err)
		}
		defer w.Stop()
		if diff := cmp.Diff(summarize(t, nextEvent(t, w)), eventSummary{watch.Added, "a2"}); diff != "" {
			t.Errorf("initial event (-got +want):\n%s", diff)
		}
		a4, err := c.NetworkAttachments(ns).Get(ctx, "a4", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("getting a4: %v", err)
		}
		a4.Status.IPv4, a4.Status.AddressVNI = "10.60.1.9", 70
		if _, err := c.NetworkAttachments(ns).UpdateStatus(ctx, a4, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("assigning a4 an address: %v", err)
		}
		if diff := cmp.Diff(summarize(t, nextEvent(t, w)), eventSummary{watch.Added, "a4"}); diff != "" {
			t.Errorf("event after a4 joined VNI 70 (-got +want):\n%s", diff)
		}
	})

	// A watch on status.addressVNI and a non-empty status.hostIP, as the
	// agents' network informers make, hears of an attachment only once it
	// has a host.
	t.Run("watch status.addressVNI with a host", func(t *testing.T) {
		w, err := clients.direct.NetworkV1alpha1().NetworkAttachments(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "status.addressVNI=7,status.hostIP!="})
		if err != nil {
			t.Fatalf("watching: %v", err)
		}
		defer w.Stop()
		var initial []eventSummary
		for range 2 {
			initial = append(initial, summarize(t, nextEvent(t, w)))
		}
		slices.SortFunc(initial, func(x, y eventSummary) int { return strings.Compare(x.Name, y.Name) })
		if diff := cmp.Diff(initial, []eventSummary{{watch.Added, "a1"}, {watch.Added, "a3"}}); diff != "" {
			t.Errorf("initial events (-got +want):\n%s", diff)
		}
		a5 := mustCreateAttachment(t, clients.direct, newAttachment(ns, "a5", "n3", "s1"))
		a5.Status.IPv4, a5.Status.AddressVNI = "10.60.0.9", 7
		a5, err = c.NetworkAttachments(ns).UpdateStatus(ctx, a5, metav1.UpdateOptions{})
		if err != nil {
			t.Fatalf("assigning a5 an address: %v", err)
		}
		a5.Status.HostIP = "192.168.0.3"
		if _, err := c.NetworkAttachments(ns).UpdateStatus(ctx, a5, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("giving a5 a host: %v", err)
		}
		// Events come in the order of the writes: the first after the
		// initial ones is a5's host write, not its address write.
		ev := nextEvent(t, w)
		if diff := cmp.Diff(summarize(t, ev), eventSummary{watch.Added, "a5"}); diff != "" {
			t.Errorf("event after a5 got a host (-got +want):\n%s", diff)
		}
		if got := ev.Object.(*v1alpha1.NetworkAttachment).Status.HostIP; got != "192.168.0.3" {
			t.Errorf("a5 arrived with host IP %q, want 192.168.0.3", got)
		}
	})
}

// listNames lists resource in ns with a field selector through the REST
// client and returns the names, sorted.
func listNames(t *testing.T, client *kosclient.Clientset, ns, resource, selector string) []string {
	t.Helper()
	raw, err := client.NetworkV1alpha1().RESTClient().Get().Namespace(ns).Resource(resource).
		Param("fieldSelector", selector).DoRaw(context.Background())
	if err != nil {
		t.Fatalf("listing %s with %q: %v", resource, selector, err)
	}
	var list struct {
		Items []struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
		} `json:"items"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		t.Fatalf("decoding the list: %v", err)
	}
	names := []string{}
	for _, it := range list.Items {
		names = append(names, it.Metadata.Name)
	}
	slices.Sort(names)
	return names
}

func testDelegatedAuthorization(t *testing.T, kos *testenv.KOS) {
	env := testenv.Shared(t)
	ctx := context.Background()
	denied, allowed := newNamespace(t), newNamespace(t)
	_, aliceAggregated, err := env.NewUserKubeconfig("alice")
	if err != nil {
		t.Fatalf("creating a user: %v", err)
	}
	aliceDirect := rest.CopyConfig(kos.DirectConfig)
	aliceDirect.TLSClientConfig.CertData = aliceAggregated.TLSClientConfig.CertData
	aliceDirect.TLSClientConfig.KeyData = aliceAggregated.TLSClientConfig.KeyData
	clients := apiClients{direct: kosClient(t, aliceDirect), aggregated: kosClient(t, aliceAggregated)}

	// Without any grant, both paths refuse; directly, kos-apiserver refuses
	// after asking the main cluster.
	for name, c := range clients.each() {
		_, err := c.NetworkV1alpha1().Subnets(denied).List(ctx, metav1.ListOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("listing %s without rights: got %v, want Forbidden", name, err)
		} else if !strings.Contains(err.Error(), `User "alice" cannot list resource "subnets" in API group "network.example.com"`) {
			t.Errorf("listing %s without rights: error %q does not say who may not do what", name, err)
		}
	}

	kube, err := kubernetes.NewForConfig(env.RESTConfig)
	if err != nil {
		t.Fatalf("creating a client: %v", err)
	}
	_, err = kube.RbacV1().Roles(allowed).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "subnet-reader"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{v1alpha1.GroupName}, Resources: []string{"subnets"}, Verbs: []string{"get", "list"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating a role: %v", err)
	}
	_, err = kube.RbacV1().RoleBindings(allowed).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "alice-reads-subnets"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "subnet-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "alice"}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("binding the role: %v", err)
	}
	for name, c := range clients.each() {
		// RBAC in the main cluster takes effect within moments.
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
			_, err := c.NetworkV1alpha1().Subnets(allowed).List(ctx, metav1.ListOptions{})
			return err == nil, nil
		})
		if err != nil {
			t.Errorf("listing %s with a grant: still refused after 20s", name)
		}
		_, err = c.NetworkV1alpha1().Subnets(allowed).Create(ctx, newSubnet(allowed, "s1", "10.70.0.0/24", 70), metav1.CreateOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("creating %s with a read-only grant: got %v, want Forbidden", name, err)
		}
	}
}

func testKubectl(t *testing.T, clients apiClients) {
	ctx := context.Background()
	ns := newNamespace(t)
	mustCreateSubnet(t, clients.direct, newSubnet(ns, "s1", "10.80.0.0/16", 80))
	a := mustCreateAttachment(t, clients.direct, newAttachment(ns, "a1", "node-1", "s1"))
	a.Status.IPv4, a.Status.MACAddress, a.Status.HostIP = "10.80.0.5", "06:00:50:00:05:00", "192.168.3.4"
	if _, err := clients.direct.NetworkV1alpha1().NetworkAttachments(ns).UpdateStatus(ctx, a, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("setting the attachment status: %v", err)
	}
	if _, err := clients.direct.NetworkV1alpha1().IPLocks(ns).Create(ctx, &v1alpha1.IPLock{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "v1-80-10-80-0-5"},
		Spec:       v1alpha1.IPLockSpec{SubnetName: "s1"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating an IP lock: %v", err)
	}
	cacheDir := filepath.Join(t.TempDir(), "kubectl-cache")

	table := func(args ...string) [][]string {
		out := kubectl(t, append([]string{"--cache-dir=" + cacheDir, "-n", ns, "get"}, args...)...)
		var rows [][]string
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			fields := strings.Fields(line)
			// The age changes while the test runs.
			rows = append(rows, fields[:len(fields)-1])
		}
		return rows
	}
	tests := []struct {
		args []string
		want [][]string
	}{
		{[]string{"subnets"}, [][]string{{"NAME", "VNI", "CIDR", "VALIDATED"}, {"s1", "80", "10.80.0.0/16", "false"}}},
		{[]string{"sn"}, [][]string{{"NAME", "VNI", "CIDR", "VALIDATED"}, {"s1", "80", "10.80.0.0/16", "false"}}},
		// The MAC address is not the one of the address: no agent has set it up.
		{[]string{"na"}, [][]string{{"NAME", "SUBNET", "NODE", "IPV4", "MAC", "HOST", "IP", "READY"}, {"a1", "s1", "node-1", "10.80.0.5", "06:00:50:00:05:00", "192.168.3.4", "False"}}},
		{[]string{"na", "-o", "wide"}, [][]string{{"NAME", "SUBNET", "NODE", "IPV4", "MAC", "HOST", "IP", "READY", "REASON"}, {"a1", "s1", "node-1", "10.80.0.5", "06:00:50:00:05:00", "192.168.3.4", "False", "NotImplemented"}}},
		{[]string{"ipl"}, [][]string{{"NAME", "SUBNET", "OWNER"}, {"v1-80-10-80-0-5", "s1", "<none>"}}},
	}
	for _, tc := range tests {
		t.Run("get "+strings.Join(tc.args, " "), func(t *testing.T) {
			if diff := cmp.Diff(table(tc.args...), tc.want); diff != "" {
				t.Errorf("kubectl get %s (-got +want):\n%s", strings.Join(tc.args, " "), diff)
			}
		})
	}

	t.Run("get kos", func(t *testing.T) {
		out := kubectl(t, "--cache-dir="+cacheDir, "-n", ns, "get", "kos", "-o", "name")
		got := strings.Fields(out)
		slices.Sort(got)
		want := []string{
			"iplock.network.example.com/v1-80-10-80-0-5",
			"networkattachment.network.example.com/a1",
			"subnet.network.example.com/s1",
		}
		if diff := cmp.Diff(got, want); diff != "" {
			t.Errorf("kubectl get kos (-got +want):\n%s", diff)
		}
	})

	t.Run("apply --server-side", func(t *testing.T) {
		manifest := filepath.Join(t.TempDir(), "subnet.yaml")
		yaml := `apiVersion: network.example.com/v1alpha1
kind: Subnet
metadata:
  name: applied
  namespace: ` + ns + `
extendedMetadata:
  writes:
  - section: spec
    serverTime: "2001-01-01T00:00:00.000000Z"
spec:
  ipv4: 10.81.0.0/16
  vni: 81
status:
  validated: true
`
		if err := os.WriteFile(manifest, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		for range 2 { // the second apply is a no-op update
			kubectl(t, "--cache-dir="+cacheDir, "apply", "--server-side", "--field-manager=test", "-f", manifest)
		}
		got, err := clients.aggregated.NetworkV1alpha1().Subnets(ns).Get(ctx, "applied", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("getting the applied subnet: %v", err)
		}
		if got.Spec != (v1alpha1.SubnetSpec{IPv4: "10.81.0.0/16", VNI: 81}) {
			t.Errorf("applied spec = %+v", got.Spec)
		}
		if got.Status.Validated {
			t.Errorf("server-side apply validated the subnet")
		}
		if at, _ := got.ExtendedMetadata.Writes.Time(v1alpha1.SectionSpec); at.Year() == 2001 {
			t.Errorf("server-side apply forged the spec write time: %v", got.ExtendedMetadata.Writes)
		}
	})

	explains := []struct {
		field string
		want  []string
	}{
		{"subnets", []string{"KIND:       Subnet", "Subnet is a block of IPv4 addresses on a virtual network", "extendedMetadata"}},
		{"subnets.spec.vni", []string{"VXLAN network identifier", "[1,2097151]"}},
		{"networkattachments.status.addressVNI", []string{"VNI of the virtual network that the address lives on"}},
		{"networkattachments.extendedMetadata.writes", []string{"serverTime", "section"}},
		{"iplocks.spec.subnetName", []string{"name of the Subnet the address was taken from"}},
	}
	for _, tc := range explains {
		t.Run("explain "+tc.field, func(t *testing.T) {
			out := kubectlEventually(t, "--cache-dir="+cacheDir, "explain", tc.field)
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("kubectl explain %s does not say %q:\n%s", tc.field, w, out)
				}
			}
		})
	}
}
