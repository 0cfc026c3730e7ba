package apicheck

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kos-sdn/kos/channels"
)

// TestIntegrationPlanSelectsVariant plans the bootstrap channel, alone and
// after the local channel, on each server with channels' own selection, and
// checks the release it picks for each addon.
func TestIntegrationPlanSelectsVariant(t *testing.T) {
	servers := testServers(t)
	ctx := context.Background()
	bootstrap := filepath.Join(repoRoot, "bootstrap-channel.yaml")
	local := filepath.Join(repoRoot, "addons", "local-channel.yaml")
	tests := []struct {
		name     string
		channels []string
		// want maps each server's minor version to the id picked for each
		// addon.
		want map[uint64]map[string]string
	}{
		{
			name:     "bootstrap",
			channels: []string{bootstrap},
			want: map[uint64]map[string]string{
				37: {"kos-agent": "k8s-1.30", "kos-apiserver": "k8s-1.30", "kos-controller-manager": "k8s-1.29", "kos-etcd": "k8s-1.29"},
				30: {"kos-agent": "k8s-1.30", "kos-apiserver": "k8s-1.30", "kos-controller-manager": "k8s-1.29", "kos-etcd": "k8s-1.29"},
				29: {"kos-agent": "k8s-1.29", "kos-apiserver": "k8s-1.29", "kos-controller-manager": "k8s-1.29", "kos-etcd": "k8s-1.29"},
			},
		},
		{
			name:     "local then bootstrap",
			channels: []string{local, bootstrap},
			want: map[uint64]map[string]string{
				37: {"kos-agent": "k8s-1.30-userspace", "kos-apiserver": "k8s-1.30", "kos-controller-manager": "k8s-1.29", "kos-etcd": "k8s-1.29-single-node"},
				30: {"kos-agent": "k8s-1.30-userspace", "kos-apiserver": "k8s-1.30", "kos-controller-manager": "k8s-1.29", "kos-etcd": "k8s-1.29-single-node"},
				29: {"kos-agent": "k8s-1.29-userspace", "kos-apiserver": "k8s-1.29", "kos-controller-manager": "k8s-1.29", "kos-etcd": "k8s-1.29-single-node"},
			},
		},
	}
	for _, tt := range tests {
		var releases []*channels.Addon
		fetcher := channels.NewFetcher()
		for _, ch := range tt.channels {
			loaded, err := channels.Load(ctx, fetcher, ch)
			if err != nil {
				t.Fatalf("loading %s: %v", ch, err)
			}
			releases = append(releases, loaded...)
		}
		for _, s := range servers {
			t.Run(tt.name+"/"+s.String(), func(t *testing.T) {
				want, ok := tt.want[s.version.Minor]
				if !ok {
					t.Fatalf("no expectation for Kubernetes %s", s)
				}
				client, err := channels.NewClient(s.env.RESTConfig)
				if err != nil {
					t.Fatal(err)
				}
				plan, err := client.Plan(ctx, releases)
				if err != nil {
					t.Fatalf("Plan: %v", err)
				}
				got := map[string]string{}
				for _, it := range plan.Items {
					got[it.Addon.Name] = it.Addon.ID
					if !it.Decision.Apply {
						t.Errorf("%s: the plan does not apply it on a cluster without KOS (%s)", it.Addon.Name, it.Decision.Reason)
					}
					if _, err := fetcher.FetchManifest(ctx, it.Addon); err != nil {
						t.Errorf("%s: %v", it.Addon.Name, err)
					}
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("releases picked on Kubernetes %s (-want +got):\n%s", s, diff)
				}
			})
		}
	}
}

// TestIntegrationVariantBoundary checks the reason for the k8s-1.29 release
// of kos-apiserver on the servers themselves: Kubernetes 1.29 does not serve
// admissionregistration.k8s.io/v1 ValidatingAdmissionPolicies, which the
// admission plugin of k8s.io/apiserver reads, and 1.30 and newer do.
func TestIntegrationVariantBoundary(t *testing.T) {
	servers := testServers(t)
	for _, s := range servers {
		t.Run(s.String(), func(t *testing.T) {
			list, err := s.kube.Discovery().ServerResourcesForGroupVersion("admissionregistration.k8s.io/v1")
			if err != nil {
				t.Fatalf("discovery: %v", err)
			}
			var served []string
			for _, r := range list.APIResources {
				served = append(served, r.Name)
			}
			want := s.version.Minor >= 30
			for _, r := range []string{"validatingadmissionpolicies", "validatingadmissionpolicybindings"} {
				if got := slices.Contains(served, r); got != want {
					t.Errorf("Kubernetes %s serves admissionregistration.k8s.io/v1 %s: %t, want %t (the kubernetesVersion ranges of kos-apiserver's releases assume it)", s, r, got, want)
				}
			}
		})
	}
}
