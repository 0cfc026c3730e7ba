package controllermanager_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/controllermanager"
	"github.com/kos-sdn/kos/components/controllers/ipam"
	"github.com/kos-sdn/kos/components/generated/clientset/versioned"
	"github.com/kos-sdn/kos/tools/poll"
	"github.com/kos-sdn/kos/tools/testenv"
)

// ignoreConditions leaves out of a comparison the conditions, which the
// server derives from the rest of the status.
var ignoreConditions = cmpopts.IgnoreFields(v1alpha1.NetworkAttachmentStatus{}, "Conditions")

// TestIntegrationAddresses gives 500 attachments addresses across subnets
// and VNIs, two of which reuse the same CIDR block.

func TestIntegrationAddresses(t *testing.T) {
	env := testenv.Shared(t)
	c := kosClient(t)
	// With an Event per address, as an operator may ask for.
	m, _ := startManagerWith(t, "manager", controllermanager.Config{SubnetValidatorWorkers: 2, IPAMWorkers: 4, AddressEvents: true})
	ns1, ns2 := newNamespace(t), newNamespace(t)
	subnets := []*v1alpha1.Subnet{
		createSubnet(t, c, newSubnet(ns1, "a", "10.100.0.0/24", 100)),
		createSubnet(t, c, newSubnet(ns1, "b", "10.100.1.0/25", 100)),
		createSubnet(t, c, newSubnet(ns1, "c", "10.100.0.0/23", 101)),
		createSubnet(t, c, newSubnet(ns2, "d", "10.100.0.0/24", 102)),
	}
	waitValidated(t, c, subnets...)

	const n = 500
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				s := subnets[i%len(subnets)]
				_, err := c.NetworkV1alpha1().NetworkAttachments(s.Namespace).Create(context.Background(),
					newAttachment(s.Namespace, fmt.Sprintf("att-%d", i), s.Name), metav1.CreateOptions{})
				if err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("creating attachments: %v", err)
	}

	var snap *snapshot
	poll.Until(t, 3*time.Minute, "500 attachments addressed", func(ctx context.Context) error {
		s, err := takeSnapshot(ctx, c, ns1, ns2)
		if err != nil {
			return err
		}
		if len(s.attachments) != n {
			return fmt.Errorf("%d attachments, want %d", len(s.attachments), n)
		}
		snap = s
		return s.addressesSettled()
	})
	if err := snap.uniqueAddresses(); err != nil {
		t.Error(err)
	}
	for _, a := range snap.attachments {
		if a.Status.AddressContention || len(a.Status.Errors.IPAM) > 0 || a.Status.SubnetCreationTime == nil {
			t.Errorf("attachment %s/%s: contention %v, errors %q, subnet creation time %v; want false, none, set",
				a.Namespace, a.Name, a.Status.AddressContention, a.Status.Errors.IPAM, a.Status.SubnetCreationTime)
		}
	}
	if got := len(snap.locks); got != n {
		t.Errorf("%d IP locks, want %d", got, n)
	}

	// The agent selects attachments by status.addressVNI.
	list, err := c.NetworkV1alpha1().NetworkAttachments(ns2).List(context.Background(), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector(v1alpha1.FieldAddressVNI, "102").String(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(list.Items); got != n/4 {
		t.Errorf("attachments with status.addressVNI=102: %d, want %d", got, n/4)
	}

	// The manager's metrics saw every address and subnet.
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	metrics := get(t, srv.URL+"/metrics", http.StatusOK)
	for _, want := range []string{
		fmt.Sprintf("kos_attachment_create_to_address_seconds_count %d", n),
		fmt.Sprintf("kos_subnet_create_to_validated_seconds_count %d", len(subnets)),
		`workqueue_adds_total{name="kos_ipam"}`,
		`workqueue_depth{name="kos_subnet_validator"}`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	get(t, srv.URL+"/healthz", http.StatusOK)
	get(t, srv.URL+"/readyz", http.StatusOK)

	// Events go to the main cluster.
	kube, err := kubernetes.NewForConfig(env.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, "events recorded", func(ctx context.Context) error {
		events, err := kube.CoreV1().Events(ns1).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		reasons := map[string]bool{}
		for _, e := range events.Items {
			reasons[e.Reason] = true
		}
		if !reasons[ipam.ReasonAddressAssigned] || !reasons["Validated"] {
			return fmt.Errorf("event reasons %v, want AddressAssigned and Validated", reasons)
		}
		return nil
	})
}

func get(t *testing.T, url string, wantStatus int) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	if resp.StatusCode != wantStatus {
		t.Errorf("GET %s: %s, want %d", url, resp.Status, wantStatus)
	}
	return string(body)
}

// TestIntegrationExhaustion fills a /29 (five addresses) with six
// attachments: the sixth reports the subnet full until an addressed one is
// deleted, whose lock is released and whose address goes to the sixth.
func TestIntegrationExhaustion(t *testing.T) {
	ctx := context.Background()
	c := kosClient(t)
	startManager(t, "manager", 2)
	ns := newNamespace(t)
	s := createSubnet(t, c, newSubnet(ns, "small", "10.110.0.8/29", 110))
	waitValidated(t, c, s)
	for i := range 5 {
		createAttachment(t, c, newAttachment(ns, fmt.Sprintf("att-%d", i), s.Name))
	}
	poll.Until(t, time.Minute, "five attachments addressed", func(ctx context.Context) error {
		snap, err := takeSnapshot(ctx, c, ns)
		if err != nil {
			return err
		}
		return snap.addressesSettled()
	})
	createAttachment(t, c, newAttachment(ns, "sixth", s.Name))
	want := v1alpha1.NetworkAttachmentStatus{
		AddressContention: true,
		Errors:            v1alpha1.NetworkAttachmentErrors{IPAM: []string{ipam.ErrSubnetFull}},
	}
	poll.Until(t, time.Minute, "the sixth reports a full subnet", func(ctx context.Context) error {
		got, err := c.NetworkV1alpha1().NetworkAttachments(ns).Get(ctx, "sixth", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if diff := cmp.Diff(got.Status, want, ignoreConditions); diff != "" {
			return fmt.Errorf("status (-got +want):\n%s", diff)
		}
		return nil
	})

	victim, err := c.NetworkV1alpha1().NetworkAttachments(ns).Get(ctx, "att-2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.NetworkV1alpha1().NetworkAttachments(ns).Delete(ctx, victim.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, "the sixth gets the freed address", func(ctx context.Context) error {
		snap, err := takeSnapshot(ctx, c, ns)
		if err != nil {
			return err
		}
		if err := snap.addressesSettled(); err != nil {
			return err
		}
		for _, a := range snap.attachments {
			if a.Name != "sixth" {
				continue
			}
			if a.Status.IPv4 != victim.Status.IPv4 || a.Status.AddressContention || len(a.Status.Errors.IPAM) > 0 {
				return fmt.Errorf("sixth: address %q, contention %v, errors %q; want %s, false, none",
					a.Status.IPv4, a.Status.AddressContention, a.Status.Errors.IPAM, victim.Status.IPv4)
			}
		}
		if len(snap.locks) != 5 {
			return fmt.Errorf("%d locks, want 5", len(snap.locks))
		}
		return snap.uniqueAddresses()
	})

	// By default only the problem is an Event: the full subnet, not the
	// addresses given.
	kube, err := kubernetes.NewForConfig(testenv.Shared(t).RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, "the full subnet recorded as an Event", func(ctx context.Context) error {
		events, err := kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		reasons := map[string]bool{}
		for _, e := range events.Items {
			reasons[e.Reason] = true
		}
		if !reasons[ipam.ReasonNoAddress] {
			return fmt.Errorf("event reasons %v, want %s", reasons, ipam.ReasonNoAddress)
		}
		// One broadcaster sends the Events in order: any for the five
		// earlier addresses would be here by now.
		if reasons[ipam.ReasonAddressAssigned] {
			t.Errorf("event reasons %v: %s recorded without AddressEvents", reasons, ipam.ReasonAddressAssigned)
		}
		return nil
	})
}

// TestIntegrationSubnetInUse tries to delete a subnet with addressed
// attachments: kos-apiserver refuses, and the attachments keep their
// addresses and locks; once they are deleted, the subnet goes, and so do
// their locks.
func TestIntegrationSubnetInUse(t *testing.T) {
	ctx := context.Background()
	c := kosClient(t)
	startManager(t, "manager", 2)
	ns := newNamespace(t)
	net := createSubnet(t, c, newSubnet(ns, "net", "10.120.0.0/24", 120))
	waitValidated(t, c, net)
	for i := range 10 {
		createAttachment(t, c, newAttachment(ns, fmt.Sprintf("att-%d", i), net.Name))
	}
	var addressed *snapshot
	poll.Until(t, time.Minute, "attachments addressed", func(ctx context.Context) error {
		snap, err := takeSnapshot(ctx, c, ns)
		if err != nil {
			return err
		}
		addressed = snap
		return snap.addressesSettled()
	})

	err := c.NetworkV1alpha1().Subnets(ns).Delete(ctx, net.Name, metav1.DeleteOptions{})
	if want := "subnet in use: 10 NetworkAttachments use it (att-0, att-1, att-2, att-3, att-4 and 5 more)"; !apierrors.IsConflict(err) || !strings.Contains(err.Error(), want) {
		t.Fatalf("deleting the subnet in use: got %v, want a conflict saying %q", err, want)
	}
	// Stable, not a passing moment: the addresses and locks stay.
	time.Sleep(time.Second)
	after, err := takeSnapshot(ctx, c, ns)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(after.attachments, addressed.attachments); diff != "" {
		t.Errorf("attachments after the refused delete of their subnet (-got +want):\n%s", diff)
	}
	if diff := cmp.Diff(after.locks, addressed.locks); diff != "" {
		t.Errorf("locks after the refused delete of their subnet (-got +want):\n%s", diff)
	}

	if err := c.NetworkV1alpha1().NetworkAttachments(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.NetworkV1alpha1().Subnets(ns).Delete(ctx, net.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting the subnet no attachment uses: %v", err)
	}
	poll.Until(t, time.Minute, "the attachments' locks released", func(ctx context.Context) error {
		snap, err := takeSnapshot(ctx, c, ns)
		if err != nil {
			return err
		}
		if len(snap.locks) > 0 {
			return fmt.Errorf("%d locks remain", len(snap.locks))
		}
		return nil
	})
}

// createRivals creates conflicting subnets, which the server's own check
// refuses once its cache holds one of them: it creates them all at the same
// moment and tries again until the server accepted them all.
func createRivals(t *testing.T, c versioned.Interface, rivals ...*v1alpha1.Subnet) {
	t.Helper()
	ctx := context.Background()
	for range 50 {
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make([]error, len(rivals))
		for i, s := range rivals {
			wg.Go(func() {
				<-start
				_, errs[i] = c.NetworkV1alpha1().Subnets(s.Namespace).Create(ctx, s, metav1.CreateOptions{})
			})
		}
		close(start)
		wg.Wait()
		failed := false
		for _, err := range errs {
			failed = failed || err != nil
		}
		if !failed {
			return
		}
		for i, s := range rivals {
			if errs[i] == nil {
				if err := c.NetworkV1alpha1().Subnets(s.Namespace).Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil {
					t.Fatalf("deleting subnet %s/%s: %v", s.Namespace, s.Name, err)
				}
			}
		}
		// Let the server's cache forget them before the next try.
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("the server never accepted the %d conflicting subnets at once in 50 tries", len(rivals))
}

// TestIntegrationConflictingSubnets validates exactly the subnets without a
// conflict, with sorted errors on the others, and validates a subnet once
// its last rival is deleted.
func TestIntegrationConflictingSubnets(t *testing.T) {
	ctx := context.Background()
	c := kosClient(t)
	ns1, ns2 := newNamespace(t), newNamespace(t)
	// On VNI 130: a and b overlap, z lives in another namespace.
	createRivals(t, c,
		newSubnet(ns1, "a", "10.130.0.0/24", 130),
		newSubnet(ns1, "b", "10.130.0.128/25", 130),
		newSubnet(ns2, "z", "10.131.0.0/24", 130))
	// On VNI 132: x and y live in two namespaces.
	createRivals(t, c,
		newSubnet(ns1, "x", "10.132.0.0/24", 132),
		newSubnet(ns2, "y", "10.132.1.0/24", 132))
	// On VNI 133, disjoint in one namespace: both fine.
	createSubnet(t, c, newSubnet(ns1, "p", "10.133.0.0/24", 133))
	createSubnet(t, c, newSubnet(ns1, "q", "10.133.1.0/24", 133))

	startManager(t, "manager", 1)
	statuses := func(want map[string]v1alpha1.SubnetStatus) func(context.Context) error {
		return func(ctx context.Context) error {
			snap, err := takeSnapshot(ctx, c, ns1, ns2)
			if err != nil {
				return err
			}
			got := map[string]v1alpha1.SubnetStatus{}
			for _, s := range snap.subnets {
				got[s.Name] = s.Status
			}
			if diff := cmp.Diff(got, want); diff != "" {
				return fmt.Errorf("statuses (-got +want):\n%s", diff)
			}
			return nil
		}
	}
	conflict := func(errs ...string) v1alpha1.SubnetStatus { return v1alpha1.SubnetStatus{Errors: errs} }
	validated := v1alpha1.SubnetStatus{Validated: true}
	want := map[string]v1alpha1.SubnetStatus{
		"a": conflict("CIDR overlaps with "+ns1+"/b's (10.130.0.128/25)", "same VNI but different namespace wrt "+ns2+"/z"),
		"b": conflict("CIDR overlaps with "+ns1+"/a's (10.130.0.0/24)", "same VNI but different namespace wrt "+ns2+"/z"),
		"z": conflict("same VNI but different namespace wrt "+ns1+"/a", "same VNI but different namespace wrt "+ns1+"/b"),
		"x": conflict("same VNI but different namespace wrt " + ns2 + "/y"),
		"y": conflict("same VNI but different namespace wrt " + ns1 + "/x"),
		"p": validated,
		"q": validated,
	}
	poll.Until(t, time.Minute, "exactly p and q validated", statuses(want))
	// Stable, not a passing moment.
	time.Sleep(2 * time.Second)
	poll.Until(t, time.Second, "still exactly p and q validated", statuses(want))

	del := func(ns, name string) {
		t.Helper()
		if err := c.NetworkV1alpha1().Subnets(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		delete(want, name)
	}
	// b's deletion leaves a a rival in z.
	del(ns1, "b")
	want["a"] = conflict("same VNI but different namespace wrt " + ns2 + "/z")
	want["z"] = conflict("same VNI but different namespace wrt " + ns1 + "/a")
	poll.Until(t, time.Minute, "a and z still conflict after b left", statuses(want))
	// z was a's last rival; y is x's only one.
	del(ns2, "z")
	del(ns2, "y")
	want["a"], want["x"] = validated, validated
	poll.Until(t, time.Minute, "a and x validated once their rivals left", statuses(want))
}
