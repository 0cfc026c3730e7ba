package network

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Time returns when section was last written and whether it ever was.
func (ws WriteSet) Time(section string) (metav1.MicroTime, bool) {
	for _, w := range ws {
		if w.Section == section {
			return w.ServerTime, true
		}
	}
	return metav1.MicroTime{}, false
}

// Stamp returns a copy of ws in which section was written at now. The new time is
// now at microsecond precision, or one microsecond after the section's previous
// time if that is not earlier, so that a section's time strictly increases with
// every change even when the clock is coarse or steps back. ws itself is never
// modified: it may belong to an object in the server's cache.
func (ws WriteSet) Stamp(section string, now time.Time) WriteSet {
	t := now.Truncate(time.Microsecond)
	out := make(WriteSet, 0, len(ws)+1)
	found := false
	for _, w := range ws {
		if w.Section == section {
			if !w.ServerTime.Time.Before(t) {
				t = w.ServerTime.Time.Add(time.Microsecond)
			}
			w.ServerTime = metav1.NewMicroTime(t)
			found = true
		}
		out = append(out, w)
	}
	if !found {
		out = append(out, ObjectWrite{Section: section, ServerTime: metav1.NewMicroTime(t)})
	}
	return out
}
