package networkconfig

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kos-sdn/kos/components/apis/network"
)

func ptr(v int32) *int32 { return &v }

func config(mtu, port int32, labels map[string]string) *network.NetworkConfig {
	return &network.NetworkConfig{
		ObjectMeta: metav1.ObjectMeta{Name: "cluster", ResourceVersion: "1", Generation: 1, Labels: labels},
		Spec:       network.NetworkConfigSpec{OverlayMTU: ptr(mtu), TunnelPort: ptr(port)},
		Status:     network.NetworkConfigStatus{OverlayMTU: 1450, TunnelPort: 4789},
	}
}

func TestValidateUpdateCountsAttachmentsOnSpecChange(t *testing.T) {
	tests := []struct {
		name      string
		cfg       *network.NetworkConfig
		count     int
		countErr  error
		wantAsked bool
		want      []string
	}{
		{"label edit: not counted", config(1450, 4789, map[string]string{"a": "b"}), 5, nil, false, nil},
		{"MTU change, no attachments", config(1400, 4789, nil), 0, nil, true, nil},
		{"MTU change, attachments", config(1400, 4789, nil), 2, nil, true, []string{
			`spec.overlayMTU: Forbidden: may not change from 1450, the value applied, to 1400 while 2 NetworkAttachments exist: interfaces that exist keep the old MTU until their pods are re-created, and packets larger than the smaller MTU between them are lost; to change it anyway, set the annotation network.example.com/force-unsafe-change: "true" in the same update (docs/install.md, "Network configuration")`,
		}},
		{"counting fails", config(1400, 4789, nil), 0, errors.New("etcd down"), true, []string{
			"spec: Internal error: etcd down",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			asked := false
			s := newStrategy(runtime.NewScheme(), clocktesting.NewFakePassiveClock(time.Now()), func(context.Context) (int, error) {
				asked = true
				return tc.count, tc.countErr
			})
			old := config(1450, 4789, nil)
			s.PrepareForUpdate(context.Background(), tc.cfg, old)
			var got []string
			for _, err := range s.ValidateUpdate(context.Background(), tc.cfg, old) {
				got = append(got, err.Error())
			}
			if diff := cmp.Diff(got, tc.want); diff != "" {
				t.Errorf("ValidateUpdate (-got +want):\n%s", diff)
			}
			if asked != tc.wantAsked {
				t.Errorf("attachments counted: %t, want %t", asked, tc.wantAsked)
			}
		})
	}
}

func TestPrepareForUpdate(t *testing.T) {
	s := newStrategy(runtime.NewScheme(), clocktesting.NewFakePassiveClock(time.Now()), nil)
	old := config(1450, 4789, nil)

	t.Run("main endpoint keeps the status and moves the generation on a spec change", func(t *testing.T) {
		cfg := config(1400, 4789, nil)
		cfg.Status = network.NetworkConfigStatus{OverlayMTU: 9000}
		s.PrepareForUpdate(context.Background(), cfg, old)
		if diff := cmp.Diff(cfg.Status, old.Status); diff != "" {
			t.Errorf("status (-got +want):\n%s", diff)
		}
		if cfg.Generation != 2 {
			t.Errorf("generation %d, want 2", cfg.Generation)
		}
	})
	t.Run("status endpoint keeps the spec, labels and generation", func(t *testing.T) {
		cfg := config(1400, 4789, map[string]string{"a": "b"})
		cfg.Generation = 7
		cfg.Status = network.NetworkConfigStatus{OverlayMTU: 1400, TunnelPort: 4789}
		statusStrategy{s}.PrepareForUpdate(context.Background(), cfg, old)
		want := config(1450, 4789, nil)
		want.Status = network.NetworkConfigStatus{OverlayMTU: 1400, TunnelPort: 4789}
		if diff := cmp.Diff(cfg.Spec, want.Spec); diff != "" {
			t.Errorf("spec (-got +want):\n%s", diff)
		}
		if cfg.Generation != 1 || cfg.Labels != nil {
			t.Errorf("generation %d, labels %v; want 1 and none", cfg.Generation, cfg.Labels)
		}
		if _, ok := cfg.ExtendedMetadata.Writes.Time(network.SectionStatus); !ok {
			t.Errorf("status section not stamped: %v", cfg.ExtendedMetadata.Writes)
		}
	})
}
