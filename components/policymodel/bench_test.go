package policymodel

import (
	"fmt"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
)

// BenchmarkBuild builds the model of one network of n pods on 10 nodes and
// p policies, each selecting a tenth of the pods (by label) and admitting
// another tenth on a TCP port and a named port, like the fabric's
// BenchmarkPolicy; and, apart, one policy's model (what the controller's
// sync of one policy costs today).
func BenchmarkBuild(b *testing.B) {
	for _, size := range []struct{ pods, policies int }{{100, 10}, {1000, 100}, {2000, 200}} {
		in := benchInput(size.pods, size.policies)
		b.Run(fmt.Sprintf("%dx%d/all", size.pods, size.policies), func(b *testing.B) {
			for b.Loop() {
				m := Build(in)
				if len(m.Networks[7]) != 10 {
					b.Fatalf("model on %d nodes, want 10", len(m.Networks[7]))
				}
			}
		})
		one := in
		one.Policies = in.Policies[:1]
		b.Run(fmt.Sprintf("%dx%d/one", size.pods, size.policies), func(b *testing.B) {
			for b.Loop() {
				Build(one)
			}
		})
	}
}

func benchInput(pods, policies int) Input {
	in := Input{
		Namespaces: []*corev1.Namespace{{ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{"ns": "a"}}}},
		Definitions: []*unstructured.Unstructured{{Object: map[string]any{
			"metadata": map[string]any{"namespace": "a", "name": "blue"},
			"spec":     map[string]any{"config": `{"cniVersion":"1.0.0","type":"kos","subnet":"blue"}`},
		}}},
		Subnets: []*v1alpha1.Subnet{{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "blue"}, Spec: v1alpha1.SubnetSpec{VNI: 7}}},
	}
	for i := range pods {
		name := fmt.Sprintf("p%d", i)
		uid := types.UID("uid-" + name)
		in.Pods = append(in.Pods, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: name, UID: uid, Labels: map[string]string{"group": fmt.Sprint(i % 10), "pod": name}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: int32(8000 + i%2)}}}}},
		})
		addr := netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)})
		in.Attachments = append(in.Attachments, &v1alpha1.NetworkAttachment{
			ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: name + "-net1", Labels: map[string]string{v1alpha1.PodUIDLabel: string(uid)}},
			Spec:       v1alpha1.NetworkAttachmentSpec{Node: fmt.Sprintf("n%d", i%10), Subnet: "blue"},
			Status:     v1alpha1.NetworkAttachmentStatus{IPv4: addr.String(), AddressVNI: 7},
		})
	}
	for j := range policies {
		in.Policies = append(in.Policies, policy(fmt.Sprintf("pol%d", j), "blue", networkingv1.NetworkPolicySpec{
			PodSelector: *sel("group", fmt.Sprint(j%10)),
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{{PodSelector: sel("group", fmt.Sprint((j+1)%10))}},
				Ports: []networkingv1.NetworkPolicyPort{
					port(corev1.ProtocolTCP, intstr.FromInt32(int32(1000+j))),
					port(corev1.ProtocolTCP, intstr.FromString("http")),
				},
			}},
		}))
	}
	return in
}
