package cli

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestParseNodeLabels(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		in         string
		wantValues map[string]string
		wantKeys   []string
		wantErr    bool
	}{
		{name: "empty", in: "", wantValues: map[string]string{}},
		{name: "kOps's control-plane label", in: "node-role.kubernetes.io/control-plane", wantValues: map[string]string{}, wantKeys: []string{"node-role.kubernetes.io/control-plane"}},
		{
			name:       "kOps's split control plane",
			in:         "node-role.kops.k8s.io/cloud-controller-manager,node-role.kops.k8s.io/kops-channel,node-role.kops.k8s.io/kops-controller",
			wantValues: map[string]string{},
			wantKeys:   []string{"node-role.kops.k8s.io/cloud-controller-manager", "node-role.kops.k8s.io/kops-channel", "node-role.kops.k8s.io/kops-controller"},
		},
		{name: "an empty value is a value", in: "node-role.kubernetes.io/control-plane=", wantValues: map[string]string{"node-role.kubernetes.io/control-plane": ""}},
		{
			name:       "keys and pairs, with spaces",
			in:         "a=1, node-role.kubernetes.io/control-plane ,kops.k8s.io/instancegroup=cp-1",
			wantValues: map[string]string{"a": "1", "kops.k8s.io/instancegroup": "cp-1"},
			wantKeys:   []string{"node-role.kubernetes.io/control-plane"},
		},
		{name: "two equals signs", in: "a=b=c", wantErr: true},
		{name: "a key twice", in: "a,a=1", wantErr: true},
		{name: "a bad key", in: "-a", wantErr: true},
		{name: "a bad value", in: "a=b c", wantErr: true},
		{name: "no key", in: "=b", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			values, keys, err := parseNodeLabels(tc.in)
			if gotErr := err != nil; gotErr != tc.wantErr {
				t.Fatalf("parseNodeLabels(%q) error = %v, want error %v", tc.in, err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if diff := cmp.Diff(values, tc.wantValues); diff != "" {
				t.Errorf("values (-got +want):\n%s", diff)
			}
			if diff := cmp.Diff(keys, tc.wantKeys, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("keys (-got +want):\n%s", diff)
			}
		})
	}
}
