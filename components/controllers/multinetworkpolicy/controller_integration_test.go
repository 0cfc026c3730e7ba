package multinetworkpolicy_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/kos-sdn/kos/components/apis/multinetworkpolicy/v1beta1"
	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/controllermanager"
	"github.com/kos-sdn/kos/components/controllers/multinetworkpolicy"
	"github.com/kos-sdn/kos/components/controllers/podnetwork"
	"github.com/kos-sdn/kos/components/generated/clientset/versioned"
	"github.com/kos-sdn/kos/components/generated/informers/externalversions"
	"github.com/kos-sdn/kos/tools/poll"
	"github.com/kos-sdn/kos/tools/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestIntegrationEvents runs the controller against a real kube-apiserver,
// with the NetworkAttachmentDefinition and MultiNetworkPolicy CRDs, and
// kos-apiserver, behind the controller manager's subnet validator, IPAM and
// pod-network controller: pods bound to a node by hand (nothing runs them)
// get attachments and addresses, the policies' Events say how many of
// them each policy selects, and what it cannot honour, and the node's
// NodeNetworkPolicy follows the pods and policies.
func TestIntegrationEvents(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	env := testenv.Shared(t)
	kosSrv, err := env.StartKOS(ctx, testenv.KOSOptions{})
	if err != nil {
		t.Fatalf("starting kos-apiserver: %v", err)
	}
	kube, err := kubernetes.NewForConfig(env.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(env.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	kos, err := versioned.NewForConfig(kosSrv.DirectConfig)
	if err != nil {
		t.Fatal(err)
	}
	for file, gvr := range map[string]schema.GroupVersionResource{
		"tools/multus/testdata/network-attachment-definitions.yaml": podnetwork.NetworkAttachmentDefinitions,
		"docs/multi-networkpolicy-crd.yaml":                         v1beta1.MultiNetworkPolicies,
	} {
		if err := testenv.InstallCRD(ctx, dyn, file, gvr); err != nil {
			t.Fatal(err)
		}
	}

	m, err := controllermanager.Config{Kube: env.RESTConfig, KOS: kosSrv.DirectConfig,
		SubnetValidatorWorkers: 1, IPAMWorkers: 1, PodNetworks: true, PodNetworkWorkers: 1}.Complete().New()
	if err != nil {
		t.Fatal(err)
	}
	managerDone := make(chan error, 1)
	go func() { managerDone <- m.Run(ctx) }()
	controllerDone := startController(ctx, t, kube, dyn, kos)
	t.Cleanup(func() {
		cancel()
		if err := <-managerDone; err != nil {
			t.Errorf("controller manager: %v", err)
		}
		if err := <-controllerDone; err != nil {
			t.Errorf("controller: %v", err)
		}
	})

	nsObj, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "mnp-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns := nsObj.Name
	// Without kube-controller-manager, no one makes the ServiceAccount that
	// admission wants pods to have.
	if _, err := kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := kos.NetworkV1alpha1().Subnets(ns).Create(ctx, &v1alpha1.Subnet{
		ObjectMeta: metav1.ObjectMeta{Name: "blue"}, Spec: v1alpha1.SubnetSpec{IPv4: "10.180.0.0/24", VNI: 180},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	nads := dyn.Resource(podnetwork.NetworkAttachmentDefinitions).Namespace(ns)
	for name, config := range map[string]string{
		"blue": `{"cniVersion":"1.0.0","type":"kos","subnet":"blue"}`,
		"mac":  `{"cniVersion":"1.0.0","type":"macvlan","master":"eth0"}`,
	} {
		create(t, nads, map[string]any{"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
			"metadata": map[string]any{"name": name}, "spec": map[string]any{"config": config}})
	}
	pods := kube.CoreV1().Pods(ns)
	for name, app := range map[string]string{"web-0": "web", "web-1": "web", "client": "client"} {
		createPod(t, pods, name, app)
	}

	policies := dyn.Resource(v1beta1.MultiNetworkPolicies).Namespace(ns)
	policy := func(name, policyFor string, ingress ...any) {
		create(t, policies, map[string]any{"apiVersion": "k8s.cni.cncf.io/v1beta1", "kind": "MultiNetworkPolicy",
			"metadata": map[string]any{"name": name, "annotations": map[string]any{v1beta1.PolicyForAnnotation: policyFor}},
			"spec":     map[string]any{"podSelector": map[string]any{"matchLabels": map[string]any{"app": "web"}}, "ingress": ingress}})
	}
	policy("web", "blue", map[string]any{"from": []any{map[string]any{"podSelector": map[string]any{"matchLabels": map[string]any{"app": "client"}}}}})
	policy("v6", ns+"/blue", map[string]any{"from": []any{map[string]any{"ipBlock": map[string]any{"cidr": "fd00::/64"}}}})
	policy("mac", "mac")

	waitEvent(t, kube, ns, "web", "Normal Applied Applies to 2 pods on "+ns+"/blue (KOS network 180).")
	waitEvent(t, kube, ns, "v6", "Warning NotHonoured spec.ingress[0].from[0].ipBlock: cidr fd00::/64 is not IPv4, and KOS networks are IPv4 only; the peer allows nothing.")
	addrs := addresses(t, kos, ns)
	// web's rule admits client; v6's admits nothing, so it has no rule.
	wantSpec := func(web ...string) v1alpha1.NodeNetworkPolicySpec {
		var selected []string
		for _, p := range web {
			selected = append(selected, addrs[p])
		}
		slices.SortFunc(selected, func(a, b string) int { return netip.MustParseAddr(a).Compare(netip.MustParseAddr(b)) })
		return v1alpha1.NodeNetworkPolicySpec{Node: "node-1", VNI: 180, Policies: []v1alpha1.PolicyModel{
			{Name: ns + "/v6", Selected: selected, Ingress: true},
			{Name: ns + "/web", Selected: selected, Ingress: true, IngressRules: []v1alpha1.PolicyRule{{Peers: []v1alpha1.PolicyPeer{{CIDR: addrs["client"] + "/32"}}}}},
		}}
	}
	waitPublished(t, kos, ns, map[string]v1alpha1.NodeNetworkPolicySpec{"180.node-1": wantSpec("web-0", "web-1")})

	if err := pods.Delete(ctx, "web-1", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, kube, ns, "web", "Normal Applied Applies to 1 pod on "+ns+"/blue (KOS network 180).")
	waitPublished(t, kos, ns, map[string]v1alpha1.NodeNetworkPolicySpec{"180.node-1": wantSpec("web-0")})
	for _, name := range []string{"web", "v6"} {
		if err := policies.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitPublished(t, kos, ns, map[string]v1alpha1.NodeNetworkPolicySpec{})
	// Another plugin's policy gets no Event; by now, the controller has
	// synced it many times.
	if got := events(t, kube, ns, "mac"); len(got) > 0 {
		t.Errorf("the policy of another plugin's network got Events %q", got)
	}
}

// startController runs the controller with informers of its own until ctx
// ends; the channel returns what Run returned.
func startController(ctx context.Context, t *testing.T, kube kubernetes.Interface, dyn dynamic.Interface, kos versioned.Interface) <-chan error {
	t.Helper()
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	recorder := broadcaster.NewRecorder(runtime.NewScheme(), corev1.EventSource{Component: "multinetworkpolicy-test"})
	kubeFactory := kubeinformers.NewSharedInformerFactoryWithOptions(kube, 0, multinetworkpolicy.PodInformerOptions()...)
	dynFactory := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
	kosFactory := externalversions.NewSharedInformerFactory(kos, 0)
	c, err := multinetworkpolicy.NewController(dynFactory.ForResource(v1beta1.MultiNetworkPolicies), dynFactory.ForResource(podnetwork.NetworkAttachmentDefinitions),
		kubeFactory.Core().V1().Pods(), kubeFactory.Core().V1().Namespaces(),
		kosFactory.Network().V1alpha1().Subnets(), kosFactory.Network().V1alpha1().NetworkAttachments(), recorder,
		multinetworkpolicy.Options{Publish: kos, NodePolicies: kosFactory.Network().V1alpha1().NodeNetworkPolicies()})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []interface{ Start(<-chan struct{}) }{kubeFactory, dynFactory, kosFactory} {
		f.Start(ctx.Done())
	}
	done := make(chan error, 1)
	go func() {
		err := c.Run(ctx, 2)
		kubeFactory.Shutdown()
		dynFactory.Shutdown()
		kosFactory.Shutdown()
		broadcaster.Shutdown()
		done <- err
	}()
	return done
}

// addresses returns the addresses of the pods' attachments in ns, by pod,
// once every pod has one.
func addresses(t *testing.T, kos versioned.Interface, ns string) map[string]string {
	t.Helper()
	var out map[string]string
	poll.Until(t, time.Minute, "every pod's attachment has an address", func(ctx context.Context) error {
		list, err := kos.NetworkV1alpha1().NetworkAttachments(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		out = map[string]string{}
		for _, a := range list.Items {
			if a.Status.IPv4 == "" {
				return fmt.Errorf("attachment %s has no address yet", a.Name)
			}
			out[strings.TrimSuffix(a.Name, "-net1")] = a.Status.IPv4
		}
		if len(out) < 3 {
			return fmt.Errorf("only %d attachments", len(out))
		}
		return nil
	})
	return out
}

// waitPublished waits until the NodeNetworkPolicies of ns are want, by
// name.
func waitPublished(t *testing.T, kos versioned.Interface, ns string, want map[string]v1alpha1.NodeNetworkPolicySpec) {
	t.Helper()
	poll.Until(t, time.Minute, "the NodeNetworkPolicies are the model", func(ctx context.Context) error {
		list, err := kos.NetworkV1alpha1().NodeNetworkPolicies(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		got := map[string]v1alpha1.NodeNetworkPolicySpec{}
		for _, p := range list.Items {
			got[p.Name] = p.Spec
		}
		if diff := cmp.Diff(got, want); diff != "" {
			return fmt.Errorf("(-got +want):\n%s", diff)
		}
		return nil
	})
}

func create(t *testing.T, r dynamic.ResourceInterface, obj map[string]any) {
	t.Helper()
	if _, err := r.Create(context.Background(), &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating %v: %v", obj["metadata"], err)
	}
}

// createPod creates a pod labelled app, bound to node-1, on blue.
func createPod(t *testing.T, pods typedcorev1.PodInterface, name, app string) {
	t.Helper()
	_, err := pods.Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": app},
			Annotations: map[string]string{podnetwork.NetworksAnnotation: "blue"}},
		Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "main", Image: "kos.example.com/pause:never-pulled"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod %s: %v", name, err)
	}
}

// events returns the Events of a MultiNetworkPolicy, as "type reason
// message".
func events(t *testing.T, kube kubernetes.Interface, ns, policy string) []string {
	t.Helper()
	list, err := kube.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{
		FieldSelector: fmt.Sprintf("involvedObject.kind=%s,involvedObject.name=%s", v1beta1.Kind, policy)})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		out = append(out, strings.Join([]string{e.Type, e.Reason, e.Message}, " "))
	}
	return out
}

func waitEvent(t *testing.T, kube kubernetes.Interface, ns, policy, want string) {
	t.Helper()
	poll.Until(t, time.Minute, fmt.Sprintf("policy %s gets the Event %q", policy, want), func(ctx context.Context) error {
		if got := events(t, kube, ns, policy); !slices.Contains(got, want) {
			return fmt.Errorf("it has %q", got)
		}
		return nil
	})
}
