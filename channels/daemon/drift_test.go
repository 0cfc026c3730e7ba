package daemon

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestFingerprint(t *testing.T) {
	t.Parallel()
	base := func() *metav1.ObjectMeta {
		return &metav1.ObjectMeta{UID: "u1", ResourceVersion: "10", Generation: 3, Labels: map[string]string{"a": "1"}, Annotations: map[string]string{"b": "2"}}
	}
	want := fingerprint(base())
	same := []func(m *metav1.ObjectMeta){
		func(m *metav1.ObjectMeta) { m.ResourceVersion = "11" }, // a status update
	}
	differ := []func(m *metav1.ObjectMeta){
		func(m *metav1.ObjectMeta) { m.Generation = 4 },
		func(m *metav1.ObjectMeta) { m.Labels["a"] = "2" },
		func(m *metav1.ObjectMeta) { m.Annotations["c"] = "" },
		func(m *metav1.ObjectMeta) { m.UID = "u2" },
		func(m *metav1.ObjectMeta) { m.Labels = map[string]string{"a1": ""}; m.Annotations = nil },
	}
	for i, change := range same {
		m := base()
		change(m)
		if got := fingerprint(m); got != want {
			t.Errorf("same %d: fingerprint %q, want %q", i, got, want)
		}
	}
	for i, change := range differ {
		m := base()
		change(m)
		if got := fingerprint(m); got == want {
			t.Errorf("differ %d: fingerprint unchanged", i)
		}
	}
	// Without a generation, the resourceVersion is what counts.
	a := &metav1.ObjectMeta{UID: "u1", ResourceVersion: "10"}
	b := &metav1.ObjectMeta{UID: "u1", ResourceVersion: "11"}
	if fingerprint(a) == fingerprint(b) {
		t.Error("objects without a generation: a new resourceVersion leaves the fingerprint")
	}
}

func TestIsPerson(t *testing.T) {
	t.Parallel()
	for manager, want := range map[string]bool{
		"kubectl": true, "kubectl-edit": true, "kubectl-patch": true, "kubectl-client-side-apply": true, "kubectl-scale": true, "k9s": true,
		"kube-controller-manager": false, "cainjector": false, "channels": false, "kops": false, "": false,
	} {
		if got := IsPerson(manager); got != want {
			t.Errorf("IsPerson(%q) = %v, want %v", manager, got, want)
		}
	}
}

func TestConflictOwners(t *testing.T) {
	t.Parallel()
	err := &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: 409, Reason: metav1.StatusReasonConflict,
		Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{
			{Type: metav1.CauseTypeFieldManagerConflict, Message: `conflict with "kubectl-edit" using apps/v1`, Field: `.spec.template.spec.containers[name="c"].image`},
			{Type: metav1.CauseTypeFieldManagerConflict, Message: `conflict with "kube-controller-manager" with subresource "scale" using apps/v1`, Field: ".spec.replicas"},
		}},
	}}
	got, perr := conflictOwners(err)
	if perr != nil {
		t.Fatal(perr)
	}
	want := []fieldOwner{
		{Manager: "kubectl-edit", Field: `.spec.template.spec.containers[name="c"].image`},
		{Manager: "kube-controller-manager", Field: ".spec.replicas"},
	}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("conflictOwners (-got +want):\n%s", diff)
	}
	if got := describeOwners(got); got != `kube-controller-manager: .spec.replicas; kubectl-edit: .spec.template.spec.containers[name="c"].image` {
		t.Errorf("describeOwners = %q", got)
	}
	if _, err := conflictOwners(apierrors.NewConflict(schema.GroupResource{Resource: "x"}, "y", errors.New("z"))); err == nil {
		t.Error("conflictOwners of a conflict without causes: no error")
	}
}
