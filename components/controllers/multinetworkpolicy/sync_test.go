package multinetworkpolicy

import (
	"context"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	"github.com/kos-sdn/kos/components/apis/multinetworkpolicy/v1beta1"
	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/controllers/keyqueue"
	"github.com/kos-sdn/kos/components/controllers/podnetwork"
	listers "github.com/kos-sdn/kos/components/generated/listers/network/v1alpha1"
)

// fixture is a controller over in-memory caches, and those caches.
type fixture struct {
	c                                                 *Controller
	recorder                                          *record.FakeRecorder
	policies, definitions, pods, namespaces, attached cache.Indexer
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	idx := func() cache.Indexer {
		return cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	}
	f := &fixture{recorder: record.NewFakeRecorder(100), policies: idx(), definitions: idx(), pods: idx(), namespaces: idx(), attached: idx()}
	subnets := idx()
	f.c = &Controller{
		policies:    cache.NewGenericLister(f.policies, v1beta1.MultiNetworkPolicies.GroupResource()),
		definitions: cache.NewGenericLister(f.definitions, podnetwork.NetworkAttachmentDefinitions.GroupResource()),
		pods:        corelisters.NewPodLister(f.pods),
		namespaces:  corelisters.NewNamespaceLister(f.namespaces),
		subnets:     listers.NewSubnetLister(subnets),
		attachments: listers.NewNetworkAttachmentLister(f.attached),
		queue:       keyqueue.New("test"),
		recorder:    f.recorder,
		told:        map[string]told{},
	}
	t.Cleanup(f.c.queue.ShutDown)
	add := func(i cache.Indexer, obj any) {
		if err := i.Add(obj); err != nil {
			t.Fatal(err)
		}
	}
	add(f.namespaces, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "a"}})
	add(subnets, &v1alpha1.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "blue"}, Spec: v1alpha1.SubnetSpec{VNI: 7}})
	for name, config := range map[string]string{"blue": `{"cniVersion":"1.0.0","type":"kos","subnet":"blue"}`, "mac": `{"type":"macvlan"}`} {
		add(f.definitions, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
			"metadata": map[string]any{"namespace": "a", "name": name}, "spec": map[string]any{"config": config},
		}})
	}
	f.addPod(t, "web1", "10.0.0.11")
	f.addPod(t, "web2", "10.0.0.12")
	return f
}

// addPod adds a pod labelled app=web with an attachment on blue.
func (f *fixture) addPod(t *testing.T, name, ipv4 string) {
	t.Helper()
	uid := types.UID("uid-" + name)
	if err := f.pods.Add(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: name, UID: uid, Labels: map[string]string{"app": "web"}}}); err != nil {
		t.Fatal(err)
	}
	if err := f.attached.Add(&v1alpha1.NetworkAttachment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: name + "-net1", Labels: map[string]string{v1alpha1.PodUIDLabel: string(uid)}},
		Spec:       v1alpha1.NetworkAttachmentSpec{Node: "n1", Subnet: "blue"},
		Status:     v1alpha1.NetworkAttachmentStatus{IPv4: ipv4, AddressVNI: 7},
	}); err != nil {
		t.Fatal(err)
	}
}

// setPolicy puts a policy into the cache, as the dynamic informer has it.
func (f *fixture) setPolicy(t *testing.T, name, uid, policyFor string, spec map[string]any) {
	t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "k8s.cni.cncf.io/v1beta1", "kind": "MultiNetworkPolicy",
		"metadata": map[string]any{"namespace": "a", "name": name, "uid": uid,
			"annotations": map[string]any{v1beta1.PolicyForAnnotation: policyFor}},
		"spec": spec,
	}}
	if err := f.policies.Update(u); err != nil {
		t.Fatal(err)
	}
}

// sync syncs a policy and returns the Events it recorded.
func (f *fixture) sync(t *testing.T, name string) []string {
	t.Helper()
	if err := f.c.sync(context.Background(), cache.ObjectName{Namespace: "a", Name: name}); err != nil {
		t.Fatalf("sync: %v", err)
	}
	var events []string
	for {
		select {
		case e := <-f.recorder.Events:
			events = append(events, e)
		default:
			return events
		}
	}
}

func TestSync(t *testing.T) {
	web := map[string]any{"podSelector": map[string]any{"matchLabels": map[string]any{"app": "web"}}}
	f := newFixture(t)
	steps := []struct {
		name   string
		change func()
		policy string
		want   []string
	}{{
		name:   "a policy of a KOS network",
		change: func() { f.setPolicy(t, "web", "u1", "blue", web) },
		policy: "web",
		want:   []string{"Normal Applied Applies to 2 pods on a/blue (KOS network 7)."},
	}, {
		name:   "nothing changed: no Event",
		change: func() {},
		policy: "web",
	}, {
		name:   "another pod: a new count",
		change: func() { f.addPod(t, "web3", "10.0.0.13") },
		policy: "web",
		want:   []string{"Normal Applied Applies to 3 pods on a/blue (KOS network 7)."},
	}, {
		name: "what KOS cannot honour",
		change: func() {
			f.setPolicy(t, "web", "u1", "blue", map[string]any{"podSelector": web["podSelector"],
				"ingress": []any{map[string]any{"from": []any{map[string]any{"ipBlock": map[string]any{"cidr": "fd00::/64"}}}}}})
		},
		policy: "web",
		want:   []string{"Warning NotHonoured spec.ingress[0].from[0].ipBlock: cidr fd00::/64 is not IPv4, and KOS networks are IPv4 only; the peer allows nothing."},
	}, {
		name:   "another plugin's network: no Event",
		change: func() { f.setPolicy(t, "mac", "u2", "mac", web) },
		policy: "mac",
	}, {
		name:   "a policy that does not read",
		change: func() { f.setPolicy(t, "bad", "u3", "blue", map[string]any{"podSelector": "web"}) },
		policy: "bad",
		want:   []string{`Warning InvalidPolicy converting MultiNetworkPolicy a/bad: cannot restore struct from: string`},
	}, {
		name: "deleted: forgotten",
		change: func() {
			if err := f.policies.Delete(&unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"namespace": "a", "name": "web"}}}); err != nil {
				t.Fatal(err)
			}
		},
		policy: "web",
	}, {
		name:   "created again: told again",
		change: func() { f.setPolicy(t, "web", "u4", "blue", web) },
		policy: "web",
		want:   []string{"Normal Applied Applies to 3 pods on a/blue (KOS network 7)."},
	}}
	for _, s := range steps {
		s.change()
		got := f.sync(t, s.policy)
		if diff := cmp.Diff(got, s.want); diff != "" {
			t.Errorf("%s: events (-got +want):\n%s", s.name, diff)
		}
	}
}

func TestTrimPod(t *testing.T) {
	ports := []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "p", UID: "u", ResourceVersion: "5", Labels: map[string]string{"app": "web"},
			Annotations: map[string]string{"big": "yes"}},
		Spec: corev1.PodSpec{
			NodeName:       "n1",
			Containers:     []corev1.Container{{Name: "c", Image: "x", Ports: ports}, {Name: "quiet", Image: "y"}},
			InitContainers: []corev1.Container{{Name: "once", Ports: ports}, {Name: "sidecar", Ports: ports, RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.0.5"},
	}
	got, err := TrimPod(pod)
	if err != nil {
		t.Fatal(err)
	}
	want := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "p", UID: "u", ResourceVersion: "5", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{
			Containers:     []corev1.Container{{Name: "c", Ports: ports}},
			InitContainers: []corev1.Container{{Name: "sidecar", Ports: ports, RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("TrimPod (-got +want):\n%s", diff)
	}
}

func TestEnqueueNamespace(t *testing.T) {
	f := newFixture(t)
	f.setPolicy(t, "web", "u1", "blue", map[string]any{})
	f.setPolicy(t, "mac", "u2", "mac", map[string]any{})
	other := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "k8s.cni.cncf.io/v1beta1", "kind": "MultiNetworkPolicy",
		"metadata": map[string]any{"namespace": "b", "name": "other"},
	}}
	if err := f.policies.Add(other); err != nil {
		t.Fatal(err)
	}
	keys := func() []string {
		var out []string
		for f.c.queue.Len() > 0 {
			k, _ := f.c.queue.Get()
			out = append(out, k)
			f.c.queue.Done(k)
		}
		slices.Sort(out)
		return out
	}
	f.c.enqueueNamespace(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "p"}})
	if diff := cmp.Diff(keys(), []string{"a/mac", "a/web"}); diff != "" {
		t.Errorf("keys queued by a pod of namespace a (-got +want):\n%s", diff)
	}
	f.c.enqueueNamespace(cache.DeletedFinalStateUnknown{Key: "b/p", Obj: &v1alpha1.NetworkAttachment{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "p"}}})
	if diff := cmp.Diff(keys(), []string{"b/other"}); diff != "" {
		t.Errorf("keys queued by a deleted attachment of namespace b (-got +want):\n%s", diff)
	}
	f.c.enqueueAll("")
	if diff := cmp.Diff(keys(), []string{"a/mac", "a/web", "b/other"}); diff != "" {
		t.Errorf("keys queued by a namespace (-got +want):\n%s", diff)
	}
}
