package podnetwork

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParsePluginConfig(t *testing.T) {
	tests := []struct {
		name     string
		config   string
		want     PluginConfig
		wantKOS  bool
		wantErrs []string
	}{
		{"kos", `{"cniVersion":"1.0.0","type":"kos","subnet":"blue"}`, PluginConfig{CNIVersion: "1.0.0", Type: "kos", Subnet: "blue"}, true, nil},
		{"kos first in a list", `{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"kos","subnet":"blue"},{"type":"tuning"}]}`,
			PluginConfig{CNIVersion: "1.0.0", Type: "kos", Subnet: "blue"}, true, nil},
		{"another plugin", `{"cniVersion":"0.3.1","type":"macvlan","master":"eth0"}`, PluginConfig{CNIVersion: "0.3.1", Type: "macvlan"}, false, nil},
		{"another plugin's list", `{"cniVersion":"1.0.0","plugins":[{"type":"bridge"}]}`, PluginConfig{CNIVersion: "1.0.0", Type: "bridge"}, false, nil},
		{"empty: a file on the node", "", PluginConfig{}, false, nil},
		{"malformed", `{"type":"kos",`, PluginConfig{}, false, []string{"parsing the CNI configuration"}},
		{"no subnet", `{"cniVersion":"1.0.0","type":"kos"}`, PluginConfig{CNIVersion: "1.0.0", Type: "kos"}, true, []string{`has no "subnet"`}},
		{"kos 0.3.1", `{"cniVersion":"0.3.1","type":"kos","subnet":"blue"}`, PluginConfig{CNIVersion: "0.3.1", Type: "kos", Subnet: "blue"}, true, nil},
		{"kos 0.4.0 list", `{"cniVersion":"0.4.0","plugins":[{"type":"kos","subnet":"blue"}]}`, PluginConfig{CNIVersion: "0.4.0", Type: "kos", Subnet: "blue"}, true, nil},
		{"kos 1.1.0", `{"cniVersion":"1.1.0","type":"kos","subnet":"blue"}`, PluginConfig{CNIVersion: "1.1.0", Type: "kos", Subnet: "blue"}, true, nil},
		{"kos 0.2.0", `{"cniVersion":"0.2.0","type":"kos","subnet":"blue"}`, PluginConfig{CNIVersion: "0.2.0", Type: "kos", Subnet: "blue"}, true, []string{`cniVersion "0.2.0" is not one kos-cni speaks (0.3.1, 0.4.0, 1.0.0, 1.1.0)`}},
		{"kos 2.0.0", `{"cniVersion":"2.0.0","type":"kos","subnet":"blue"}`, PluginConfig{CNIVersion: "2.0.0", Type: "kos", Subnet: "blue"}, true, []string{`cniVersion "2.0.0" is not one`}},
		{"kos without cniVersion", `{"type":"kos","subnet":"blue"}`, PluginConfig{Type: "kos", Subnet: "blue"}, true, []string{`cniVersion "" is not one`}},
		{"bad subnet", `{"cniVersion":"1.0.0","type":"kos","subnet":"Blue_1"}`, PluginConfig{CNIVersion: "1.0.0", Type: "kos", Subnet: "Blue_1"}, true, []string{`subnet "Blue_1" is not a valid Subnet name`}},
		{"subnet of the wrong type", `{"type":"kos","subnet":5}`, PluginConfig{}, false, []string{"parsing the CNI configuration"}},
		{"empty list", `{"plugins":[]}`, PluginConfig{}, false, []string{"has no plugins"}},
		{"kos later in a list", `{"plugins":[{"type":"bridge"},{"type":"kos","subnet":"blue"}]}`, PluginConfig{}, false, []string{"plugin 2", "must be the first"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParsePluginConfig(tc.config)
			if diff := cmp.Diff(got, tc.want); diff != "" {
				t.Errorf("config (-got +want):\n%s", diff)
			}
			if got.IsKOS() != tc.wantKOS {
				t.Errorf("IsKOS() = %v, want %v", got.IsKOS(), tc.wantKOS)
			}
			checkErr(t, err, tc.wantErrs)
		})
	}
}
