package apiserver_test

// This file checks the status subresource apart from the spec, status
// writes without managed fields, and the write time of each section.

import (
	"context"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
)

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
