package v1beta1_test

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/kos-sdn/kos/components/apis/multinetworkpolicy/v1beta1"
	"github.com/kos-sdn/kos/tools/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestIntegrationCRD installs docs/multi-networkpolicy-crd.yaml into a real
// kube-apiserver: a policy using every field of the spec round-trips
// through it (its ports' protocol defaulted to TCP, as networking/v1
// does), and what the schema refuses is refused.
func TestIntegrationCRD(t *testing.T) {
	ctx := context.Background()
	env := testenv.Shared(t)
	dyn, err := dynamic.NewForConfig(env.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	kube, err := kubernetes.NewForConfig(env.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	if err := testenv.InstallCRD(ctx, dyn, "docs/multi-networkpolicy-crd.yaml", v1beta1.MultiNetworkPolicies); err != nil {
		t.Fatal(err)
	}
	ns, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "mnp-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	policies := dyn.Resource(v1beta1.MultiNetworkPolicies).Namespace(ns.Name)
	spec := networkingv1.NetworkPolicySpec{
		PodSelector: metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: []string{"web", "db"}}}},
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		Ingress: []networkingv1.NetworkPolicyIngressRule{{
			From: []networkingv1.NetworkPolicyPeer{
				{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "x"}}, PodSelector: &metav1.LabelSelector{}},
				{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/16", Except: []string{"10.0.1.0/24"}}},
			},
			Ports: []networkingv1.NetworkPolicyPort{
				{Port: ptr.To(intstr.FromString("http"))},
				{Protocol: ptr.To(corev1.ProtocolUDP), Port: ptr.To(intstr.FromInt32(1000)), EndPort: ptr.To[int32](1100)},
			},
		}},
		Egress: []networkingv1.NetworkPolicyEgressRule{{Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolSCTP)}}}},
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&v1beta1.MultiNetworkPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1beta1.SchemeGroupVersion.String(), Kind: v1beta1.Kind},
		ObjectMeta: metav1.ObjectMeta{Name: "web", Annotations: map[string]string{v1beta1.PolicyForAnnotation: "blue,other/red"}},
		Spec:       spec,
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := policies.Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating a policy: %v", err)
	}
	u, err := policies.Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := v1beta1.FromUnstructured(u)
	if err != nil {
		t.Fatal(err)
	}
	want := spec.DeepCopy()
	want.Ingress[0].Ports[0].Protocol = ptr.To(corev1.ProtocolTCP)
	if diff := cmp.Diff(got.Spec, *want); diff != "" {
		t.Errorf("spec read back (-got +want):\n%s", diff)
	}
	if got.Annotations[v1beta1.PolicyForAnnotation] != "blue,other/red" {
		t.Errorf("annotations = %v", got.Annotations)
	}

	for name, spec := range map[string]map[string]any{
		"unknown policy type":  {"policyTypes": []any{"Sideways"}},
		"ipBlock without cidr": {"ingress": []any{map[string]any{"from": []any{map[string]any{"ipBlock": map[string]any{"except": []any{"10.0.0.0/24"}}}}}}},
		"endPort not a number": {"egress": []any{map[string]any{"ports": []any{map[string]any{"port": 1, "endPort": "x"}}}}},
	} {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": v1beta1.SchemeGroupVersion.String(), "kind": v1beta1.Kind,
			"metadata": map[string]any{"generateName": "bad-"}, "spec": spec,
		}}
		if _, err := policies.Create(ctx, u, metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
			t.Errorf("%s: creating got error %v, want it refused as invalid", name, err)
		}
	}
}
