package controllermanager_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/controllermanager"
	"github.com/kos-sdn/kos/components/controllers/podnetwork"
	"github.com/kos-sdn/kos/components/generated/clientset/versioned"
	"github.com/kos-sdn/kos/tools/poll"
	"github.com/kos-sdn/kos/tools/testenv"
)

// TestIntegrationPodNetworks runs the pod-network controller against a real
// kube-apiserver, with the NetworkAttachmentDefinition CRD, and
// kos-apiserver: pods bound to a node by hand (nothing runs them) get their
// attachments, which keep their UIDs and addresses through edits of the
// annotation and the definitions (which apply to new pods, as the pod's
// AttachmentKept events say) and go with the pod. No garbage collector
// runs: the deletions are the controller's. The manager runs as the
// ServiceAccount example-com/kos-controller-manager, which kos-apiserver
// lets delete pods' attachments, with the rights of
// testdata/pod-network-clusterrole.yaml alone.
func TestIntegrationPodNetworks(t *testing.T) {
	ctx := context.Background()
	env := testenv.Shared(t)
	c := kosClient(t)
	kube, err := kubernetes.NewForConfig(env.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(env.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	installDefinitionCRD(t, dyn)
	ns := newNamespace(t)
	token := managerToken(t, kube, ns, "testdata/pod-network-clusterrole.yaml")
	asManager := func(cfg *rest.Config) *rest.Config {
		c := rest.AnonymousClientConfig(cfg)
		c.BearerToken = token
		return c
	}
	startManagerWith(t, "manager", controllermanager.Config{
		Kube: asManager(env.RESTConfig), KOS: asManager(startKOS(t).DirectConfig),
		SubnetValidatorWorkers: 1, IPAMWorkers: 2, PodNetworks: true, PodNetworkWorkers: 2,
	})

	// Without kube-controller-manager, no one makes the ServiceAccount that
	// admission wants pods to have.
	if _, err := kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	blue := createSubnet(t, c, newSubnet(ns, "blue", "10.170.0.0/24", 170))
	red := createSubnet(t, c, newSubnet(ns, "red", "10.171.0.0/24", 171))
	waitValidated(t, c, blue, red)
	nads := dyn.Resource(podnetwork.NetworkAttachmentDefinitions).Namespace(ns)
	for name, config := range map[string]string{
		"blue": `{"cniVersion":"1.0.0","type":"kos","subnet":"blue"}`,
		"red":  `{"cniVersion":"1.0.0","type":"kos","subnet":"red"}`,
		"mac":  `{"cniVersion":"1.0.0","type":"macvlan","master":"eth0"}`,
	} {
		createDefinition(t, nads, name, config)
	}
	pods := kube.CoreV1().Pods(ns)

	web := createPod(t, pods, "web-0", "node-1", "blue, red@data0, mac")
	idle := createPod(t, pods, "idle", "", "blue")
	waitAttachments(t, c, ns, web, map[string]string{"web-0-net1": "blue", "web-0-data0": "red"})
	net1, err := c.NetworkV1alpha1().NetworkAttachments(ns).Get(ctx, "web-0-net1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantOwners := []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "web-0", UID: web.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(false)}}
	if diff := cmp.Diff(net1.OwnerReferences, wantOwners); diff != "" {
		t.Errorf("owner references (-got +want):\n%s", diff)
	}
	if diff := cmp.Diff(net1.Spec, v1alpha1.NetworkAttachmentSpec{Node: "node-1", Subnet: "blue"}); diff != "" {
		t.Errorf("spec (-got +want):\n%s", diff)
	}
	poll.Until(t, time.Minute, "IPAM addresses the pod's attachments", func(ctx context.Context) error {
		for _, name := range []string{"web-0-net1", "web-0-data0"} {
			a, err := c.NetworkV1alpha1().NetworkAttachments(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if a.Status.IPv4 == "" {
				return fmt.Errorf("%s has no address yet", name)
			}
		}
		return nil
	})

	// Edits apply to new sandboxes: the definition red moves to subnet
	// blue, and the annotation drops net1 and gives data0 the definition
	// blue; both attachments have addresses, so a sandbox may be using
	// them, and they stay as they are.
	before := map[string]*v1alpha1.NetworkAttachment{}
	for _, name := range []string{"web-0-net1", "web-0-data0"} {
		a, err := c.NetworkV1alpha1().NetworkAttachments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		before[name] = a
	}
	updateDefinition(t, nads, "red", `{"cniVersion":"1.0.0","type":"kos","subnet":"blue"}`)
	waitEventMessage(t, kube, ns, "web-0", podnetwork.ReasonAttachmentKept, fmt.Sprintf(
		"Kept NetworkAttachment web-0-data0 (subnet red, address %s) of the running interface data0, which now asks for subnet blue on node node-1: a change applies to new sandboxes only; re-create the pod to apply it",
		before["web-0-data0"].Status.IPv4))
	annotate(t, pods, "web-0", "blue@data0")
	waitEventMessage(t, kube, ns, "web-0", podnetwork.ReasonAttachmentKept, fmt.Sprintf(
		"Kept NetworkAttachment web-0-net1 (subnet blue, address %s) of the running interface net1, which the pod no longer asks for: a change applies to new sandboxes only; the attachment goes with the pod",
		before["web-0-net1"].Status.IPv4))
	for name, was := range before {
		a, err := c.NetworkV1alpha1().NetworkAttachments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("%s after the edits: %v", name, err)
		}
		if a.UID != was.UID || !cmp.Equal(a.Spec, was.Spec) || a.Status.IPv4 != was.Status.IPv4 {
			t.Errorf("%s after the edits: UID %s, spec %+v, address %s; want UID %s, spec %+v, address %s", name, a.UID, a.Spec, a.Status.IPv4, was.UID, was.Spec, was.Status.IPv4)
		}
	}
	// A new pod takes the definition as it is now.
	web1 := createPod(t, pods, "web-1", "node-2", "red")
	waitAttachments(t, c, ns, web1, map[string]string{"web-1-net1": "blue"})

	// A definition created after the pod that names it.
	late := createPod(t, pods, "late", "node-2", "green")
	waitEvent(t, kube, ns, "late", podnetwork.ReasonNetworkNotFound)
	createDefinition(t, nads, "green", `{"cniVersion":"1.0.0","type":"kos","subnet":"red"}`)
	waitAttachments(t, c, ns, late, map[string]string{"late-net1": "red"})

	// A pod that finishes loses its attachments.
	late.Status.Phase = corev1.PodSucceeded
	if _, err := pods.UpdateStatus(ctx, late, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitAttachments(t, c, ns, late, nil)

	// A pod being deleted (nothing runs it, so it stays until forced) gets
	// no new attachment: the sync that keeps data0 creates no net2. Once
	// gone, it loses its attachments.
	if err := pods.Delete(ctx, "web-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if p, err := pods.Get(ctx, "web-0", metav1.GetOptions{}); err != nil || p.DeletionTimestamp == nil {
		t.Fatalf("web-0 after a graceful delete: %v, %v; want it terminating", p, err)
	}
	annotate(t, pods, "web-0", "mac, red")
	waitEventMessage(t, kube, ns, "web-0", podnetwork.ReasonAttachmentKept, "Kept NetworkAttachment web-0-data0 (subnet red, address "+before["web-0-data0"].Status.IPv4+") of the running interface data0, which the pod no longer asks for")
	waitAttachments(t, c, ns, web, map[string]string{"web-0-net1": "blue", "web-0-data0": "red"})
	for _, p := range []string{"web-0", "web-1"} {
		if err := pods.Delete(ctx, p, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
	}
	waitAttachments(t, c, ns, web, nil)
	waitAttachments(t, c, ns, web1, nil)

	events, err := kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		if e.InvolvedObject.Name == "web-0" && e.Reason == podnetwork.ReasonAttachmentCreated && strings.Contains(e.Message, "web-0-net2") {
			t.Errorf("terminating pod web-0 got an attachment: %s", e.Message)
		}
	}

	// The unbound pod never got any, nor did anyone else.
	list, err := c.NetworkV1alpha1().NetworkAttachments(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 0 {
		t.Fatalf("%d attachments left in %s, such as %s for pod %s; want none (pod %s is unbound)",
			len(list.Items), ns, list.Items[0].Name, list.Items[0].Annotations[v1alpha1.PodAnnotation], idle.Name)
	}
	// Unused now, the subnets may go, and VNIs 170 and 171 are free for a
	// run with -count.
	for _, s := range []*v1alpha1.Subnet{blue, red} {
		if err := c.NetworkV1alpha1().Subnets(ns).Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("deleting subnet %s once unused: %v", s.Name, err)
		}
	}
}

// managerToken binds the ServiceAccount example-com/kos-controller-manager
// (made unless it exists), the identity kos-apiserver lets delete pods'
// attachments by default, to the ClusterRole of roleFile, such as
// testdata/pod-network-clusterrole.yaml, and returns a token of it. The
// binding is named after ns, the namespace of the test.
func managerToken(t *testing.T, kube kubernetes.Interface, ns, roleFile string) string {
	t.Helper()
	ctx := context.Background()
	data, err := os.ReadFile(roleFile)
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.ClusterRole
	if err := yaml.UnmarshalStrict(data, &role); err != nil {
		t.Fatalf("reading the cluster role: %v", err)
	}
	if _, err := kube.RbacV1().ClusterRoles().Create(ctx, &role, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		_, err = kube.RbacV1().ClusterRoles().Update(ctx, &role, metav1.UpdateOptions{})
		if err != nil {
			t.Fatalf("updating cluster role %s: %v", role.Name, err)
		}
	} else if err != nil {
		t.Fatalf("creating cluster role %s: %v", role.Name, err)
	}
	const saNamespace = "example-com"
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: saNamespace, Name: "kos-controller-manager"}}
	if _, err := kube.CoreV1().ServiceAccounts(saNamespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name + "-" + ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: saNamespace, Name: sa.Name}},
	}
	if _, err := kube.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
	})
	tr, err := kube.CoreV1().ServiceAccounts(saNamespace).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("requesting a token: %v", err)
	}
	return tr.Status.Token
}

// installDefinitionCRD creates the NetworkAttachmentDefinition CRD the
// test cluster's Multus reads, unless it exists, and waits until it is served.
func installDefinitionCRD(t *testing.T, dyn dynamic.Interface) {
	t.Helper()
	if err := testenv.InstallCRD(context.Background(), dyn, "tools/multus/testdata/network-attachment-definitions.yaml", podnetwork.NetworkAttachmentDefinitions); err != nil {
		t.Fatal(err)
	}
}

func createDefinition(t *testing.T, nads dynamic.ResourceInterface, name, config string) {
	t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "k8s.cni.cncf.io/v1",
		"kind":       "NetworkAttachmentDefinition",
		"metadata":   map[string]any{"name": name},
		"spec":       map[string]any{"config": config},
	}}
	if _, err := nads.Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating NetworkAttachmentDefinition %s: %v", name, err)
	}
}

// createPod creates a pod bound to node ("" leaves it unbound) with the
// networks annotation.
func createPod(t *testing.T, pods typedcorev1.PodInterface, name, node, networks string) *corev1.Pod {
	t.Helper()
	p, err := pods.Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{podnetwork.NetworksAnnotation: networks}},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "main", Image: "kos.example.com/pause:never-pulled"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod %s: %v", name, err)
	}
	return p
}

// annotate sets a pod's networks annotation.
func annotate(t *testing.T, pods typedcorev1.PodInterface, name, networks string) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, podnetwork.NetworksAnnotation, networks)
	if _, err := pods.Patch(context.Background(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("annotating pod %s: %v", name, err)
	}
}

// waitAttachments waits until the attachments of pod (by its UID label) are
// those of want, names to subnets, each on the pod's node.
func waitAttachments(t *testing.T, c versioned.Interface, ns string, pod *corev1.Pod, want map[string]string) {
	t.Helper()
	var wantNames []string
	for name := range want {
		wantNames = append(wantNames, name)
	}
	slices.Sort(wantNames)
	poll.Until(t, time.Minute, fmt.Sprintf("pod %s has attachments %q", pod.Name, wantNames), func(ctx context.Context) error {
		list, err := c.NetworkV1alpha1().NetworkAttachments(ns).List(ctx, metav1.ListOptions{
			LabelSelector: v1alpha1.PodUIDLabel + "=" + string(pod.UID),
		})
		if err != nil {
			return err
		}
		got := map[string]string{}
		for _, a := range list.Items {
			if a.Spec.Node != pod.Spec.NodeName {
				return fmt.Errorf("attachment %s is on node %s, want %s", a.Name, a.Spec.Node, pod.Spec.NodeName)
			}
			got[a.Name] = a.Spec.Subnet
		}
		if diff := cmp.Diff(got, want, cmpopts.EquateEmpty()); diff != "" {
			return fmt.Errorf("attachments to subnets (-got +want):\n%s", diff)
		}
		return nil
	})
}

// updateDefinition sets the CNI configuration of a definition.
func updateDefinition(t *testing.T, nads dynamic.ResourceInterface, name, config string) {
	t.Helper()
	u, err := nads.Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(u.Object, config, "spec", "config"); err != nil {
		t.Fatal(err)
	}
	if _, err := nads.Update(context.Background(), u, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("updating NetworkAttachmentDefinition %s: %v", name, err)
	}
}

// waitEventMessage waits for an Event of reason on the pod whose message
// holds message.
func waitEventMessage(t *testing.T, kube kubernetes.Interface, ns, pod, reason, message string) {
	t.Helper()
	poll.Until(t, time.Minute, fmt.Sprintf("a %s event on pod %s saying %q", reason, pod, message), func(ctx context.Context) error {
		events, err := kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		var seen []string
		for _, e := range events.Items {
			if e.InvolvedObject.Kind == "Pod" && e.InvolvedObject.Name == pod && e.Reason == reason {
				if strings.Contains(e.Message, message) {
					return nil
				}
				seen = append(seen, e.Message)
			}
		}
		return fmt.Errorf("%s events of pod %s: %q", reason, pod, seen)
	})
}

// waitEvent waits for an Event of reason on the pod.
func waitEvent(t *testing.T, kube kubernetes.Interface, ns, pod, reason string) {
	t.Helper()
	poll.Until(t, time.Minute, fmt.Sprintf("a %s event on pod %s", reason, pod), func(ctx context.Context) error {
		events, err := kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		var seen []string
		for _, e := range events.Items {
			if e.InvolvedObject.Kind == "Pod" && e.InvolvedObject.Name == pod {
				if e.Reason == reason {
					t.Logf("event on pod %s: %s %s", pod, e.Reason, e.Message)
					return nil
				}
				seen = append(seen, e.Reason)
			}
		}
		return fmt.Errorf("events of pod %s: %q", pod, seen)
	})
}
