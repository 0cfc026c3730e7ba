package v1beta1

import (
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// crdFile is the CustomResourceDefinition that serves these types.
const crdFile = "../../../../docs/multi-networkpolicy-crd.yaml"

func TestCRDNames(t *testing.T) {
	b, err := os.ReadFile(crdFile)
	if err != nil {
		t.Fatal(err)
	}
	var crd struct {
		Metadata struct{ Name string }
		Spec     struct {
			Group string
			Scope string
			Names struct {
				Plural, Singular, Kind, ListKind string
			}
			Versions []struct {
				Name            string
				Served, Storage bool
			}
		}
	}
	if err := yaml.Unmarshal(b, &crd); err != nil {
		t.Fatal(err)
	}
	s := crd.Spec
	got := []string{crd.Metadata.Name, s.Group, s.Scope, s.Names.Plural, s.Names.Kind, s.Names.ListKind}
	want := []string{MultiNetworkPolicies.Resource + "." + GroupName, GroupName, "Namespaced", MultiNetworkPolicies.Resource, Kind, Kind + "List"}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("CRD names (-got +want):\n%s", diff)
	}
	if len(s.Versions) != 1 || s.Versions[0].Name != SchemeGroupVersion.Version || !s.Versions[0].Served || !s.Versions[0].Storage {
		t.Errorf("CRD versions = %+v, want %s alone, served and stored", s.Versions, SchemeGroupVersion.Version)
	}
}

func TestFromUnstructured(t *testing.T) {
	u := &unstructured.Unstructured{}
	err := yaml.Unmarshal([]byte(`
apiVersion: k8s.cni.cncf.io/v1beta1
kind: MultiNetworkPolicy
metadata:
  name: web
  namespace: a
  annotations:
    k8s.v1.cni.cncf.io/policy-for: blue
spec:
  podSelector:
    matchLabels: {app: web}
  ingress:
  - from:
    - namespaceSelector: {}
      podSelector: {matchLabels: {role: client}}
    ports:
    - port: http
    - protocol: UDP
      port: 1000
      endPort: 1100
`), &u.Object)
	if err != nil {
		t.Fatal(err)
	}
	got, err := FromUnstructured(u)
	if err != nil {
		t.Fatal(err)
	}
	want := &MultiNetworkPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "k8s.cni.cncf.io/v1beta1", Kind: Kind},
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "a", Annotations: map[string]string{PolicyForAnnotation: "blue"}},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{{
					NamespaceSelector: &metav1.LabelSelector{},
					PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"role": "client"}},
				}},
				Ports: []networkingv1.NetworkPolicyPort{
					{Port: ptr.To(intstr.FromString("http"))},
					{Protocol: ptr.To(corev1.ProtocolUDP), Port: ptr.To(intstr.FromInt32(1000)), EndPort: ptr.To[int32](1100)},
				},
			}},
		},
	}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("FromUnstructured (-got +want):\n%s", diff)
	}
	// The copy shares nothing with the cached object.
	got.Spec.PodSelector.MatchLabels["app"] = "changed"
	if v, _, _ := unstructured.NestedString(u.Object, "spec", "podSelector", "matchLabels", "app"); v != "web" {
		t.Errorf("changing the converted policy changed the unstructured one: app = %q", v)
	}
}

func TestPolicyFor(t *testing.T) {
	for _, tc := range []struct {
		name, annotation string
		want             []types.NamespacedName
		wantErr          bool
	}{
		{name: "absent"},
		{name: "bare name", annotation: "blue", want: []types.NamespacedName{{Namespace: "ns", Name: "blue"}}},
		{name: "namespaced, blanks, repeats", annotation: " blue , other/red,ns/blue",
			want: []types.NamespacedName{{Namespace: "ns", Name: "blue"}, {Namespace: "other", Name: "red"}}},
		{name: "malformed entries kept apart", annotation: "blue,,Bad/x,a/b/c",
			want: []types.NamespacedName{{Namespace: "ns", Name: "blue"}}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := PolicyFor(tc.annotation, "ns")
			if diff := cmp.Diff(got, tc.want); diff != "" {
				t.Errorf("PolicyFor(%q) (-got +want):\n%s", tc.annotation, diff)
			}
			if (err != nil) != tc.wantErr {
				t.Errorf("PolicyFor(%q) error = %v, want error %v", tc.annotation, err, tc.wantErr)
			}
		})
	}
}
