package networkattachment

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kos-sdn/kos/components/apis/network"
	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
)

// implementedStatus returns the status of an attachment with address ip on
// VNI vni that the agent of its node has set up.
func implementedStatus(vni uint32, ip string) network.NetworkAttachmentStatus {
	mac := v1alpha1.MACAddress(vni, netip.MustParseAddr(ip))
	return network.NetworkAttachmentStatus{
		IPv4: ip, AddressVNI: vni, LockUID: "u1",
		MACAddress: mac.String(), IfcName: v1alpha1.InterfaceName(mac), HostIP: "192.168.0.1", MTU: 1450,
	}
}

func TestReadyCondition(t *testing.T) {
	ready := implementedStatus(171, "10.0.0.5")
	tests := []struct {
		name    string
		exec    []string
		status  func(*network.NetworkAttachmentStatus)
		want    metav1.ConditionStatus
		reason  string
		message string
	}{
		{"no address yet", nil,
			func(st *network.NetworkAttachmentStatus) { *st = network.NetworkAttachmentStatus{} },
			metav1.ConditionFalse, "NoAddress", "IPAM has not assigned an address yet"},
		{"subnet not validated", nil,
			func(st *network.NetworkAttachmentStatus) {
				*st = network.NetworkAttachmentStatus{Errors: network.NetworkAttachmentErrors{IPAM: []string{"Referenced subnet is not validated"}}}
			},
			metav1.ConditionFalse, "SubnetNotValidated", "Subnet s1 is not validated"},
		{"no address: IPAM says why", nil,
			func(st *network.NetworkAttachmentStatus) {
				*st = network.NetworkAttachmentStatus{AddressContention: true, Errors: network.NetworkAttachmentErrors{IPAM: []string{"Referenced subnet has run out of IPs"}}}
			},
			metav1.ConditionFalse, "NoAddress", "Referenced subnet has run out of IPs"},
		{"address, no agent yet", nil,
			func(st *network.NetworkAttachmentStatus) {
				st.MACAddress, st.IfcName, st.HostIP, st.MTU = "", "", "", 0
			},
			metav1.ConditionFalse, "NotImplemented", "The agent of node n1 has not set up the interface of 10.0.0.5 yet"},
		{"the agent's report is of an earlier address", nil,
			func(st *network.NetworkAttachmentStatus) {
				earlier := implementedStatus(171, "10.0.0.9")
				st.MACAddress, st.IfcName = earlier.MACAddress, earlier.IfcName
			},
			metav1.ConditionFalse, "NotImplemented", "The agent of node n1 has not set up the interface of 10.0.0.5 yet"},
		{"the agent's report is of another VNI", nil,
			func(st *network.NetworkAttachmentStatus) {
				other := implementedStatus(170, "10.0.0.5")
				st.MACAddress, st.IfcName = other.MACAddress, other.IfcName
			},
			metav1.ConditionFalse, "NotImplemented", "The agent of node n1 has not set up the interface of 10.0.0.5 yet"},
		{"the agent failed", nil,
			func(st *network.NetworkAttachmentStatus) {
				st.MACAddress, st.IfcName, st.HostIP, st.MTU = "", "", "", 0
				st.Errors.Host = []string{"address 10.0.0.5 of VNI 171 is held by attachment ns/a0", "x"}
			},
			metav1.ConditionFalse, "NotImplemented", "The agent of node n1: address 10.0.0.5 of VNI 171 is held by attachment ns/a0; x"},
		{"ready", nil,
			func(*network.NetworkAttachmentStatus) {},
			metav1.ConditionTrue, "Ready", "Interface kos0600000500ab with address 10.0.0.5 is ready on node n1"},
		{"ready: an upper-case MAC address", nil,
			func(st *network.NetworkAttachmentStatus) { st.MACAddress = strings.ToUpper(st.MACAddress) },
			metav1.ConditionTrue, "Ready", "Interface kos0600000500ab with address 10.0.0.5 is ready on node n1"},
		{"exec pending", []string{"/bin/true"},
			func(*network.NetworkAttachmentStatus) {},
			metav1.ConditionFalse, "ExecPending", "postCreateExec has not reported yet"},
		{"exec succeeded", []string{"/bin/true"},
			func(st *network.NetworkAttachmentStatus) {
				st.PostCreateExecReport = &network.ExecReport{Command: []string{"/bin/true"}}
			},
			metav1.ConditionTrue, "Ready", "Interface kos0600000500ab with address 10.0.0.5 is ready on node n1"},
		{"exec failed", []string{"/bin/false"},
			func(st *network.NetworkAttachmentStatus) {
				st.PostCreateExecReport = &network.ExecReport{Command: []string{"/bin/false"}, ExitStatus: 1}
			},
			metav1.ConditionFalse, "ExecFailed", `postCreateExec ["/bin/false"] exited with status 1`},
		{"exec refused", []string{"/bin/rm"},
			func(st *network.NetworkAttachmentStatus) {
				st.PostCreateExecReport = &network.ExecReport{Command: []string{"/bin/rm"}, ExitStatus: -1}
			},
			metav1.ConditionFalse, "ExecFailed", `postCreateExec ["/bin/rm"] exited with status -1`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			att := &network.NetworkAttachment{
				ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a1", Generation: 3},
				Spec:       network.NetworkAttachmentSpec{Node: "n1", Subnet: "s1", PostCreateExec: tc.exec},
				Status:     *ready.DeepCopy(),
			}
			tc.status(&att.Status)
			got := readyCondition(att)
			want := metav1.Condition{Type: "Ready", Status: tc.want, ObservedGeneration: 3, Reason: tc.reason, Message: tc.message}
			if diff := cmp.Diff(got, want); diff != "" {
				t.Errorf("readyCondition (-got +want):\n%s", diff)
			}
		})
	}
}

// TestConditionTransitions runs a life of an attachment through the status
// endpoint, as IPAM and the agent write it: the Ready condition follows the
// fields, and its lastTransitionTime moves only when its status does.
func TestConditionTransitions(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(t0)
	s := newStrategy(runtime.NewScheme(), clk)
	att := &network.NetworkAttachment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a1"},
		Spec:       network.NetworkAttachmentSpec{Node: "n1", Subnet: "s1"},
		// Whatever the client sends is ignored.
		Status: network.NetworkAttachmentStatus{Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue}}},
	}
	s.PrepareForCreate(context.Background(), att)

	type step struct {
		name   string
		main   bool
		update func(*network.NetworkAttachment)
		want   metav1.Condition
	}
	cond := func(status metav1.ConditionStatus, since int, gen int64, reason, message string) metav1.Condition {
		return metav1.Condition{
			Type: "Ready", Status: status, ObservedGeneration: gen,
			LastTransitionTime: metav1.NewTime(t0.Add(time.Duration(since) * time.Second)), Reason: reason, Message: message,
		}
	}
	implemented := implementedStatus(7, "10.0.0.5")
	// askUnknown is the attachment liveness controller's request.
	askUnknown := func(a *network.NetworkAttachment) {
		a.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionUnknown, Reason: "AgentNotHeartbeating", Message: "n1 silent"}}
	}
	steps := []step{
		{"subnet not validated", false, func(a *network.NetworkAttachment) {
			a.Status.Errors.IPAM = []string{"Referenced subnet is not validated"}
		}, cond(metav1.ConditionFalse, 0, 1, "SubnetNotValidated", "Subnet s1 is not validated")},
		{"address", false, func(a *network.NetworkAttachment) {
			a.Status.Errors.IPAM = nil
			a.Status.IPv4, a.Status.AddressVNI, a.Status.LockUID = "10.0.0.5", 7, "u1"
		}, cond(metav1.ConditionFalse, 0, 1, "NotImplemented", "The agent of node n1 has not set up the interface of 10.0.0.5 yet")},
		{"a client writes the condition", false, func(a *network.NetworkAttachment) {
			a.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Ready"}}
		}, cond(metav1.ConditionFalse, 0, 1, "NotImplemented", "The agent of node n1 has not set up the interface of 10.0.0.5 yet")},
		{"the agent sets it up", false, func(a *network.NetworkAttachment) {
			a.Status = *implemented.DeepCopy()
		}, cond(metav1.ConditionTrue, 4, 1, "Ready", "Interface kos060000050007 with address 10.0.0.5 is ready on node n1")},
		{"another write keeps the time", false, func(a *network.NetworkAttachment) {
			a.Status.MTU = 1400
		}, cond(metav1.ConditionTrue, 4, 1, "Ready", "Interface kos060000050007 with address 10.0.0.5 is ready on node n1")},
		{"the agent stopped heartbeating", false, askUnknown, cond(metav1.ConditionUnknown, 6, 1, "AgentNotHeartbeating", "n1 silent")},
		{"asking again keeps the time", false, askUnknown, cond(metav1.ConditionUnknown, 6, 1, "AgentNotHeartbeating", "n1 silent")},
		{"a report of the agent derives it again", false, func(a *network.NetworkAttachment) {
			a.Status.MTU = 1450 // the Unknown condition of its cache goes with it
		}, cond(metav1.ConditionTrue, 8, 1, "Ready", "Interface kos060000050007 with address 10.0.0.5 is ready on node n1")},
		{"stopped heartbeating again", false, askUnknown, cond(metav1.ConditionUnknown, 9, 1, "AgentNotHeartbeating", "n1 silent")},
		{"a write without the request derives it again", false, func(a *network.NetworkAttachment) {
			a.Status.Conditions = nil
		}, cond(metav1.ConditionTrue, 10, 1, "Ready", "Interface kos060000050007 with address 10.0.0.5 is ready on node n1")},
		{"a new postCreateExec is pending", true, func(a *network.NetworkAttachment) {
			a.Spec.PostCreateExec = []string{"/bin/false"}
		}, cond(metav1.ConditionFalse, 11, 2, "ExecPending", "postCreateExec has not reported yet")},
		{"the exec fails: false since the exec was pending", false, func(a *network.NetworkAttachment) {
			a.Status.PostCreateExecReport = &network.ExecReport{Command: []string{"/bin/false"}, ExitStatus: 1}
		}, cond(metav1.ConditionFalse, 11, 2, "ExecFailed", `postCreateExec ["/bin/false"] exited with status 1`)},
		{"Unknown hides no other reason", false, askUnknown,
			cond(metav1.ConditionFalse, 11, 2, "ExecFailed", `postCreateExec ["/bin/false"] exited with status 1`)},
		{"a label changes nothing", true, func(a *network.NetworkAttachment) {
			a.Labels = map[string]string{"a": "b"}
		}, cond(metav1.ConditionFalse, 11, 2, "ExecFailed", `postCreateExec ["/bin/false"] exited with status 1`)},
	}
	for i, st := range steps {
		clk.SetTime(t0.Add(time.Duration(i+1) * time.Second))
		old := att.DeepCopy()
		next := att.DeepCopy()
		st.update(next)
		if st.main {
			s.PrepareForUpdate(context.Background(), next, old)
		} else {
			statusStrategy{s}.PrepareForUpdate(context.Background(), next, old)
		}
		if diff := cmp.Diff(next.Status.Conditions, []metav1.Condition{st.want}); diff != "" {
			t.Fatalf("step %d (%s): conditions (-got +want):\n%s", i, st.name, diff)
		}
		att = next
	}
}

// TestConditionsBackfill: an attachment stored before the server derived
// conditions gets them on its next write, even one of its labels only.
func TestConditionsBackfill(t *testing.T) {
	s := newStrategy(runtime.NewScheme(), clocktesting.NewFakePassiveClock(t1))
	old := &network.NetworkAttachment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a1"},
		Spec:       network.NetworkAttachmentSpec{Node: "n1", Subnet: "s1"},
		Status:     implementedStatus(7, "10.0.0.5"),
	}
	att := old.DeepCopy()
	att.Labels = map[string]string{"a": "b"}
	s.PrepareForUpdate(context.Background(), att, old)
	want := []metav1.Condition{{
		Type: "Ready", Status: metav1.ConditionTrue, LastTransitionTime: metav1.NewTime(t1),
		Reason: "Ready", Message: "Interface kos060000050007 with address 10.0.0.5 is ready on node n1",
	}}
	if diff := cmp.Diff(att.Status.Conditions, want); diff != "" {
		t.Errorf("conditions (-got +want):\n%s", diff)
	}
}
