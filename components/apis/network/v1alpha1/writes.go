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
