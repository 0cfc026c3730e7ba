package apiserver_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	kosclient "github.com/kos-sdn/kos/components/generated/clientset/versioned"
	"github.com/kos-sdn/kos/tools/testenv"
)

// TestIntegrationNodeRestriction checks the NodeRestriction admission plugin
// with real service-account tokens of the main cluster: the kos-agent
// ServiceAccount of example-com (the default agent identity), a token bound
// to a Pod on a Node (so kube-apiserver puts the node in the user's extra),
// and a token bound to nothing. The tokens reach kos-apiserver through the
// aggregator (X-Remote-Extra- headers) and directly (TokenReview).
func TestIntegrationNodeRestriction(t *testing.T) {
	env := testenv.Shared(t)
	ctx := context.Background()
	kos := startKOS(t, testenv.KOSOptions{Name: "nodes"})
	kube, err := kubernetes.NewForConfig(env.RESTConfig)
	if err != nil {
		t.Fatalf("creating a client: %v", err)
	}
	const agentNS, agentSA = "example-com", "kos-agent"
	suffix := fmt.Sprint(kosServers.Load()) // tells the objects of -count runs apart
	nodeA, nodeB := "nr-node-a-"+suffix, "nr-node-b-"+suffix

	// The agent's ServiceAccount and rights as the kos-agent addon grants
	// them; the nodes; and a pod of the agent on node A, which never runs.
	create := func(what string, err error) {
		t.Helper()
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("creating %s: %v", what, err)
		}
	}
	_, err = kube.CoreV1().ServiceAccounts(agentNS).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: agentSA}}, metav1.CreateOptions{})
	create("the agent's service account", err)
	_, err = kube.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "kos-agent-noderestriction-test"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{v1alpha1.GroupName}, Resources: []string{"networkattachments"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{v1alpha1.GroupName}, Resources: []string{"networkattachments/status"}, Verbs: []string{"update"}},
		},
	}, metav1.CreateOptions{})
	create("the agent's cluster role", err)
	_, err = kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "kos-agent-noderestriction-test"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "kos-agent-noderestriction-test"},
		Subjects: []rbacv1.Subject{
			{Kind: rbacv1.ServiceAccountKind, Namespace: agentNS, Name: agentSA},
			{Kind: rbacv1.ServiceAccountKind, Namespace: "kos-node", Name: agentSA}, // the agent since 0.2.0
		},
	}, metav1.CreateOptions{})
	create("the agent's cluster role binding", err)
	for _, n := range []string{nodeA, nodeB} {
		_, err := kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{})
		create("node "+n, err)
		t.Cleanup(func() { _ = kube.CoreV1().Nodes().Delete(context.Background(), n, metav1.DeleteOptions{}) })
	}
	pod, err := kube.CoreV1().Pods(agentNS).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "kos-agent-"},
		Spec: corev1.PodSpec{
			NodeName:           nodeA,
			ServiceAccountName: agentSA,
			Containers:         []corev1.Container{{Name: "kos-agent", Image: "kos.example.com/kos-agent:never-runs"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating the agent's pod: %v", err)
	}
	t.Cleanup(func() {
		zero := int64(0)
		_ = kube.CoreV1().Pods(agentNS).Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	})

	token := func(bound *authenticationv1.BoundObjectReference) string {
		t.Helper()
		expiry := int64(600)
		tr, err := kube.CoreV1().ServiceAccounts(agentNS).CreateToken(ctx, agentSA, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry, BoundObjectRef: bound},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("requesting a token: %v", err)
		}
		return tr.Status.Token
	}
	podToken := token(&authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID})
	unboundToken := token(nil)
	withToken := func(cfg *rest.Config, tok string) *kosclient.Clientset {
		c := rest.AnonymousClientConfig(cfg)
		c.BearerToken = tok
		return kosClient(t, c)
	}
	admin := kosClient(t, env.RESTConfig)
	agents := map[string]*kosclient.Clientset{
		"aggregated": withToken(env.RESTConfig, podToken),
		"direct":     withToken(kos.DirectConfig, podToken),
	}
	unbound := withToken(env.RESTConfig, unboundToken)

	ns := newNamespace(t)
	mustCreateSubnet(t, admin, newSubnet(ns, "s1", "10.90.0.0/24", 90))
	onA := mustCreateAttachment(t, admin, newAttachment(ns, "on-a", nodeA, "s1"))
	onB := mustCreateAttachment(t, admin, newAttachment(ns, "on-b", nodeB, "s1"))
	// The controller manager's part: an address, written by the admin.
	for _, att := range []*v1alpha1.NetworkAttachment{onA, onB} {
		att.Status.IPv4, att.Status.AddressVNI = "10.90.0.5", 90
		if _, err := admin.NetworkV1alpha1().NetworkAttachments(ns).UpdateStatus(ctx, att, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("writing the address of %s as the admin: %v", att.Name, err)
		}
	}
	writeStatus := func(c *kosclient.Clientset, name string, change func(*v1alpha1.NetworkAttachmentStatus)) error {
		att, err := admin.NetworkV1alpha1().NetworkAttachments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("reading %s: %v", name, err)
		}
		change(&att.Status)
		_, err = c.NetworkV1alpha1().NetworkAttachments(ns).UpdateStatus(ctx, att, metav1.UpdateOptions{})
		return err
	}
	setImpl := func(hostIP string) func(*v1alpha1.NetworkAttachmentStatus) {
		return func(st *v1alpha1.NetworkAttachmentStatus) {
			st.MACAddress, st.IfcName, st.HostIP = "06:00:0a:5a:00:05", "kos5", hostIP
		}
	}
	refused := func(t *testing.T, err error, want string) {
		t.Helper()
		if !apierrors.IsForbidden(err) {
			t.Fatalf("got %v, want Forbidden", err)
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}

	for path, agent := range agents {
		t.Run(path, func(t *testing.T) {
			hostIP := map[string]string{"aggregated": "192.168.9.1", "direct": "192.168.9.2"}[path]
			// The main cluster's RBAC reaches the delegated authorizer within
			// moments.
			err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
				err := writeStatus(agent, onA.Name, setImpl(hostIP))
				if err != nil {
					t.Logf("writing the interface of its own node's attachment: %v", err)
				}
				return err == nil, nil
			})
			if err != nil {
				t.Fatalf("the agent of node A could not write the interface of an attachment on node A in 20s")
			}
			got, err := admin.NetworkV1alpha1().NetworkAttachments(ns).Get(ctx, onA.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("reading %s: %v", onA.Name, err)
			}
			if got.Status.HostIP != hostIP || got.Status.IPv4 != "10.90.0.5" {
				t.Errorf("status after the agent's write: hostIP %q, ipv4 %q; want %q, 10.90.0.5", got.Status.HostIP, got.Status.IPv4, hostIP)
			}
			if err := writeStatus(agent, onA.Name, func(st *v1alpha1.NetworkAttachmentStatus) {
				st.PostCreateExecReport = &v1alpha1.ExecReport{Command: []string{"/bin/true"}, ExitStatus: 0}
			}); err != nil {
				t.Errorf("writing the exec report of its own node's attachment: %v", err)
			}

			refused(t, writeStatus(agent, onB.Name, setImpl(hostIP)), fmt.Sprintf(
				`networkattachments.network.example.com "on-b" is forbidden: agent "system:serviceaccount:example-com:kos-agent" of node %q may not write the status of attachment %s/on-b, which is on node %q`,
				nodeA, ns, nodeB))
			refused(t, writeStatus(agent, onA.Name, func(st *v1alpha1.NetworkAttachmentStatus) { st.IPv4, st.AddressVNI = "", 0 }),
				fmt.Sprintf(`may not change section status.address of the status of attachment %s/on-a; it may change only status.execReport and status.impl`, ns))
			refused(t, writeStatus(agent, onA.Name, func(st *v1alpha1.NetworkAttachmentStatus) { st.Errors.IPAM = []string{"taken"} }),
				`may not change section status.address`)
		})
	}

	t.Run("unbound token", func(t *testing.T) {
		refused(t, writeStatus(unbound, onA.Name, setImpl("192.168.9.3")), fmt.Sprintf(
			`agent "system:serviceaccount:example-com:kos-agent" may write the status of attachment %s/on-a only with a token bound to a pod on node %q, but its credentials name no node`,
			ns, nodeA))
	})

	t.Run("admin", func(t *testing.T) {
		if err := writeStatus(admin, onB.Name, func(st *v1alpha1.NetworkAttachmentStatus) {
			// An address may be cleared, not changed to another.
			st.IPv4, st.AddressVNI = "", 0
			setImpl("192.168.9.4")(st)
		}); err != nil {
			t.Errorf("the admin writing address and interface: %v", err)
		}
	})

	// Reads: an agent lists and watches its node's attachments, and those
	// of the networks its node is in, as kos-agent does; nothing else.
	mustCreateSubnet(t, admin, newSubnet(ns, "s2", "10.95.0.0/24", 95))
	peer := mustCreateAttachment(t, admin, newAttachment(ns, "peer", nodeB, "s1"))
	elsewhere := mustCreateAttachment(t, admin, newAttachment(ns, "elsewhere", nodeB, "s2"))
	peer.Status.IPv4, peer.Status.AddressVNI = "10.90.0.6", 90
	elsewhere.Status.IPv4, elsewhere.Status.AddressVNI = "10.95.0.5", 95
	for _, att := range []*v1alpha1.NetworkAttachment{peer, elsewhere} {
		if _, err := admin.NetworkV1alpha1().NetworkAttachments(ns).UpdateStatus(ctx, att, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("writing the address of %s as the admin: %v", att.Name, err)
		}
	}
	agentName := "system:serviceaccount:example-com:kos-agent"
	for path, agent := range agents {
		t.Run("reads/"+path, func(t *testing.T) {
			testAgentReads(t, agent, agentName, ns, nodeA, nodeB)
		})
	}
	t.Run("reads/unbound token", func(t *testing.T) {
		_, err := unbound.NetworkV1alpha1().NetworkAttachments("").List(ctx, metav1.ListOptions{FieldSelector: "spec.node=" + nodeA})
		refused(t, err, `agent "system:serviceaccount:example-com:kos-agent" may list NetworkAttachments only with a token bound to a pod on a node, but its credentials name no node`)
	})
	t.Run("reads/agent of 0.2.0", func(t *testing.T) {
		// kos-agent 0.2.0 runs as kos-node/kos-agent, which the default
		// --agent-identities names too.
		_, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kos-node"}}, metav1.CreateOptions{})
		create("namespace kos-node", err)
		_, err = kube.CoreV1().ServiceAccounts("kos-node").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: agentSA}}, metav1.CreateOptions{})
		create("the 0.2.0 agent's service account", err)
		pod, err := kube.CoreV1().Pods("kos-node").Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "kos-agent-"},
			Spec: corev1.PodSpec{
				NodeName:           nodeA,
				ServiceAccountName: agentSA,
				Containers:         []corev1.Container{{Name: "kos-agent", Image: "kos.example.com/kos-agent:never-runs"}},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating the 0.2.0 agent's pod: %v", err)
		}
		t.Cleanup(func() {
			zero := int64(0)
			_ = kube.CoreV1().Pods("kos-node").Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		})
		expiry := int64(600)
		tr, err := kube.CoreV1().ServiceAccounts("kos-node").CreateToken(ctx, agentSA, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry, BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("requesting a token: %v", err)
		}
		agent := withToken(kos.DirectConfig, tr.Status.Token).NetworkV1alpha1().NetworkAttachments("")
		err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
			_, err := agent.List(ctx, metav1.ListOptions{FieldSelector: "spec.node=" + nodeA})
			return err == nil, nil
		})
		if err != nil {
			t.Fatalf("the 0.2.0 agent of node A could not list its node's attachments in 20s")
		}
		_, err = agent.List(ctx, metav1.ListOptions{FieldSelector: "spec.node=" + nodeB})
		refused(t, err, fmt.Sprintf(`agent "system:serviceaccount:kos-node:kos-agent" of node %q may not list the attachments of node %q`, nodeA, nodeB))
	})
	t.Run("reads/admin", func(t *testing.T) {
		list, err := admin.NetworkV1alpha1().NetworkAttachments("").List(ctx, metav1.ListOptions{})
		if err != nil || len(list.Items) < 3 {
			t.Errorf("the admin listing every attachment: %v", err)
		}
	})
}

// testAgentReads checks what agent, the agent user name of node nodeA, may
// read of the attachments of namespace ns: on-a on node A and peer on node
// B in VNI 90, and elsewhere on node B in VNI 95.
func testAgentReads(t *testing.T, agent *kosclient.Clientset, agentName, ns, nodeA, nodeB string) {
	ctx := context.Background()
	refused := func(t *testing.T, err error, want string) {
		t.Helper()
		if !apierrors.IsForbidden(err) {
			t.Fatalf("got %v, want Forbidden", err)
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	all, inNS := agent.NetworkV1alpha1().NetworkAttachments(""), agent.NetworkV1alpha1().NetworkAttachments(ns)

	// What kos-agent asks for: its node's attachments in every namespace,
	// and a network's attachments with a host.
	list, err := all.List(ctx, metav1.ListOptions{FieldSelector: "spec.node=" + nodeA})
	if err != nil {
		t.Fatalf("listing its own node's attachments: %v", err)
	}
	if len(list.Items) != 1 || list.Items[0].Name != "on-a" {
		t.Errorf("its own node's attachments: got %d, want on-a alone", len(list.Items))
	}
	if _, err := inNS.List(ctx, metav1.ListOptions{FieldSelector: "status.addressVNI=90,status.hostIP!="}); err != nil {
		t.Errorf("listing the attachments of its network: %v", err)
	}
	w, err := inNS.Watch(ctx, metav1.ListOptions{FieldSelector: "status.addressVNI=90,status.hostIP!="})
	if err != nil {
		t.Errorf("watching the attachments of its network: %v", err)
	} else {
		w.Stop()
	}
	if _, err := inNS.List(ctx, metav1.ListOptions{FieldSelector: "spec.subnet=s1"}); err != nil {
		t.Errorf("listing the attachments of a subnet its node is in: %v", err)
	}
	if _, err := inNS.Get(ctx, "peer", metav1.GetOptions{}); err != nil {
		t.Errorf("getting another node's attachment in its network: %v", err)
	}

	// Everything else.
	_, err = all.List(ctx, metav1.ListOptions{FieldSelector: "spec.node=" + nodeB})
	refused(t, err, fmt.Sprintf(`agent %q of node %q may not list the attachments of node %q`, agentName, nodeA, nodeB))
	_, err = all.Watch(ctx, metav1.ListOptions{FieldSelector: "spec.node=" + nodeB})
	refused(t, err, fmt.Sprintf(`agent %q of node %q may not watch the attachments of node %q`, agentName, nodeA, nodeB))
	_, err = all.List(ctx, metav1.ListOptions{})
	refused(t, err, fmt.Sprintf(`agent %q of node %q may list NetworkAttachments only by a field selector spec.node=%s, or status.addressVNI=<VNI> or (in a namespace) spec.subnet=<subnet> of a network in which node %q has an attachment; "" in all namespaces names none`,
		agentName, nodeA, nodeA, nodeA))
	_, err = inNS.List(ctx, metav1.ListOptions{FieldSelector: "status.addressVNI=95"})
	refused(t, err, fmt.Sprintf(`"status.addressVNI=95" in namespace %s names none`, ns))
	_, err = inNS.List(ctx, metav1.ListOptions{FieldSelector: "spec.subnet=s2"})
	refused(t, err, `"spec.subnet=s2" in namespace`)
	_, err = inNS.Get(ctx, "elsewhere", metav1.GetOptions{})
	refused(t, err, fmt.Sprintf(`agent %q of node %q may not get attachment %s/elsewhere of node %q: node %q has no attachment in its network (namespace %s, VNI 95)`,
		agentName, nodeA, ns, nodeB, nodeA, ns))
}
