package agent

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
)

func TestNewlyRemote(t *testing.T) {
	r := func(owner string) placement { return placement{kind: remote, hostIP: hostA, owner: owner} }
	for _, tc := range []struct {
		name     string
		had, now placement
		want     bool
	}{
		{"new address", placement{}, r("ns/x"), true},
		{"after a failed operation", placement{kind: unknown, owner: "ns/x"}, r("ns/x"), true},
		{"replaces a local attachment", placement{kind: local, owner: "ns/l"}, r("ns/x"), true},
		{"another attachment takes the address", r("ns/y"), r("ns/x"), true},
		{"flows reprogrammed", r("ns/x"), r("ns/x"), false},
		{"moved to another host", r("ns/x"), placement{kind: remote, hostIP: hostB, owner: "ns/x"}, false},
		{"an orphan", placement{}, placement{kind: remote, hostIP: hostA}, false},
		{"local", placement{}, placement{kind: local, owner: "ns/x"}, false},
		{"gone", r("ns/x"), placement{}, false},
	} {
		if got := newlyRemote(tc.had, tc.now); got != tc.want {
			t.Errorf("%s: newlyRemote(%+v, %+v) = %v, want %v", tc.name, tc.had, tc.now, got, tc.want)
		}
	}
}

func TestDissemination(t *testing.T) {
	base := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	withAddress := func(at time.Time) *v1alpha1.NetworkAttachment {
		return &v1alpha1.NetworkAttachment{ExtendedMetadata: v1alpha1.ExtendedObjectMeta{Writes: v1alpha1.WriteSet{
			{Section: v1alpha1.SectionSpec, ServerTime: metav1.NewMicroTime(at.Add(-time.Second))},
			{Section: v1alpha1.SectionAddress, ServerTime: metav1.NewMicroTime(at)},
		}}}
	}
	for _, tc := range []struct {
		name         string
		att          *v1alpha1.NetworkAttachment
		programmed   time.Time
		watchedSince time.Time
		watched      bool
		seconds      float64
		label        string
		ok           bool
	}{
		{"written while watched", withAddress(base), base.Add(1500 * time.Millisecond), base.Add(-time.Minute), true, 1.5, writtenWhileWatched, true},
		{"written as the watch began", withAddress(base), base.Add(20 * time.Millisecond), base, true, 0.02, writtenWhileWatched, true},
		{"written before the watch", withAddress(base), base.Add(time.Hour), base.Add(time.Minute), true, 3600, writtenBeforeWatched, true},
		{"network no longer watched", withAddress(base), base.Add(time.Second), time.Time{}, false, 1, writtenBeforeWatched, true},
		{"server clock ahead", withAddress(base), base.Add(-time.Second), base.Add(-time.Minute), true, 0, writtenWhileWatched, true},
		{"no address write", &v1alpha1.NetworkAttachment{}, base, base, true, 0, "", false},
	} {
		seconds, label, ok := dissemination(tc.att, tc.programmed, tc.watchedSince, tc.watched)
		if seconds != tc.seconds || label != tc.label || ok != tc.ok {
			t.Errorf("%s: dissemination = %v, %q, %v; want %v, %q, %v", tc.name, seconds, label, ok, tc.seconds, tc.label, tc.ok)
		}
	}
}
