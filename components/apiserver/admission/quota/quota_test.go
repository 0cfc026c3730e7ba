package quota

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/quota/v1/generic"

	"github.com/kos-sdn/kos/components/apis/network"
	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
)

func TestConfiguration(t *testing.T) {
	registry := generic.NewRegistry(Configuration().Evaluators())
	tests := []struct {
		resource string
		want     corev1.ResourceName
	}{
		{"subnets", "count/subnets.network.example.com"},
		{"networkattachments", "count/networkattachments.network.example.com"},
		{"iplocks", "count/iplocks.network.example.com"},
	}
	for _, tc := range tests {
		t.Run(tc.resource, func(t *testing.T) {
			e := registry.Get(network.Resource(tc.resource))
			if e == nil {
				t.Fatalf("no evaluator for %s", tc.resource)
			}
			got := e.MatchingResources([]corev1.ResourceName{tc.want, "count/pods", "cpu"})
			if diff := cmp.Diff(got, []corev1.ResourceName{tc.want}); diff != "" {
				t.Errorf("matching resources (-got +want):\n%s", diff)
			}
			create := func(subresource string) admission.Attributes {
				return admission.NewAttributesRecord(nil, nil, v1alpha1.SchemeGroupVersion.WithKind("X"), "ns", "x",
					v1alpha1.SchemeGroupVersion.WithResource(tc.resource), subresource, admission.Create, &metav1.CreateOptions{}, false, nil)
			}
			if !e.Handles(create("")) || e.Handles(create("status")) {
				t.Errorf("Handles: want creates of the main resource only")
			}
		})
	}
}
