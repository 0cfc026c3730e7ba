package apiserver

import (
	"testing"

	"github.com/spf13/pflag"
	mutatingadmissionpolicy "k8s.io/apiserver/pkg/admission/plugin/policy/mutating"

	"github.com/kos-sdn/kos/components/apiserver/admission/noderestriction"
	"github.com/kos-sdn/kos/components/apiserver/admission/quota"
)

func TestPluginEnabled(t *testing.T) {
	tests := []struct {
		args   []string
		plugin string
		want   bool
	}{
		{nil, noderestriction.PluginName, true},
		{nil, quota.PluginName, true},
		{nil, mutatingadmissionpolicy.PluginName, false},
		{[]string{"--disable-admission-plugins=ValidatingAdmissionPolicy,NodeRestriction"}, noderestriction.PluginName, false},
		{[]string{"--disable-admission-plugins=ResourceQuota"}, noderestriction.PluginName, true},
		{[]string{"--enable-admission-plugins=MutatingAdmissionPolicy"}, mutatingadmissionpolicy.PluginName, true},
		{nil, "NoSuchPlugin", false},
	}
	for _, tc := range tests {
		o := NewOptions()
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		for _, set := range o.Flags().FlagSets {
			fs.AddFlagSet(set)
		}
		if err := fs.Parse(tc.args); err != nil {
			t.Fatalf("parsing %q: %v", tc.args, err)
		}
		if got := pluginEnabled(o.Recommended.Admission, tc.plugin); got != tc.want {
			t.Errorf("pluginEnabled(%q) with %q = %v, want %v", tc.plugin, tc.args, got, tc.want)
		}
	}
}
