package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/kos-sdn/kos/components/apis/multinetworkpolicy/v1beta1"
	"github.com/kos-sdn/kos/release/api"
)

// TestReleaseConfig checks that the operator's configuration the demo
// renders with is one kos-release accepts (strictly: no unknown key, every
// value valid), with the registry and the CPU requests the demo shows.
func TestReleaseConfig(t *testing.T) {
	cfg, err := api.Decode([]byte(releaseConfig("127.0.0.1:5000/kos")))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Registry != "127.0.0.1:5000/kos" {
		t.Errorf("registry %q, want 127.0.0.1:5000/kos", cfg.Registry)
	}
	for _, c := range []string{"kos-apiserver", "kos-controller-manager"} {
		req := cfg.Components[c].Resources[c].Requests
		if got := req.Cpu().String(); got != configuredCPU {
			t.Errorf("%s requests cpu %s, want %s", c, got, configuredCPU)
		}
	}
}

// TestPolicyManifest checks that the demo's policies read strictly as
// MultiNetworkPolicies for the pods' network: the first isolates for
// ingress and allows nothing, the second allows the sink's TCP port from
// the namespace's pods.
func TestPolicyManifest(t *testing.T) {
	port := intstr.Parse(podnetPort)
	protocol := corev1.ProtocolTCP
	for _, tc := range []struct {
		name, port string
		want       networkingv1.NetworkPolicySpec
	}{
		{"deny", "", networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}}},
		{"allow", podnetPort, networkingv1.NetworkPolicySpec{
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{}}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &protocol, Port: &port}},
			}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got v1beta1.MultiNetworkPolicy
			if err := yaml.UnmarshalStrict([]byte(policyManifest(tc.name, tc.port)), &got); err != nil {
				t.Fatal(err)
			}
			if got.Kind != "MultiNetworkPolicy" || got.Namespace != podsNamespace || got.Annotations[v1beta1.PolicyForAnnotation] != podsNetwork {
				t.Errorf("got %s %s/%s for %q, want MultiNetworkPolicy in %s for %s", got.Kind, got.Namespace, got.Name, got.Annotations[v1beta1.PolicyForAnnotation], podsNamespace, podsNetwork)
			}
			if diff := cmp.Diff(tc.want, got.Spec); diff != "" {
				t.Errorf("spec (-want +got):\n%s", diff)
			}
		})
	}
}
