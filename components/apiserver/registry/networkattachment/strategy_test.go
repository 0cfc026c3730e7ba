package networkattachment

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kos-sdn/kos/components/apis/network"
)

var (
	t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	t1 = t0.Add(time.Second)
)

func writes(sections map[string]time.Time) network.WriteSet {
	var ws network.WriteSet
	for _, s := range []string{network.SectionSpec, network.SectionAddress, network.SectionImpl, network.SectionExecReport} {
		if at, ok := sections[s]; ok {
			ws = append(ws, network.ObjectWrite{Section: s, ServerTime: metav1.NewMicroTime(at)})
		}
	}
	return ws
}

func TestPrepareForCreate(t *testing.T) {
	s := newStrategy(runtime.NewScheme(), clocktesting.NewFakePassiveClock(t0))
	att := &network.NetworkAttachment{
		ExtendedMetadata: network.ExtendedObjectMeta{Writes: writes(map[string]time.Time{network.SectionImpl: t1})},
		Spec:             network.NetworkAttachmentSpec{Node: "n1", Subnet: "s1"},
		Status:           network.NetworkAttachmentStatus{IPv4: "10.0.0.1"},
	}
	s.PrepareForCreate(context.Background(), att)
	want := &network.NetworkAttachment{
		ObjectMeta:       metav1.ObjectMeta{Generation: 1},
		ExtendedMetadata: network.ExtendedObjectMeta{Writes: writes(map[string]time.Time{network.SectionSpec: t0})},
		Spec:             network.NetworkAttachmentSpec{Node: "n1", Subnet: "s1"},
		Status: network.NetworkAttachmentStatus{Conditions: []metav1.Condition{{
			Type: "Ready", Status: metav1.ConditionFalse, ObservedGeneration: 1, LastTransitionTime: metav1.NewTime(t0),
			Reason: "NoAddress", Message: "IPAM has not assigned an address yet",
		}}},
	}
	if diff := cmp.Diff(att, want); diff != "" {
		t.Errorf("PrepareForCreate (-got +want):\n%s", diff)
	}
}

func TestPrepareForUpdate(t *testing.T) {
	old := &network.NetworkAttachment{
		ObjectMeta:       metav1.ObjectMeta{Labels: map[string]string{"a": "1"}, Generation: 1},
		ExtendedMetadata: network.ExtendedObjectMeta{Writes: writes(map[string]time.Time{network.SectionSpec: t0, network.SectionAddress: t0})},
		Spec:             network.NetworkAttachmentSpec{Node: "n1", Subnet: "s1"},
		Status:           network.NetworkAttachmentStatus{IPv4: "10.0.0.1", AddressVNI: 1},
	}
	tests := []struct {
		name   string
		status bool
		mutate func(*network.NetworkAttachment)
		want   func(*network.NetworkAttachment)
	}{
		{"main: labels only", false,
			func(a *network.NetworkAttachment) { a.Labels = map[string]string{"a": "2"} },
			func(a *network.NetworkAttachment) { a.Labels = map[string]string{"a": "2"} }},
		{"main: status and writes are kept", false,
			func(a *network.NetworkAttachment) {
				a.Status = network.NetworkAttachmentStatus{}
				a.ExtendedMetadata = network.ExtendedObjectMeta{}
			},
			func(*network.NetworkAttachment) {}},
		{"main: spec change stamps spec and counts a generation", false,
			func(a *network.NetworkAttachment) { a.Spec.PostCreateExec = []string{"true"} },
			func(a *network.NetworkAttachment) {
				a.Spec.PostCreateExec = []string{"true"}
				a.Generation = 2
				a.ExtendedMetadata.Writes = writes(map[string]time.Time{network.SectionSpec: t1, network.SectionAddress: t0})
			}},
		{"status: spec, labels and writes are kept", true,
			func(a *network.NetworkAttachment) {
				a.Spec.Node = "n2"
				a.Labels = nil
				a.ExtendedMetadata = network.ExtendedObjectMeta{}
			},
			func(*network.NetworkAttachment) {}},
		{"status: nil and empty IPAM errors are the same", true,
			func(a *network.NetworkAttachment) { a.Status.Errors.IPAM = []string{} },
			func(a *network.NetworkAttachment) { a.Status.Errors.IPAM = []string{} }},
		{"status: address change", true,
			func(a *network.NetworkAttachment) { a.Status.LockUID = "u" },
			func(a *network.NetworkAttachment) {
				a.Status.LockUID = "u"
				a.ExtendedMetadata.Writes = writes(map[string]time.Time{network.SectionSpec: t0, network.SectionAddress: t1})
			}},
		{"status: subnet creation time is an address change", true,
			func(a *network.NetworkAttachment) { a.Status.SubnetCreationTime = &metav1.Time{Time: t0} },
			func(a *network.NetworkAttachment) {
				a.Status.SubnetCreationTime = &metav1.Time{Time: t0}
				a.ExtendedMetadata.Writes = writes(map[string]time.Time{network.SectionSpec: t0, network.SectionAddress: t1})
			}},
		{"status: the MTU is an interface change", true,
			func(a *network.NetworkAttachment) { a.Status.MTU = 1450 },
			func(a *network.NetworkAttachment) {
				a.Status.MTU = 1450
				a.ExtendedMetadata.Writes = writes(map[string]time.Time{network.SectionSpec: t0, network.SectionAddress: t0, network.SectionImpl: t1})
			}},
		{"status: interface and exec report", true,
			func(a *network.NetworkAttachment) {
				a.Status.Errors.Host = []string{"x"}
				a.Status.PostCreateExecReport = &network.ExecReport{ExitStatus: 1}
			},
			func(a *network.NetworkAttachment) {
				a.Status.Errors.Host = []string{"x"}
				a.Status.PostCreateExecReport = &network.ExecReport{ExitStatus: 1}
				a.ExtendedMetadata.Writes = writes(map[string]time.Time{network.SectionSpec: t0, network.SectionAddress: t0, network.SectionImpl: t1, network.SectionExecReport: t1})
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStrategy(runtime.NewScheme(), clocktesting.NewFakePassiveClock(t1))
			oldCopy := old.DeepCopy()
			got := old.DeepCopy()
			tc.mutate(got)
			if tc.status {
				statusStrategy{s}.PrepareForUpdate(context.Background(), got, oldCopy)
			} else {
				s.PrepareForUpdate(context.Background(), got, oldCopy)
			}
			want := old.DeepCopy()
			tc.want(want)
			// TestConditions covers the conditions.
			if diff := cmp.Diff(got, want, cmpopts.IgnoreFields(network.NetworkAttachmentStatus{}, "Conditions")); diff != "" {
				t.Errorf("PrepareForUpdate (-got +want):\n%s", diff)
			}
			if diff := cmp.Diff(oldCopy, old); diff != "" {
				t.Errorf("PrepareForUpdate changed the old object (-got +want):\n%s", diff)
			}
		})
	}
}

// TestValidateUpdate runs each endpoint's update as the store does,
// PrepareForUpdate then ValidateUpdate: spec.ipv4 is immutable, and the
// status endpoint keeps the address of a live attachment from changing,
// judged against the stored spec.ipv4 whatever spec the client sent.
func TestValidateUpdate(t *testing.T) {
	old := &network.NetworkAttachment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a1", ResourceVersion: "3"},
		Spec:       network.NetworkAttachmentSpec{Node: "n1", Subnet: "s1", IPv4: "10.0.0.7"},
		Status:     network.NetworkAttachmentStatus{IPv4: "10.0.0.7", AddressVNI: 1, LockUID: "u1"},
	}
	tests := []struct {
		name   string
		status bool
		mutate func(*network.NetworkAttachment)
		want   []string
	}{
		{"main: spec.ipv4 may not change", false,
			func(a *network.NetworkAttachment) { a.Spec.IPv4 = "10.0.0.8" },
			[]string{`spec.ipv4: Invalid value: "10.0.0.8": field is immutable`}},
		{"main: spec.ipv4 may not be dropped", false,
			func(a *network.NetworkAttachment) { a.Spec.IPv4 = "" },
			[]string{`spec.ipv4: Invalid value: "": field is immutable`}},
		{"main: a status change is ignored", false,
			func(a *network.NetworkAttachment) { a.Status.IPv4 = "10.0.0.8" },
			nil},
		{"status: the address is kept with a new lock", true,
			func(a *network.NetworkAttachment) { a.Status.LockUID = "u2" },
			nil},
		{"status: the address is cleared", true,
			func(a *network.NetworkAttachment) { a.Status = network.NetworkAttachmentStatus{} },
			nil},
		{"status: the address may not change", true,
			func(a *network.NetworkAttachment) { a.Status.IPv4 = "10.0.0.8" },
			[]string{
				`status.ipv4: Invalid value: "10.0.0.8": may not change from 10.0.0.7 to another address; clear it first`,
				`status.ipv4: Invalid value: "10.0.0.8": must be spec.ipv4 (10.0.0.7), the address asked for`,
			}},
		{"status: the stored spec.ipv4 rules, not the one sent", true,
			func(a *network.NetworkAttachment) {
				a.Spec.IPv4 = "10.0.0.9"
				a.Status = network.NetworkAttachmentStatus{}
				a.ResourceVersion = "4"
			},
			nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStrategy(runtime.NewScheme(), clocktesting.NewFakePassiveClock(t1))
			got := old.DeepCopy()
			tc.mutate(got)
			var errs field.ErrorList
			if tc.status {
				ss := statusStrategy{s}
				ss.PrepareForUpdate(context.Background(), got, old.DeepCopy())
				errs = ss.ValidateUpdate(context.Background(), got, old.DeepCopy())
			} else {
				s.PrepareForUpdate(context.Background(), got, old.DeepCopy())
				errs = s.ValidateUpdate(context.Background(), got, old.DeepCopy())
			}
			var msgs []string
			for _, err := range errs {
				msgs = append(msgs, err.Error())
			}
			if diff := cmp.Diff(msgs, tc.want); diff != "" {
				t.Errorf("ValidateUpdate (-got +want):\n%s", diff)
			}
		})
	}
}

func TestSelectableFields(t *testing.T) {
	att := &network.NetworkAttachment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a1"},
		Spec:       network.NetworkAttachmentSpec{Node: "n1", Subnet: "s1"},
		Status:     network.NetworkAttachmentStatus{IPv4: "10.0.0.1", HostIP: "192.168.0.1", AddressVNI: 42},
	}
	_, got, err := GetAttrs(att)
	if err != nil {
		t.Fatalf("GetAttrs: %v", err)
	}
	want := map[string]string{
		"metadata.name": "a1", "metadata.namespace": "ns",
		"spec.node": "n1", "spec.subnet": "s1",
		"status.ipv4": "10.0.0.1", "status.hostIP": "192.168.0.1", "status.addressVNI": "42",
	}
	if diff := cmp.Diff(map[string]string(got), want); diff != "" {
		t.Errorf("GetAttrs fields (-got +want):\n%s", diff)
	}
}

func TestTable(t *testing.T) {
	list := &network.NetworkAttachmentList{
		ListMeta: metav1.ListMeta{ResourceVersion: "7"},
		Items: []network.NetworkAttachment{
			{ObjectMeta: metav1.ObjectMeta{Name: "a1"}, Spec: network.NetworkAttachmentSpec{Node: "n1", Subnet: "s1"},
				Status: network.NetworkAttachmentStatus{IPv4: "10.0.0.1", MACAddress: "06:00:00:00:00:01", HostIP: "192.168.0.1",
					Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Ready"}}}},
			{ObjectMeta: metav1.ObjectMeta{Name: "a2"}, Spec: network.NetworkAttachmentSpec{Node: "n2", Subnet: "s1"},
				Status: network.NetworkAttachmentStatus{Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionFalse, Reason: "NoAddress"}}}},
			{ObjectMeta: metav1.ObjectMeta{Name: "a3"}, Spec: network.NetworkAttachmentSpec{Node: "n2", Subnet: "s1"}},
		},
	}
	got, err := table.ConvertToTable(context.Background(), list, nil)
	if err != nil {
		t.Fatalf("ConvertToTable: %v", err)
	}
	var columns []string
	for _, c := range got.ColumnDefinitions {
		columns = append(columns, c.Name)
	}
	if diff := cmp.Diff(columns, []string{"Name", "Subnet", "Node", "IPv4", "MAC", "Host IP", "Ready", "Reason", "Age"}); diff != "" {
		t.Errorf("columns (-got +want):\n%s", diff)
	}
	var rows [][]any
	for _, r := range got.Rows {
		rows = append(rows, r.Cells[:len(r.Cells)-1]) // the age depends on the clock
	}
	want := [][]any{
		{"a1", "s1", "n1", "10.0.0.1", "06:00:00:00:00:01", "192.168.0.1", "True", "Ready"},
		{"a2", "s1", "n2", "<none>", "<none>", "<none>", "False", "NoAddress"},
		// Stored before the server derived conditions.
		{"a3", "s1", "n2", "<none>", "<none>", "<none>", "<none>", "<none>"},
	}
	if diff := cmp.Diff(rows, want); diff != "" {
		t.Errorf("rows (-got +want):\n%s", diff)
	}
	if got.ResourceVersion != "7" {
		t.Errorf("table resourceVersion = %q, want 7", got.ResourceVersion)
	}
}
