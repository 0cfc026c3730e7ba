package network

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestWriteSetStamp(t *testing.T) {
	t0 := time.Date(2025, 1, 2, 3, 4, 5, 6_007_008, time.UTC)
	mt := func(t time.Time) metav1.MicroTime { return metav1.NewMicroTime(t) }
	tests := []struct {
		name    string
		ws      WriteSet
		section string
		now     time.Time
		want    WriteSet
	}{
		{
			name:    "first write truncates to microseconds",
			section: SectionSpec,
			now:     t0,
			want:    WriteSet{{Section: SectionSpec, ServerTime: mt(t0.Truncate(time.Microsecond))}},
		},
		{
			name:    "new section is appended, others kept",
			ws:      WriteSet{{Section: SectionSpec, ServerTime: mt(t0)}},
			section: SectionAddress,
			now:     t0.Add(time.Second),
			want: WriteSet{
				{Section: SectionSpec, ServerTime: mt(t0)},
				{Section: SectionAddress, ServerTime: mt(t0.Add(time.Second).Truncate(time.Microsecond))},
			},
		},
		{
			name:    "existing section advances in place",
			ws:      WriteSet{{Section: SectionSpec, ServerTime: mt(t0)}, {Section: SectionImpl, ServerTime: mt(t0)}},
			section: SectionSpec,
			now:     t0.Add(time.Millisecond),
			want: WriteSet{
				{Section: SectionSpec, ServerTime: mt(t0.Add(time.Millisecond).Truncate(time.Microsecond))},
				{Section: SectionImpl, ServerTime: mt(t0)},
			},
		},
		{
			name:    "same microsecond still advances",
			ws:      WriteSet{{Section: SectionStatus, ServerTime: mt(t0.Truncate(time.Microsecond))}},
			section: SectionStatus,
			now:     t0.Add(100 * time.Nanosecond),
			want:    WriteSet{{Section: SectionStatus, ServerTime: mt(t0.Truncate(time.Microsecond).Add(time.Microsecond))}},
		},
		{
			name:    "clock stepping back still advances",
			ws:      WriteSet{{Section: SectionStatus, ServerTime: mt(t0)}},
			section: SectionStatus,
			now:     t0.Add(-time.Hour),
			want:    WriteSet{{Section: SectionStatus, ServerTime: mt(t0.Add(time.Microsecond))}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.ws.DeepCopy()
			got := tc.ws.Stamp(tc.section, tc.now)
			if diff := cmp.Diff(got, tc.want); diff != "" {
				t.Errorf("Stamp() mismatch (-got +want):\n%s", diff)
			}
			if diff := cmp.Diff(tc.ws, before); diff != "" {
				t.Errorf("Stamp() modified its receiver (-got +want):\n%s", diff)
			}
			gotTime, ok := got.Time(tc.section)
			wantTime, _ := tc.want.Time(tc.section)
			if !ok || !gotTime.Equal(&wantTime) {
				t.Errorf("Time(%q) = %v, %v; want %v, true", tc.section, gotTime, ok, wantTime)
			}
		})
	}
}
