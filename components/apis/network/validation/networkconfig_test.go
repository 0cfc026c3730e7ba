package validation

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kos-sdn/kos/components/apis/network"
)

func ptr(v int32) *int32 { return &v }

func networkConfig(name string, mtu, port *int32) *network.NetworkConfig {
	return &network.NetworkConfig{
		ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "1"},
		Spec:       network.NetworkConfigSpec{OverlayMTU: mtu, TunnelPort: port},
	}
}

func TestValidateNetworkConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  *network.NetworkConfig
		want []string
	}{
		{"all defaulted", networkConfig("cluster", nil, nil), nil},
		{"all set", networkConfig("cluster", ptr(1450), ptr(4789)), nil},
		{"smallest MTU", networkConfig("cluster", ptr(576), nil), nil},
		{"largest MTU", networkConfig("cluster", ptr(9216), nil), nil},
		{"MTU too small", networkConfig("cluster", ptr(575), nil), []string{"spec.overlayMTU: Invalid value: 575: must be in [576,9216]"}},
		{"MTU too large", networkConfig("cluster", ptr(9217), nil), []string{"spec.overlayMTU: Invalid value: 9217: must be in [576,9216]"}},
		{"port 0", networkConfig("cluster", nil, ptr(0)), []string{"spec.tunnelPort: Invalid value: 0: must be in [1,65535]"}},
		{"port 65536", networkConfig("cluster", nil, ptr(65536)), []string{"spec.tunnelPort: Invalid value: 65536: must be in [1,65535]"}},
		{"port 1", networkConfig("cluster", nil, ptr(1)), nil},
		{"another name and bad values", networkConfig("mine", ptr(100), ptr(-1)), []string{
			`metadata.name: Invalid value: "mine": must be "cluster": a cluster has one NetworkConfig`,
			"spec.overlayMTU: Invalid value: 100: must be in [576,9216]",
			"spec.tunnelPort: Invalid value: -1: must be in [1,65535]",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := errorStrings(ValidateNetworkConfig(tc.cfg))
			if diff := cmp.Diff(got, tc.want); diff != "" {
				t.Errorf("ValidateNetworkConfig mismatch (-got +want):\n%s", diff)
			}
		})
	}
}

func TestValidateNetworkConfigUpdate(t *testing.T) {
	// applied is the stored config: spec 1450/4789, applied.
	applied := networkConfig("cluster", ptr(1450), ptr(4789))
	applied.Status = network.NetworkConfigStatus{OverlayMTU: 1450, TunnelPort: 4789}
	// pending is a stored config whose forced MTU change is not applied yet.
	pending := networkConfig("cluster", ptr(1400), ptr(4789))
	pending.Status = applied.Status
	forced := func(c *network.NetworkConfig) *network.NetworkConfig {
		c.Annotations = map[string]string{network.ForceUnsafeChangeAnnotation: "true"}
		return c
	}
	const mtuBreaks = "interfaces that exist keep the old MTU until their pods are re-created, and packets larger than the smaller MTU between them are lost"
	const howToForce = `; to change it anyway, set the annotation network.example.com/force-unsafe-change: "true" in the same update (docs/install.md, "Network configuration")`
	tests := []struct {
		name        string
		cfg, old    *network.NetworkConfig
		attachments int
		want        []string
	}{
		{"no change", networkConfig("cluster", ptr(1450), ptr(4789)), applied, 3, nil},
		{"MTU change without attachments", networkConfig("cluster", ptr(1400), ptr(4789)), applied, 0, nil},
		{"MTU change with attachments", networkConfig("cluster", ptr(1400), ptr(4789)), applied, 3, []string{
			"spec.overlayMTU: Forbidden: may not change from 1450, the value applied, to 1400 while 3 NetworkAttachments exist: " + mtuBreaks + howToForce,
		}},
		{"port change with one attachment", networkConfig("cluster", ptr(1450), ptr(8472)), applied, 1, []string{
			"spec.tunnelPort: Forbidden: may not change from 4789, the value applied, to 8472 while 1 NetworkAttachment exists: nodes lose each other's tunnel traffic until every agent uses the new port" + howToForce,
		}},
		{"forced change", forced(networkConfig("cluster", ptr(1400), ptr(8472))), applied, 3, nil},
		{"annotation not true", func() *network.NetworkConfig {
			c := networkConfig("cluster", ptr(1400), ptr(4789))
			c.Annotations = map[string]string{network.ForceUnsafeChangeAnnotation: "yes"}
			return c
		}(), applied, 3, []string{
			"spec.overlayMTU: Forbidden: may not change from 1450, the value applied, to 1400 while 3 NetworkAttachments exist: " + mtuBreaks + howToForce,
		}},
		{"never applied", networkConfig("cluster", ptr(1400), ptr(4789)), networkConfig("cluster", ptr(1450), ptr(4789)), 3, nil},
		{"defaults filled in", networkConfig("cluster", ptr(1450), ptr(4789)), networkConfig("cluster", nil, nil), 3, nil},
		{"label edit while a forced change is pending", networkConfig("cluster", ptr(1400), ptr(4789)), pending, 3, nil},
		{"back to the value applied", networkConfig("cluster", ptr(1450), ptr(4789)), pending, 3, nil},
		{"unset", networkConfig("cluster", nil, nil), applied, 0, []string{
			"spec.overlayMTU: Required value: may not be unset once set (it was 1450)",
			"spec.tunnelPort: Required value: may not be unset once set (it was 4789)",
		}},
		{"bad values are refused even when forced", forced(networkConfig("cluster", ptr(20000), ptr(70000))), applied, 3, []string{
			"spec.overlayMTU: Invalid value: 20000: must be in [576,9216]",
			"spec.tunnelPort: Invalid value: 70000: must be in [1,65535]",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := errorStrings(ValidateNetworkConfigUpdate(tc.cfg, tc.old, tc.attachments))
			if diff := cmp.Diff(got, tc.want); diff != "" {
				t.Errorf("ValidateNetworkConfigUpdate mismatch (-got +want):\n%s", diff)
			}
		})
	}
}

func TestValidateNetworkConfigStatusUpdate(t *testing.T) {
	old := networkConfig("cluster", ptr(1450), ptr(4789))
	withStatus := func(st network.NetworkConfigStatus) *network.NetworkConfig {
		c := networkConfig("cluster", ptr(1450), ptr(4789))
		c.Status = st
		return c
	}
	tooMany := make([]network.NodeUnderlay, network.MaxTooSmallNamed+1)
	tests := []struct {
		name string
		cfg  *network.NetworkConfig
		want []string
	}{
		{"empty", withStatus(network.NetworkConfigStatus{}), nil},
		{"applied", withStatus(network.NetworkConfigStatus{OverlayMTU: 1450, TunnelPort: 4789}), nil},
		{"bad values", withStatus(network.NetworkConfigStatus{OverlayMTU: 10, TunnelPort: 70000}), []string{
			"status.overlayMTU: Invalid value: 10: must be in [576,9216]",
			"status.tunnelPort: Invalid value: 70000: must be in [1,65535]",
		}},
		{"too many named", withStatus(network.NetworkConfigStatus{Underlay: network.UnderlayReport{TooSmall: tooMany}}), []string{
			"status.underlay.tooSmall: Too many: 21: must have at most 20 items",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := errorStrings(ValidateNetworkConfigStatusUpdate(tc.cfg, old))
			if diff := cmp.Diff(got, tc.want); diff != "" {
				t.Errorf("ValidateNetworkConfigStatusUpdate mismatch (-got +want):\n%s", diff)
			}
		})
	}
}
