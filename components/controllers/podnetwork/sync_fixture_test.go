package podnetwork

// This file holds what the controller's unit tests start from: pods,
// definitions and attachments as the server holds them, and a controller on
// fake clientsets whose caches hold them, with the writes it sent and the
// events it recorded.

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic/dynamicinformer"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/informers"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/generated/clientset/versioned/fake"
	"github.com/kos-sdn/kos/components/generated/informers/externalversions"
)

const ns = "pods"

// newPod returns a pod of namespace pods, bound to node-1, whose UID is its
// name with -uid, annotated with networks unless that is empty.
func newPod(name, networks string, mods ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(name + "-uid"), ResourceVersion: "1"},
		Spec:       corev1.PodSpec{NodeName: "node-1"},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if networks != "" {
		p.Annotations = map[string]string{NetworksAnnotation: networks}
	}
	for _, m := range mods {
		m(p)
	}
	return p
}

func newDefinition(namespace, name, config string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("k8s.cni.cncf.io/v1")
	u.SetKind("NetworkAttachmentDefinition")
	u.SetNamespace(namespace)
	u.SetName(name)
	if config != "" {
		_ = unstructured.SetNestedField(u.Object, config, "spec", "config")
	}
	return u
}

func kosConfig(subnet string) string {
	return fmt.Sprintf(`{"cniVersion":"1.0.0","type":"kos","subnet":%q}`, subnet)
}

// existing returns the attachment the controller makes for pod's interface
// in subnet, as the server holds it.
func existing(pod *corev1.Pod, ifname, subnet string) *v1alpha1.NetworkAttachment {
	return existingAt(pod, ifname, subnet, "")
}

// existingAt is existing for an interface that asks for address ipv4.
func existingAt(pod *corev1.Pod, ifname, subnet, ipv4 string) *v1alpha1.NetworkAttachment {
	name := v1alpha1.AttachmentName(pod.Name, ifname)
	a := newAttachment(pod, name, ifname, subnet, ipv4)
	a.UID = types.UID(name + "-" + string(pod.UID))
	a.ResourceVersion = "5"
	return a
}

// plugged returns a with the address ipv4 and the interface the node's
// agent reports once a sandbox may use it.
func plugged(a *v1alpha1.NetworkAttachment, ipv4 string) *v1alpha1.NetworkAttachment {
	a.Status.IPv4 = ipv4
	a.Status.AddressVNI = 7
	a.Status.MACAddress = "02:00:0a:01:00:05"
	a.Status.IfcName = "kos0200a010005"
	a.Status.HostIP = "192.0.2.1"
	return a
}

// fixture is a controller whose caches hold the objects given, on fake
// clientsets; the informers never start, so only sync runs.
type fixture struct {
	c        *Controller
	client   *fake.Clientset
	recorder *record.FakeRecorder
}

func newFixture(t *testing.T, pods []*corev1.Pod, nads []*unstructured.Unstructured, atts []*v1alpha1.NetworkAttachment) *fixture {
	t.Helper()
	var objs []runtime.Object
	for _, a := range atts {
		objs = append(objs, a)
	}
	client := fake.NewSimpleClientset(objs...)
	kosInformers := externalversions.NewSharedInformerFactory(client, 0).Network().V1alpha1().NetworkAttachments()
	podInformer := informers.NewSharedInformerFactory(kubefake.NewClientset(), 0).Core().V1().Pods()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{NetworkAttachmentDefinitions: "NetworkAttachmentDefinitionList"})
	nadInformer := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0).ForResource(NetworkAttachmentDefinitions)
	recorder := record.NewFakeRecorder(100)
	c, err := NewController(client, podInformer, nadInformer, kosInformers, recorder)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.queue.ShutDown)
	add := func(store cache.Store, obj any) {
		if err := store.Add(obj); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range pods {
		add(podInformer.Informer().GetStore(), p)
	}
	for _, n := range nads {
		add(nadInformer.Informer().GetStore(), n)
	}
	for _, a := range atts {
		add(kosInformers.Informer().GetStore(), a.DeepCopy())
	}
	return &fixture{c: c, client: client, recorder: recorder}
}

// writes returns the creates and deletes the controller sent, as
// "create <name>" (with " at <spec.ipv4>" when set) and "delete <name>".
func (f *fixture) writes() []string {
	var out []string
	for _, a := range f.client.Actions() {
		switch a := a.(type) {
		case k8stesting.CreateAction:
			att := a.GetObject().(*v1alpha1.NetworkAttachment)
			w := "create " + att.Name
			if att.Spec.IPv4 != "" {
				w += " at " + att.Spec.IPv4
			}
			out = append(out, w)
		case k8stesting.DeleteAction:
			out = append(out, "delete "+a.GetName())
		}
	}
	return out
}

// events returns the events recorded so far.
func (f *fixture) events() []string {
	var out []string
	for {
		select {
		case e := <-f.recorder.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}
