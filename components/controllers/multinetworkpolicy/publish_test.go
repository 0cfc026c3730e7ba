package multinetworkpolicy

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/generated/clientset/versioned/fake"
	listers "github.com/kos-sdn/kos/components/generated/listers/network/v1alpha1"
)

// TestPublish follows a namespace's NodeNetworkPolicies through policy
// changes: created where a policy isolates attachments, rewritten when the
// model changes, left alone when it does not, deleted when nothing
// isolates.
func TestPublish(t *testing.T) {
	web := map[string]any{"matchLabels": map[string]any{"app": "web"}}
	f := newFixture(t)
	kos := fake.NewSimpleClientset()
	published := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	f.c.kos = kos
	f.c.nodePolicies = listers.NewNodeNetworkPolicyLister(published)
	// publish syncs namespace a, copies what the server holds into the
	// cache as the informer would, and returns it and the writes.
	publish := func() (map[string]v1alpha1.NodeNetworkPolicySpec, []string) {
		t.Helper()
		kos.ClearActions()
		if err := f.c.publish(context.Background(), cache.ObjectName{Name: "a"}); err != nil {
			t.Fatalf("publish: %v", err)
		}
		var writes []string
		for _, a := range kos.Actions() {
			if a.GetVerb() != "list" && a.GetVerb() != "watch" {
				writes = append(writes, a.GetVerb())
			}
		}
		list, err := kos.NetworkV1alpha1().NodeNetworkPolicies("a").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]v1alpha1.NodeNetworkPolicySpec{}
		for _, obj := range published.List() {
			if err := published.Delete(obj); err != nil {
				t.Fatal(err)
			}
		}
		for i := range list.Items {
			got[list.Items[i].Name] = list.Items[i].Spec
			if err := published.Add(&list.Items[i]); err != nil {
				t.Fatal(err)
			}
		}
		return got, writes
	}

	got, writes := publish()
	if len(got) != 0 || len(writes) != 0 {
		t.Errorf("without policies: published %v with writes %v, want nothing", got, writes)
	}

	f.setPolicy(t, "web", "u1", "blue", map[string]any{"podSelector": web,
		"ingress": []any{map[string]any{"from": []any{map[string]any{"podSelector": web}}, "ports": []any{map[string]any{"port": int64(80)}}}}})
	rule := []v1alpha1.PolicyRule{{
		Peers: []v1alpha1.PolicyPeer{{CIDR: "10.0.0.11/32"}, {CIDR: "10.0.0.12/32"}},
		Ports: []v1alpha1.PolicyPort{{Protocol: "TCP", Port: 80}},
	}}
	want := map[string]v1alpha1.NodeNetworkPolicySpec{"7.n1": {Node: "n1", VNI: 7, Policies: []v1alpha1.PolicyModel{{
		Name: "a/web", Selected: []string{"10.0.0.11", "10.0.0.12"}, Ingress: true, IngressRules: rule,
	}}}}
	got, writes = publish()
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("a policy: published (-got +want):\n%s", diff)
	}
	if diff := cmp.Diff(writes, []string{"create"}); diff != "" {
		t.Errorf("a policy: writes (-got +want):\n%s", diff)
	}

	if _, writes = publish(); len(writes) != 0 {
		t.Errorf("nothing changed: writes %v, want none", writes)
	}

	f.addPod(t, "web3", "10.0.0.13")
	want["7.n1"].Policies[0].Selected = []string{"10.0.0.11", "10.0.0.12", "10.0.0.13"}
	want["7.n1"].Policies[0].IngressRules[0].Peers = append(rule[0].Peers, v1alpha1.PolicyPeer{CIDR: "10.0.0.13/32"})
	got, writes = publish()
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("another pod: published (-got +want):\n%s", diff)
	}
	if diff := cmp.Diff(writes, []string{"update"}); diff != "" {
		t.Errorf("another pod: writes (-got +want):\n%s", diff)
	}

	// A policy that selects nobody on the node isolates nothing there.
	f.setPolicy(t, "web", "u1", "blue", map[string]any{"podSelector": map[string]any{"matchLabels": map[string]any{"app": "db"}}})
	got, writes = publish()
	if len(got) != 0 {
		t.Errorf("a policy that selects nobody: published %v, want nothing", got)
	}
	if diff := cmp.Diff(writes, []string{"delete"}); diff != "" {
		t.Errorf("a policy that selects nobody: writes (-got +want):\n%s", diff)
	}
}
