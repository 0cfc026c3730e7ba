package fabric

import (
	"testing"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
)

// TestMTUBoundsMatchTheAPI checks that the fabric's MTU arithmetic is the
// API's: kos-controller-manager computes the overlay MTU that agents apply
// with v1alpha1's, and kos-apiserver validates it with them.
func TestMTUBoundsMatchTheAPI(t *testing.T) {
	for _, c := range []struct {
		name           string
		fabric, apiVal int
	}{
		{"VXLANOverhead", VXLANOverhead, v1alpha1.VXLANOverhead},
		{"MinMTU", MinMTU, v1alpha1.MinOverlayMTU},
		{"MaxMTU", MaxMTU, v1alpha1.MaxOverlayMTU},
	} {
		if c.fabric != c.apiVal {
			t.Errorf("fabric.%s is %d, the API's is %d", c.name, c.fabric, c.apiVal)
		}
	}
}

func TestAttachmentMTU(t *testing.T) {
	tests := []struct {
		name     string
		underlay int
		want     int
		wantErr  string
	}{
		{name: "Ethernet", underlay: 1500, want: 1450},
		{name: "jumbo frames", underlay: 9000, want: 8950},
		{name: "the largest", underlay: MaxMTU + VXLANOverhead, want: MaxMTU},
		{name: "the smallest", underlay: MinMTU + VXLANOverhead, want: MinMTU},
		{name: "IPv4's minimum underlay", underlay: 576, wantErr: "underlay MTU 576 leaves 526 for attachments: MTU 526 is not in [576,9216]"},
		{name: "loopback", underlay: 65536, wantErr: "underlay MTU 65536 leaves 65486 for attachments: MTU 65486 is not in [576,9216]"},
		{name: "unknown", underlay: 0, wantErr: "underlay MTU 0 leaves -50 for attachments: MTU -50 is not in [576,9216]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := AttachmentMTU(tt.underlay)
			var gotErr string
			if err != nil {
				gotErr = err.Error()
			}
			if got != tt.want || gotErr != tt.wantErr {
				t.Errorf("AttachmentMTU(%d) = %d, %q; want %d, %q", tt.underlay, got, gotErr, tt.want, tt.wantErr)
			}
		})
	}
}
