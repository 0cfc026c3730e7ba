package e2e

// This file holds TestIntegrationPolicyTruthTable, its state, its network
// and pods, and its first steps: MultiNetworkPolicy turned on and the
// table's pods started. The policies and the truth table's probes are in
// policy_truthtable_test.go; what an operator sees and how quickly writes
// take hold in policy_convergence_test.go.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/kos-sdn/kos/components/apis/multinetworkpolicy/v1beta1"
	networkv1alpha1 "github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/tools/figures"
	"github.com/kos-sdn/kos/tools/poll"
	"github.com/kos-sdn/kos/tools/testenv"
)

// The policy test's network: one CIDR and VNI no other test of its cluster
// uses.
const (
	policyCIDR = "10.253.0.0/24"
	policyVNI  = 4401
	// policyEchoPort is podnet's echo port (podnetPort + 1), which the
	// pods name "echo".
	policyEchoPort = "7778"
)

// TestIntegrationPolicyTruthTable takes the pods' shared cluster over
// (three nodes that run Multus, the standard release installed from its
// tree: takeSharedPods), turns MultiNetworkPolicy on as a 0.4.0 release
// is to (the CRD, kos-controller-manager's --multi-network-policy, and the
// rights docs/policy.md lists, granted to both the controller manager and
// the running agents), and checks a truth table as the Kubernetes
// network-policy e2e and cyclonus do: six pods in two namespaces (a
// network each) on the three nodes, twelve policies (policySet), and every
// (from, to, protocol, port) cell, TCP and UDP, probed by a real
// connection or datagram and compared with what an oracle written apart
// from the controller's compiler (policyWorld) says networking/v1 allows;
// then what an operator sees of it: the drops per policy in the agents'
// metrics and kubectl kos trace naming the policy; last, how long twenty
// policy writes take to be enforced on every node (figures
// policy-convergence-p50 and -p99), while an allowed TCP connection must
// live through them.
func TestIntegrationPolicyTruthTable(t *testing.T) {
	began := time.Now()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	s, _ := takeSharedPods(t, root)
	figures.Duration(t, "policy-cluster-up", time.Since(began))

	p := &policyTest{podsTest: &podsTest{standard: s, ips: map[string]netip.Addr{}}}
	runStepsDumping(t, func() {
		p.dumpState()
		for _, n := range policyNamespaces {
			p.dumpNamespace(n.name)
		}
		p.dumpFabrics()
	}, []step{
		{"the pods' image pushed", p.testPushPodnet},
		{"MultiNetworkPolicy turned on", p.testPolicyOn},
		{"pods get KOS interfaces", p.testPolicyPods},
		{"every cell of the truth table", p.testTruthTable},
		{"drops counted per policy, traces name the policy", p.testPolicySeen},
		{"writes enforced everywhere quickly, connections survive churn", p.testConvergence},
	})
	figures.Duration(t, "policy-whole-test", time.Since(began))
}

// policyTest is TestIntegrationPolicyTruthTable's state.
type policyTest struct {
	*podsTest
	dyn dynamic.Interface
	// world is what the truth table's oracle reads: the namespaces, the
	// pods with their addresses, the policies.
	world *policyWorld
}

// testPolicyOn installs the CRD, grants the rights and turns the
// controller on.
func (p *policyTest) testPolicyOn(t *testing.T) {
	ctx := t.Context()
	var err error
	if p.dyn, err = dynamic.NewForConfig(p.env.RESTConfig); err != nil {
		t.Fatal(err)
	}
	if err := testenv.InstallCRD(ctx, p.dyn, "docs/multi-networkpolicy-crd.yaml", v1beta1.MultiNetworkPolicies); err != nil {
		t.Fatal(err)
	}
	rbac := p.kube.RbacV1().ClusterRoles()
	for role, rules := range map[string]string{
		"kos-controller-manager": `[
			{"op":"add","path":"/rules/-","value":{"apiGroups":["k8s.cni.cncf.io"],"resources":["multi-networkpolicies"],"verbs":["get","list","watch"]}},
			{"op":"add","path":"/rules/-","value":{"apiGroups":[""],"resources":["namespaces"],"verbs":["get","list","watch"]}},
			{"op":"add","path":"/rules/-","value":{"apiGroups":["network.example.com"],"resources":["nodenetworkpolicies"],"verbs":["get","list","watch","create","update","delete"]}}]`,
		"kos-agent": `[
			{"op":"add","path":"/rules/-","value":{"apiGroups":["network.example.com"],"resources":["nodenetworkpolicies"],"verbs":["get","list","watch"]}}]`,
	} {
		if _, err := rbac.Patch(ctx, role, types.JSONPatchType, []byte(rules), metav1.PatchOptions{}); err != nil {
			t.Fatalf("granting ClusterRole %s the policy rights: %v", role, err)
		}
	}
	deployments := p.kube.AppsV1().Deployments("example-com")
	patch := `[{"op":"add","path":"/spec/template/spec/containers/0/args/-","value":"--multi-network-policy"}]`
	if _, err := deployments.Patch(ctx, "kos-controller-manager", types.JSONPatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("turning the MultiNetworkPolicy controller on: %v", err)
	}
	poll.Until(t, 5*time.Minute, "kos-controller-manager to roll out", func(ctx context.Context) error {
		d, err := deployments.Get(ctx, "kos-controller-manager", metav1.GetOptions{})
		if err != nil {
			return err
		}
		want := *d.Spec.Replicas
		if d.Status.ObservedGeneration < d.Generation || d.Status.UpdatedReplicas != want || d.Status.AvailableReplicas != want || d.Status.Replicas != want {
			return fmt.Errorf("generation %d observed %d, %d updated, %d available, %d in all, want %d",
				d.Generation, d.Status.ObservedGeneration, d.Status.UpdatedReplicas, d.Status.AvailableReplicas, d.Status.Replicas, want)
		}
		return nil
	})
	// The agents run on: an enforcer refused its list asks again every
	// 30 s (policy.DefaultRetry), and the truth table waits for them.
	p.waitKOSReady(t, 5*time.Minute)
}

// The truth table's namespaces, each with a network of its own: a KOS
// network and the pods on it live in one namespace (docs/policy.md), so a
// second namespace is a second network, and namespaceSelectors that select
// it select nobody on the first.
var policyNamespaces = []struct {
	name, team, subnet, cidr, nad string
	vni                           uint32
}{
	{podsNamespace, "e2e", "blue", policyCIDR, "blue-net", policyVNI},
	{"e2e-policy-two", "two", "green", "10.253.1.0/24", "green-net", policyVNI + 1},
}

// The pods of the truth table: namespace, name, app label, node index.
var policyPods = []struct {
	ns, name, app string
	node          int
}{
	{podsNamespace, "a1", "a", 0},
	{podsNamespace, "a2", "a", 1},
	{podsNamespace, "b1", "b", 1},
	{podsNamespace, "c1", "c", 2},
	{"e2e-policy-two", "d1", "d", 0},
	{"e2e-policy-two", "e1", "e", 2},
}

// policyContainerPorts are the ports every pod of the table names: podnet
// serves TCP and UDP on both.
var policyContainerPorts = []corev1.ContainerPort{
	{Name: "sink", ContainerPort: 7777, Protocol: corev1.ProtocolTCP},
	{Name: "echo", ContainerPort: 7778, Protocol: corev1.ProtocolTCP},
	{Name: "udp-sink", ContainerPort: 7777, Protocol: corev1.ProtocolUDP},
	{Name: "udp-echo", ContainerPort: 7778, Protocol: corev1.ProtocolUDP},
}

// policyProbes are the (protocol, port)s probed for every pair of pods, in
// the order the matrix prints them.
var policyProbes = []struct {
	protocol corev1.Protocol
	port     int32
}{
	{corev1.ProtocolTCP, 7777}, {corev1.ProtocolTCP, 7778}, {corev1.ProtocolUDP, 7777}, {corev1.ProtocolUDP, 7778},
}

// policyCell is one cell of the truth table.
type policyCell struct {
	from, to string
	protocol corev1.Protocol
	port     int32
}

func (c policyCell) String() string {
	return fmt.Sprintf("%s>%s:%s/%d", c.from, c.to, c.protocol, c.port)
}

// testPolicyPods makes the namespaces, their networks and the pods, and
// waits until they run and every cell is open.
func (p *policyTest) testPolicyPods(t *testing.T) {
	ctx := t.Context()
	dyn, err := dynamic.NewForConfig(p.env.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	p.world = &policyWorld{Namespaces: map[string]map[string]string{}}
	for _, n := range policyNamespaces {
		labels := map[string]string{"team": n.team}
		p.world.Namespaces[n.name] = labels
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n.name, Labels: labels}}
		if _, err := p.kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		subnet := &networkv1alpha1.Subnet{ObjectMeta: metav1.ObjectMeta{Name: n.subnet}, Spec: networkv1alpha1.SubnetSpec{IPv4: n.cidr, VNI: n.vni}}
		if _, err := p.network.NetworkV1alpha1().Subnets(n.name).Create(ctx, subnet, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		config, err := json.Marshal(map[string]any{"cniVersion": "1.0.0", "type": "kos", "subnet": n.subnet})
		if err != nil {
			t.Fatal(err)
		}
		nad := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
			"metadata": map[string]any{"name": n.nad}, "spec": map[string]any{"config": string(config)},
		}}
		if _, err := dyn.Resource(networkAttachmentDefinitions).Namespace(n.name).Create(ctx, nad, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating NetworkAttachmentDefinition %s/%s: %v", n.name, n.nad, err)
		}
	}
	nadOf := map[string]string{}
	for _, n := range policyNamespaces {
		nadOf[n.name] = n.nad
	}
	grace := int64(1)
	for _, pp := range policyPods {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: pp.name, Labels: map[string]string{"app": pp.app},
				Annotations: map[string]string{"k8s.v1.cni.cncf.io/networks": nadOf[pp.ns]}},
			Spec: corev1.PodSpec{
				NodeName:                      p.env.Nodes[pp.node].Name,
				AutomountServiceAccountToken:  new(bool),
				TerminationGracePeriodSeconds: &grace,
				Containers: []corev1.Container{{
					Name:            "podnet",
					Image:           p.image,
					ImagePullPolicy: corev1.PullIfNotPresent,
					Ports:           policyContainerPorts,
				}},
			},
		}
		if _, err := p.kube.CoreV1().Pods(pp.ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating pod %s/%s: %v", pp.ns, pp.name, err)
		}
	}
	for _, pp := range policyPods {
		poll.Until(t, 3*time.Minute, "pod "+pp.ns+"/"+pp.name+" to be ready", func(ctx context.Context) error {
			pod, err := p.kube.CoreV1().Pods(pp.ns).Get(ctx, pp.name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			for _, c := range pod.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					return nil
				}
			}
			return fmt.Errorf("%s: %v", pod.Status.Phase, pod.Status.Conditions)
		})
	}
	for _, pp := range policyPods {
		ip := p.policyAddress(t, pp.ns, pp.name)
		p.ips[pp.name] = ip
		p.world.Pods = append(p.world.Pods, evalPod{Namespace: pp.ns, Name: pp.name, Labels: map[string]string{"app": pp.app},
			Network: pp.ns + "/" + nadOf[pp.ns], IP: ip, Ports: policyContainerPorts})
		t.Logf("pod %s/%s (app=%s) on %s: %s", pp.ns, pp.name, pp.app, p.env.Nodes[pp.node].Name, ip)
	}
	// Without policy, every cell is open.
	cells := policyCells()
	poll.Until(t, 2*time.Minute, "every cell to be open without policy", func(ctx context.Context) error {
		got := p.probe(ctx, t, cells)
		var closed []string
		for _, c := range cells {
			if !got[c] {
				closed = append(closed, c.String())
			}
		}
		if len(closed) > 0 {
			return fmt.Errorf("%d closed: %s", len(closed), strings.Join(closed, " "))
		}
		return nil
	})
}

// policyCells returns every cell of the truth table: each ordered pair of
// pods on one network, over each of policyProbes. Pods on different
// networks have no path to each other, policy or none, and are not probed.
func policyCells() []policyCell {
	var cells []policyCell
	for _, from := range policyPods {
		for _, to := range policyPods {
			if from.name == to.name || from.ns != to.ns {
				continue
			}
			for _, pr := range policyProbes {
				cells = append(cells, policyCell{from.name, to.name, pr.protocol, pr.port})
			}
		}
	}
	return cells
}

// policyAddress is kosAddress for the policy test's pods.
func (p *policyTest) policyAddress(t *testing.T, ns, pod string) netip.Addr {
	t.Helper()
	var a netip.Addr
	poll.Until(t, time.Minute, "pod "+ns+"/"+pod+"'s attachment to have an address", func(ctx context.Context) error {
		got, err := p.kube.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			return err
		}
		list, err := p.network.NetworkV1alpha1().NetworkAttachments(ns).List(ctx, metav1.ListOptions{LabelSelector: networkv1alpha1.PodUIDLabel + "=" + string(got.UID)})
		if err != nil {
			return err
		}
		if len(list.Items) != 1 || list.Items[0].Status.IPv4 == "" {
			return fmt.Errorf("%d attachments, none addressed", len(list.Items))
		}
		a, err = netip.ParseAddr(list.Items[0].Status.IPv4)
		return err
	})
	return a
}
