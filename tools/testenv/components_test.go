package testenv

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseComponents(t *testing.T) {
	tests := []struct {
		names    []string
		want     components
		wantBins []string
		wantErr  string
	}{
		{names: nil, wantBins: []string{"etcd", "kube-apiserver"}},
		{
			names:    []string{KubeScheduler, KubeControllerManager},
			want:     components{controllerManager: true, scheduler: true},
			wantBins: []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"},
		},
		{
			names:    []string{KubeControllerManager},
			want:     components{controllerManager: true},
			wantBins: []string{"etcd", "kube-apiserver", "kube-controller-manager"},
		},
		{names: []string{"kube-dns", "etcd"}, wantErr: `unknown component "kube-dns"`},
		{names: []string{"kubelet"}, wantErr: "nodes are tools/cluster's"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.names, ","), func(t *testing.T) {
			got, err := parseComponents(tt.names)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parseComponents: got error %v, want one saying %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("parseComponents: got %+v, want %+v", got, tt.want)
			}
			if diff := cmp.Diff(tt.wantBins, got.binaries()); diff != "" {
				t.Errorf("binaries (-want +got):\n%s", diff)
			}
		})
	}
}
