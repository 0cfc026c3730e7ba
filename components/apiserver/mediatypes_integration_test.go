package apiserver_test

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/tools/testenv"
)

// TestIntegrationMetadataClient lists and deletes KOS objects the way
// kube-controller-manager's namespace and garbage collectors do: with the
// metadata client, which asks for protobuf first. KOS's types have no
// protobuf encoding, so the server must answer in JSON, not fail (which
// left every namespace holding a KOS object Terminating for ever).
func TestIntegrationMetadataClient(t *testing.T) {
	env := testenv.Shared(t)
	kos := startKOS(t, testenv.KOSOptions{Name: "metadata"})
	for name, cfg := range map[string]*rest.Config{"direct": kos.DirectConfig, "aggregated": env.RESTConfig} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			ns := newNamespace(t)
			client := kosClient(t, cfg)
			if _, err := client.NetworkV1alpha1().Subnets(ns).Create(ctx, newSubnet(ns, "s1", "10.9.0.0/24", 901), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := client.NetworkV1alpha1().NetworkAttachments(ns).Create(ctx, newAttachment(ns, "a1", "n1", "s1"), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			meta, err := metadata.NewForConfig(cfg)
			if err != nil {
				t.Fatal(err)
			}
			// Subnets last: one that attachments use cannot be deleted.
			for _, resource := range []string{"networkattachments", "iplocks", "subnets"} {
				gvr := v1alpha1.SchemeGroupVersion.WithResource(resource)
				if _, err := meta.Resource(gvr).Namespace(ns).List(ctx, metav1.ListOptions{}); err != nil {
					t.Errorf("listing %s with the metadata client: %v", resource, err)
				}
				if err := meta.Resource(gvr).Namespace(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
					t.Errorf("deleting the %s of %s with the metadata client: %v", resource, ns, err)
				}
			}
			left, err := client.NetworkV1alpha1().Subnets(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(left.Items) != 0 {
				t.Errorf("%d subnets left in %s after DeleteCollection", len(left.Items), ns)
			}
		})
	}
}
