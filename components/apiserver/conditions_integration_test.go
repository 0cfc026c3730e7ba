package apiserver_test

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/tools/testenv"
)

// testReadyCondition walks an attachment through the writes of IPAM and of
// its node's agent, as they make them, and checks the Ready condition the
// server derives from each, as users read it: kubectl wait
// --for=condition=Ready times out while the attachment is not ready, and
// returns once the write that makes it ready lands.
func testReadyCondition(t *testing.T, clients apiClients) {
	ctx := context.Background()
	ns := newNamespace(t)
	c := clients.direct.NetworkV1alpha1().NetworkAttachments(ns)
	mustCreateSubnet(t, clients.direct, newSubnet(ns, "s1", "10.90.0.0/16", 90))
	a := newAttachment(ns, "a1", "node-1", "s1")
	a.Spec.PostCreateExec = []string{"/bin/true"}
	att := mustCreateAttachment(t, clients.direct, a)
	target := "networkattachment/" + att.Name

	// writeStatus writes the status change makes and checks the Ready
	// condition that results.
	writeStatus := func(step string, change func(*v1alpha1.NetworkAttachmentStatus), status metav1.ConditionStatus, reason string) {
		t.Helper()
		upd := att.DeepCopy()
		change(&upd.Status)
		got, err := c.UpdateStatus(ctx, upd, metav1.UpdateOptions{})
		if err != nil {
			t.Fatalf("%s: writing the status: %v", step, err)
		}
		att = got
		checkReady(t, step, att, status, reason)
	}
	checkReady(t, "created", att, metav1.ConditionFalse, v1alpha1.ReasonNoAddress)

	// Not ready: kubectl wait gives up.
	start := time.Now()
	out, err := runKubectl(testenv.Shared(t).Kubeconfig, "-n", ns, "wait", "--for=condition=Ready", "--timeout=2s", target)
	if err == nil || !strings.Contains(err.Error(), "timed out") {
		t.Errorf("kubectl wait on an attachment without an address: got %q, %v; want a time-out", out, err)
	}
	t.Logf("kubectl wait on an attachment that is not ready returned after %v", time.Since(start).Round(time.Millisecond))

	writeStatus("subnet not validated", func(st *v1alpha1.NetworkAttachmentStatus) {
		st.Errors.IPAM = []string{v1alpha1.IPAMErrorSubnetNotValidated}
	}, metav1.ConditionFalse, v1alpha1.ReasonSubnetNotValidated)
	writeStatus("address", func(st *v1alpha1.NetworkAttachmentStatus) {
		st.Errors.IPAM = nil
		st.IPv4, st.AddressVNI, st.LockUID = "10.90.0.5", 90, "u1"
		st.SubnetCreationTime = &metav1.Time{Time: time.Now()}
	}, metav1.ConditionFalse, v1alpha1.ReasonNotImplemented)
	mac := v1alpha1.MACAddress(90, netip.MustParseAddr("10.90.0.5"))
	writeStatus("interface", func(st *v1alpha1.NetworkAttachmentStatus) {
		st.MACAddress, st.IfcName, st.HostIP, st.MTU = mac.String(), v1alpha1.InterfaceName(mac), "192.168.9.1", 1450
	}, metav1.ConditionFalse, v1alpha1.ReasonExecPending)

	// kubectl wait, started while the exec is pending, returns once its
	// report makes the attachment ready.
	cmd := exec.Command("kubectl", "--kubeconfig="+testenv.Shared(t).Kubeconfig, "-n", ns, "wait", "--for=condition=Ready", "--timeout=30s", target)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting kubectl wait: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		t.Fatalf("kubectl wait returned before the attachment was ready: %v\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
	case <-time.After(2 * time.Second): // kubectl has read the attachment and watches it
	}
	writeStatus("exec report", func(st *v1alpha1.NetworkAttachmentStatus) {
		now := metav1.Now()
		st.PostCreateExecReport = &v1alpha1.ExecReport{Command: []string{"/bin/true"}, StartTime: now, StopTime: now}
	}, metav1.ConditionTrue, v1alpha1.ReasonReady)
	written := time.Now()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("kubectl wait on a ready attachment: %v\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
		}
		if want := fmt.Sprintf("networkattachment.network.example.com/%s condition met", att.Name); !strings.Contains(stdout.String(), want) {
			t.Errorf("kubectl wait said %q, want %q", stdout.String(), want)
		}
		t.Logf("kubectl wait returned %v after the write that made the attachment ready", time.Since(written).Round(time.Millisecond))
	case <-time.After(30 * time.Second):
		t.Fatalf("kubectl wait did not return within 30s of the attachment becoming ready")
	}

	// The address goes: the attachment is not ready any more, and kubectl
	// wait times out again.
	writeStatus("address cleared", func(st *v1alpha1.NetworkAttachmentStatus) {
		st.IPv4, st.AddressVNI, st.LockUID, st.SubnetCreationTime = "", 0, "", nil
		st.Errors.IPAM = []string{"Referenced subnet does not exist"}
	}, metav1.ConditionFalse, v1alpha1.ReasonNoAddress)
	if out, err := runKubectl(testenv.Shared(t).Kubeconfig, "-n", ns, "wait", "--for=condition=Ready", "--timeout=2s", target); err == nil {
		t.Errorf("kubectl wait on an attachment without an address returned %q, want a time-out", out)
	}
}

// checkReady checks the Ready condition of att after step.
func checkReady(t *testing.T, step string, att *v1alpha1.NetworkAttachment, status metav1.ConditionStatus, reason string) {
	t.Helper()
	c := meta.FindStatusCondition(att.Status.Conditions, v1alpha1.NetworkAttachmentReady)
	switch {
	case c == nil:
		t.Errorf("%s: no Ready condition in %+v", step, att.Status.Conditions)
	case c.Status != status || c.Reason != reason || c.ObservedGeneration != att.Generation:
		t.Errorf("%s: Ready condition %+v, want status %s, reason %s, observedGeneration %d", step, *c, status, reason, att.Generation)
	}
}
