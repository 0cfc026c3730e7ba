package v1alpha1

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestFieldLabelConversion(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := AddToScheme(scheme); err != nil {
		t.Fatalf("AddToScheme: %v", err)
	}
	type result struct {
		Label, Value string
		Err          string
	}
	tests := []struct {
		kind, label, value string
		want               result
	}{
		{"NetworkAttachment", "spec.node", "n1", result{Label: "spec.node", Value: "n1"}},
		{"NetworkAttachment", "spec.subnet", "s1", result{Label: "spec.subnet", Value: "s1"}},
		{"NetworkAttachment", "status.ipv4", "10.0.0.5", result{Label: "status.ipv4", Value: "10.0.0.5"}},
		{"NetworkAttachment", "status.hostIP", "192.168.1.1", result{Label: "status.hostIP", Value: "192.168.1.1"}},
		{"NetworkAttachment", "status.addressVNI", "007", result{Label: "status.addressVNI", Value: "7"}},
		{"NetworkAttachment", "metadata.name", "a", result{Label: "metadata.name", Value: "a"}},
		{"NetworkAttachment", "metadata.namespace", "ns", result{Label: "metadata.namespace", Value: "ns"}},
		{"NetworkAttachment", "status.addressVNI", "x7", result{Err: `field label "status.addressVNI" of NetworkAttachment takes a decimal number in [0,4294967295], not "x7"`}},
		{"NetworkAttachment", "status.addressVNI", "4294967296", result{Err: `field label "status.addressVNI" of NetworkAttachment takes a decimal number in [0,4294967295], not "4294967296"`}},
		{"NetworkAttachment", "spec.vni", "1", result{Err: `field label "spec.vni" not supported for NetworkAttachment; supported labels: metadata.name, metadata.namespace, spec.node, spec.subnet, status.addressVNI, status.hostIP, status.ipv4`}},
		{"Subnet", "spec.vni", "012", result{Label: "spec.vni", Value: "12"}},
		{"Subnet", "spec.ipv4", "10.0.0.0/8", result{Err: `field label "spec.ipv4" not supported for Subnet; supported labels: metadata.name, metadata.namespace, spec.vni`}},
		{"IPLock", "spec.subnetName", "s1", result{Label: "spec.subnetName", Value: "s1"}},
		{"IPLock", "spec.node", "n1", result{Err: `field label "spec.node" not supported for IPLock; supported labels: metadata.name, metadata.namespace, spec.subnetName`}},
		{"NodeNetworkPolicy", "spec.node", "n1", result{Label: "spec.node", Value: "n1"}},
		{"NodeNetworkPolicy", "spec.vni", "0301", result{Label: "spec.vni", Value: "301"}},
		{"NodeNetworkPolicy", "spec.subnet", "s1", result{Err: `field label "spec.subnet" not supported for NodeNetworkPolicy; supported labels: metadata.name, metadata.namespace, spec.node, spec.vni`}},
	}
	for _, tc := range tests {
		t.Run(tc.kind+"/"+tc.label+"="+tc.value, func(t *testing.T) {
			var got result
			label, value, err := scheme.ConvertFieldLabel(SchemeGroupVersion.WithKind(tc.kind), tc.label, tc.value)
			if err != nil {
				got.Err = err.Error()
			} else {
				got.Label, got.Value = label, value
			}
			if diff := cmp.Diff(got, tc.want); diff != "" {
				t.Errorf("ConvertFieldLabel mismatch (-got +want):\n%s", diff)
			}
		})
	}
}
