package apicheck

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestEndMinors checks which minors a range's checks must run on: which
// servers startServers starts follows from it.
func TestEndMinors(t *testing.T) {
	for _, tc := range []struct {
		kubernetesVersion string
		want              []uint64
		wantErr           bool
	}{
		{">=1.29.0 <1.38.0", []uint64{29, 37}, false},
		{">=1.30.0 <1.39.0", []uint64{30, 38}, false},
		{">=1.38.0 <1.39.0", []uint64{38}, false},
		{">=1.29.0", []uint64{29}, false},
		{"<1.0.0", nil, true},
		{"not a range", nil, true},
	} {
		t.Run(tc.kubernetesVersion, func(t *testing.T) {
			got, err := endMinors(tc.kubernetesVersion)
			if (err != nil) != tc.wantErr {
				t.Fatalf("endMinors(%q) error %v, want an error: %v", tc.kubernetesVersion, err, tc.wantErr)
			}
			if diff := cmp.Diff(got, tc.want); diff != "" {
				t.Errorf("endMinors(%q) (-got +want):\n%s", tc.kubernetesVersion, diff)
			}
		})
	}
}
