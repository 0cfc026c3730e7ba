package subnet

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

func subnet(ns, name, cidr string, vni uint32) *network.Subnet {
	return &network.Subnet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       network.SubnetSpec{IPv4: cidr, VNI: vni},
	}
}

func TestValidateChecksRivals(t *testing.T) {
	tests := []struct {
		name    string
		subnet  *network.Subnet
		rivals  []*network.Subnet
		listErr error
		wantVNI uint32 // the VNI the rivals were asked for; 0 when not asked
		want    []string
	}{
		{"no rivals", subnet("ns", "s", "10.0.0.0/24", 5), nil, nil, 5, nil},
		{"overlap", subnet("ns", "s", "10.0.0.0/24", 5), []*network.Subnet{subnet("ns", "r", "10.0.0.0/16", 5)}, nil, 5,
			[]string{`spec.ipv4: Invalid value: "10.0.0.0/24": CIDR overlaps with ns/r's (10.0.0.0/16)`}},
		{"listing fails: best effort", subnet("ns", "s", "10.0.0.0/24", 5), nil, errors.New("cache not ready"), 5, nil},
		{"invalid subnet: rivals not asked", subnet("ns", "s", "8.8.8.0/24", 5), nil, nil, 0,
			[]string{`spec.ipv4: Invalid value: "8.8.8.0/24": must lie inside one RFC 1918 range (10.0.0.0/8, 172.16.0.0/12 or 192.168.0.0/16)`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStrategy(runtime.NewScheme(), clocktesting.NewFakePassiveClock(time.Now()))
			var askedVNI uint32
			s.rivals = func(_ context.Context, vni uint32) ([]*network.Subnet, error) {
				askedVNI = vni
				return tc.rivals, tc.listErr
			}
			var got []string
			for _, err := range s.Validate(context.Background(), tc.subnet) {
				got = append(got, err.Error())
			}
			if diff := cmp.Diff(got, tc.want); diff != "" {
				t.Errorf("Validate (-got +want):\n%s", diff)
			}
			if askedVNI != tc.wantVNI {
				t.Errorf("rivals asked for VNI %d, want %d", askedVNI, tc.wantVNI)
			}
		})
	}
}

func TestStatusUpdate(t *testing.T) {
	t0 := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	t1 := t0.Add(time.Second)
	specWrite := network.ObjectWrite{Section: network.SectionSpec, ServerTime: metav1.NewMicroTime(t0)}
	old := subnet("ns", "s", "10.0.0.0/24", 5)
	old.ExtendedMetadata.Writes = network.WriteSet{specWrite}
	s := statusStrategy{newStrategy(runtime.NewScheme(), clocktesting.NewFakePassiveClock(t1))}

	got := old.DeepCopy()
	got.Spec.VNI = 6
	got.Status.Validated = true
	s.PrepareForUpdate(context.Background(), got, old)
	want := old.DeepCopy()
	want.Status.Validated = true
	want.ExtendedMetadata.Writes = network.WriteSet{specWrite, {Section: network.SectionStatus, ServerTime: metav1.NewMicroTime(t1)}}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("PrepareForUpdate (-got +want):\n%s", diff)
	}

	unchanged := want.DeepCopy()
	s.PrepareForUpdate(context.Background(), unchanged, want)
	if diff := cmp.Diff(unchanged, want); diff != "" {
		t.Errorf("PrepareForUpdate without a change (-got +want):\n%s", diff)
	}
}
