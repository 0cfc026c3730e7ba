package apiserver_test

// This file checks the field selectors of lists and watches.

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	kosclient "github.com/kos-sdn/kos/components/generated/clientset/versioned"
)

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
