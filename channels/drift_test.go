package channels

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestFingerprint(t *testing.T) {
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
