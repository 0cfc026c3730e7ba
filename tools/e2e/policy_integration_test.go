package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"

	"github.com/kos-sdn/kos/components/apis/multinetworkpolicy/v1beta1"
	networkv1alpha1 "github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/tools/cluster"
	"github.com/kos-sdn/kos/tools/e2e/podnet/report"
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

// policySet is the truth table's MultiNetworkPolicies: twelve, covering
// each selector kind (podSelector, namespaceSelector, both together, the
// empty podSelector), ipBlock with except, ports by number, by range, by
// name and by protocol alone, TCP and UDP, ingress and egress, default
// deny of both; each governs its namespace's network.
func (p *policyTest) policySet() []evalPolicy {
	one, two := policyNamespaces[0], policyNamespaces[1]
	app := func(a string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{"app": a}}
	}
	team := func(tm string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{"team": tm}}
	}
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	port := func(proto corev1.Protocol, port intstr.IntOrString) networkingv1.NetworkPolicyPort {
		return networkingv1.NetworkPolicyPort{Protocol: &proto, Port: &port}
	}
	portRange := func(proto corev1.Protocol, from, to int32) networkingv1.NetworkPolicyPort {
		p := port(proto, intstr.FromInt32(from))
		p.EndPort = &to
		return p
	}
	ingress := []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	egress := []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
	type (
		in   = networkingv1.NetworkPolicyIngressRule
		out  = networkingv1.NetworkPolicyEgressRule
		peer = networkingv1.NetworkPolicyPeer
		pp   = networkingv1.NetworkPolicyPort
	)
	policy := func(ns, nad, name string, spec networkingv1.NetworkPolicySpec) evalPolicy {
		return evalPolicy{Namespace: ns, Name: name, For: []string{ns + "/" + nad}, Spec: spec}
	}
	onOne := func(name string, spec networkingv1.NetworkPolicySpec) evalPolicy {
		return policy(one.name, one.nad, name, spec)
	}
	onTwo := func(name string, spec networkingv1.NetworkPolicySpec) evalPolicy {
		return policy(two.name, two.nad, name, spec)
	}
	return []evalPolicy{
		// b admits a on TCP 7777.
		onOne("b-from-a", networkingv1.NetworkPolicySpec{PodSelector: *app("b"), PolicyTypes: ingress,
			Ingress: []in{{From: []peer{{PodSelector: app("a")}}, Ports: []pp{port(tcp, intstr.FromInt32(7777))}}}}),
		// c admits nothing: default deny.
		onOne("c-deny", networkingv1.NetworkPolicySpec{PodSelector: *app("c"), PolicyTypes: ingress}),
		// a may open connections to b on any port, and to the network but
		// c1 on the TCP port the destination names echo.
		onOne("a-egress", networkingv1.NetworkPolicySpec{PodSelector: *app("a"), PolicyTypes: egress,
			Egress: []out{
				{To: []peer{{PodSelector: app("b")}}},
				{To: []peer{{IPBlock: &networkingv1.IPBlock{CIDR: one.cidr, Except: []string{p.ips["c1"].String() + "/32"}}}},
					Ports: []pp{{Port: new(intstr.FromString("echo"))}}},
			}}),
		// a admits its namespace's pods on TCP 7770-7780.
		onOne("a-from-namespace", networkingv1.NetworkPolicySpec{PodSelector: *app("a"), PolicyTypes: ingress,
			Ingress: []in{{From: []peer{{NamespaceSelector: team(one.team)}}, Ports: []pp{portRange(tcp, 7770, 7780)}}}}),
		// a admits b of its namespace (both selectors) on the UDP port it
		// names udp-echo.
		onOne("a-udp-from-b", networkingv1.NetworkPolicySpec{PodSelector: *app("a"), PolicyTypes: ingress,
			Ingress: []in{{From: []peer{{NamespaceSelector: team(one.team), PodSelector: app("b")}}, Ports: []pp{port(udp, intstr.FromString("udp-echo"))}}}}),
		// a may send UDP 7777-7778 to a.
		onOne("a-udp-egress", networkingv1.NetworkPolicySpec{PodSelector: *app("a"), PolicyTypes: egress,
			Egress: []out{{To: []peer{{PodSelector: app("a")}}, Ports: []pp{portRange(udp, 7777, 7778)}}}}),
		// b admits c on every UDP port (a protocol without a port).
		onOne("b-udp-from-c", networkingv1.NetworkPolicySpec{PodSelector: *app("b"),
			Ingress: []in{{From: []peer{{PodSelector: app("c")}}, Ports: []pp{{Protocol: &udp}}}}}),
		// b may open connections to the network but a1.
		onOne("b-egress-not-a1", networkingv1.NetworkPolicySpec{PodSelector: *app("b"), PolicyTypes: egress,
			Egress: []out{{To: []peer{{IPBlock: &networkingv1.IPBlock{CIDR: one.cidr, Except: []string{p.ips["a1"].String() + "/32"}}}}}}}),
		// Every pod of the namespace admits the other namespace's pods,
		// which are on another network: nobody here, so this only
		// isolates.
		onOne("all-from-two", networkingv1.NetworkPolicySpec{PolicyTypes: ingress,
			Ingress: []in{{From: []peer{{NamespaceSelector: team(two.team)}}}}}),
		// The second namespace denies both directions by default.
		onTwo("two-deny-all", networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}}),
		// d admits e on TCP 7777 and UDP 7778.
		onTwo("d-from-e", networkingv1.NetworkPolicySpec{PodSelector: *app("d"),
			Ingress: []in{{From: []peer{{PodSelector: app("e")}}, Ports: []pp{port(tcp, intstr.FromInt32(7777)), port(udp, intstr.FromInt32(7778))}}}}),
		// e may open connections to d of its namespace (both selectors)
		// on the TCP port d names sink.
		onTwo("e-to-d", networkingv1.NetworkPolicySpec{PodSelector: *app("e"), PolicyTypes: egress,
			Egress: []out{{To: []peer{{NamespaceSelector: team(two.team), PodSelector: app("d")}}, Ports: []pp{port(tcp, intstr.FromString("sink"))}}}}),
	}
}

// testTruthTable writes the policies, probes every cell until the table
// is what the oracle (policyWorld) says, then probes it once more and
// prints it.
func (p *policyTest) testTruthTable(t *testing.T) {
	ctx := t.Context()
	p.world.Policies = p.policySet()
	for _, pol := range p.world.Policies {
		spec, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&pol.Spec)
		if err != nil {
			t.Fatal(err)
		}
		var nads []string
		for _, f := range pol.For {
			_, nad, _ := strings.Cut(f, "/")
			nads = append(nads, nad)
		}
		obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "k8s.cni.cncf.io/v1beta1", "kind": "MultiNetworkPolicy",
			"metadata": map[string]any{"name": pol.Name, "annotations": map[string]any{v1beta1.PolicyForAnnotation: strings.Join(nads, ",")}},
			"spec":     spec}}
		if _, err := p.dyn.Resource(v1beta1.MultiNetworkPolicies).Namespace(pol.Namespace).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating MultiNetworkPolicy %s/%s: %v", pol.Namespace, pol.Name, err)
		}
	}
	written := time.Now()
	cells := policyCells()
	pods := map[string]*evalPod{}
	for i := range p.world.Pods {
		pods[p.world.Pods[i].Name] = &p.world.Pods[i]
	}
	allow := map[policyCell]bool{}
	allowed := 0
	for _, c := range cells {
		allow[c] = p.world.allowed(pods[c.from], pods[c.to], c.protocol, c.port)
		if allow[c] {
			allowed++
		}
	}
	t.Logf("the oracle allows %d of %d cells:\n%s", allowed, len(cells), policyMatrix(allow, allow))
	var got map[policyCell]bool
	wrong := func() []string {
		var out []string
		for _, c := range cells {
			if got[c] != allow[c] {
				out = append(out, fmt.Sprintf("%s %s, want %s", c, verdict(got[c]), verdict(allow[c])))
			}
		}
		return out
	}
	// On failure, what was published: the models the switches enforce.
	defer func() {
		if !t.Failed() {
			return
		}
		for _, n := range policyNamespaces {
			list, err := p.network.NetworkV1alpha1().NodeNetworkPolicies(n.name).List(context.Background(), metav1.ListOptions{})
			if err != nil {
				t.Logf("listing NodeNetworkPolicies: %v", err)
				return
			}
			for _, n := range list.Items {
				data, _ := json.Marshal(n.Spec)
				t.Logf("NodeNetworkPolicy %s/%s: %s", n.Namespace, n.Name, data)
			}
		}
	}()
	poll.Until(t, 5*time.Minute, "every cell to be as networking/v1 says", func(ctx context.Context) error {
		got = p.probe(ctx, t, cells)
		if w := wrong(); len(w) > 0 {
			t.Logf("%s after the write: %d wrong cells: %s", since(written), len(w), strings.Join(w, "; "))
			return fmt.Errorf("%d wrong cells: %s", len(w), strings.Join(w, "; "))
		}
		return nil
	})
	figures.Duration(t, "policy-write-to-truth-table", time.Since(written))
	// Once more, now that it has converged: every cell, every time.
	got = p.probe(ctx, t, cells)
	t.Logf("truth table, %d cells:\n%s", len(cells), policyMatrix(got, allow))
	if w := wrong(); len(w) > 0 {
		t.Errorf("%d wrong cells of %d on the second probe: %s", len(w), len(cells), strings.Join(w, "; "))
	}
	for _, n := range policyNamespaces {
		list, err := p.network.NetworkV1alpha1().NodeNetworkPolicies(n.name).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range list.Items {
			t.Logf("NodeNetworkPolicy %s/%s: %d policies", n.Namespace, n.Name, len(n.Spec.Policies))
		}
	}
}

// probe probes every cell at once (eight at a time) with kubectl exec in
// the source pod, and returns which got through: TCP 7777 with podnet
// send of no bytes to the sink, which answers with the length and hash of
// nothing; TCP 7778 with podnet chat for half a second to the echo (both
// give up connecting after 10 s); UDP with podnet udp-echo, a datagram
// that must come back within a second, three tries.
func (p *policyTest) probe(ctx context.Context, t *testing.T, cells []policyCell) map[policyCell]bool {
	// Not the caller's context: poll.Until gives each check a few
	// seconds, less than the denied cells' 10 s, and a probe it killed
	// would count as denied.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Minute)
	defer cancel()
	nsOf := map[string]string{}
	for _, pp := range policyPods {
		nsOf[pp.name] = pp.ns
	}
	var mu sync.Mutex
	got := map[policyCell]bool{}
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for _, c := range cells {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			addr := netip.AddrPortFrom(p.ips[c.to], uint16(c.port)).String()
			command := []string{podnetBin, "send", addr, "0"}
			dropped := func(msg string) bool {
				return strings.Contains(msg, "dial tcp") && strings.Contains(msg, "i/o timeout")
			}
			switch {
			case c.protocol == corev1.ProtocolUDP:
				command = []string{podnetBin, "udp-echo", addr}
				dropped = func(msg string) bool { return strings.Contains(msg, "no answer") }
			case c.port == 7778:
				command = []string{podnetBin, "chat", "-conns", "1", "-for", "500ms", addr}
			}
			// Any failure but the drop's own (kubectl exec's, under
			// load) says nothing of the policy, and the cell is probed
			// again.
			var allowed bool
			for try := 1; ; try++ {
				out, err := p.execIn(ctx, nsOf[c.from], c.from, command...)
				if err == nil {
					allowed = true
					break
				}
				if dropped(err.Error()) {
					break
				}
				if try == 3 || ctx.Err() != nil {
					t.Logf("probe %s failed %d times, counted as denied: %v\n%s", c, try, err, out)
					break
				}
			}
			mu.Lock()
			got[c] = allowed
			mu.Unlock()
		})
	}
	wg.Wait()
	return got
}

// execIn runs a command in the pod of namespace ns and returns its
// standard output; the error says what it wrote to standard error.
func (p *policyTest) execIn(ctx context.Context, ns, pod string, command ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	args := append([]string{"--kubeconfig", p.env.Kubeconfig, "-n", ns, "exec", pod, "--"}, command...)
	cmd := exec.CommandContext(ctx, "kubectl", args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("kubectl exec %s/%s -- %s: %w (stderr: %s)", ns, pod, strings.Join(command, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

func verdict(allowed bool) string {
	if allowed {
		return "allowed"
	}
	return "denied"
}

// policyMatrix prints the cells as one table per namespace: rows from,
// columns to, each cell the verdicts of policyProbes in order (TCP 7777,
// TCP 7778, UDP 7777, UDP 7778): + allowed and - denied as want says, A
// allowed and D denied where want says otherwise.
func policyMatrix(got, want map[policyCell]bool) string {
	var b strings.Builder
	for _, n := range policyNamespaces {
		fmt.Fprintf(&b, "%s (TCP 7777, 7778, UDP 7777, 7778)\nfrom\\to", n.name)
		for _, to := range policyPods {
			if to.ns == n.name {
				fmt.Fprintf(&b, "\t%s", to.name)
			}
		}
		b.WriteString("\n")
		for _, from := range policyPods {
			if from.ns != n.name {
				continue
			}
			b.WriteString(from.name)
			for _, to := range policyPods {
				if to.ns != n.name {
					continue
				}
				if from.name == to.name {
					b.WriteString("\t.")
					continue
				}
				b.WriteString("\t")
				for _, pr := range policyProbes {
					c := policyCell{from.name, to.name, pr.protocol, pr.port}
					switch g, w := got[c], want[c]; {
					case g == w && g:
						b.WriteString("+")
					case g == w:
						b.WriteString("-")
					case g:
						b.WriteString("A")
					default:
						b.WriteString("D")
					}
				}
			}
			b.WriteString("\n")
		}
	}
	return b.String()
}

// testPolicySeen checks what an operator sees of the truth table's
// policies once its probes ran: their denied connections counted under the
// policy that isolates the end that dropped them (c-deny on c1's node for
// b1's, a-egress on a1's node for a1's to c1), and kubectl kos trace
// naming the policy that drops a1's packet to c1 and the rule that lets
// a1's to b1 out.
func (p *policyTest) testPolicySeen(t *testing.T) {
	nodeOf := map[string]*cluster.Node{}
	for _, pp := range policyPods {
		nodeOf[pp.name] = p.env.Nodes[pp.node]
	}
	for _, c := range []struct{ pod, policy, direction string }{
		{"c1", "c-deny", "ingress"},
		{"a1", "a-egress", "egress"},
	} {
		n := nodeOf[c.pod]
		labels := fmt.Sprintf(`direction=%q,namespace=%q,policy=%q,`, c.direction, podsNamespace, c.policy)
		poll.Until(t, time.Minute, fmt.Sprintf("%s's agent to count drops under %s", n.Name, c.policy), func(context.Context) error {
			if v := p.agentCounter(t, n, "kos_agent_policy_dropped_packets_total{"+labels); v == 0 {
				return fmt.Errorf("no %s drops counted under %s/%s", c.direction, podsNamespace, c.policy)
			}
			return nil
		})
	}

	kk := &kubectlKOS{standard: p.standard}
	kk.testInstall(t)
	a1 := p.attachmentsOf(t, "a1")[0].Name
	for _, c := range []struct{ to, want string }{
		{"c1", fmt.Sprintf("Dropped: the egress of %v is isolated by %s/a-egress, %[2]s/a-udp-egress, and no rule of theirs allows the packet.", p.ips["a1"], podsNamespace)},
		{"b1", fmt.Sprintf("The egress of %v is allowed by %s/a-egress egress[", p.ips["a1"], podsNamespace)},
	} {
		out := kk.mustPlugin(t, "trace", a1, "--to", p.ips[c.to].String(), "--protocol", "tcp", "--port", podnetPort, "-n", podsNamespace)
		if !strings.Contains(out, c.want) {
			t.Errorf("kubectl kos trace from a1 to %s does not say %q:\n%s", c.to, c.want, out)
		}
	}
}

// testConvergence measures how long a policy write takes to be enforced on
// every node, and checks that an allowed TCP connection lives through
// policy churn. The churn is twenty writes of one policy, created and
// deleted in turn, that opens (by the oracle) a cell to a pod on each of
// the three nodes; each write is timed from the API call to the moment
// podnet flip, trying every 10 ms from inside the source pods, sees all
// three cells turn (the last of the three counts). Throughout, c1 chats
// with a1's echo, which every policy set of this test allows.
func (p *policyTest) testConvergence(t *testing.T) {
	ns := policyNamespaces[0]
	toggle := evalPolicy{Namespace: ns.name, Name: "toggle", For: []string{ns.name + "/" + ns.nad},
		Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
					{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: []string{"b", "c"}}}}}},
				Ports: []networkingv1.NetworkPolicyPort{
					{Protocol: new(corev1.ProtocolTCP), Port: new(intstr.FromInt32(7777))},
					{Protocol: new(corev1.ProtocolUDP), Port: new(intstr.FromInt32(7777))},
				},
			}}}}
	// One cell to a pod on each node that the toggle opens and nothing
	// else does.
	flips := []policyCell{
		{"c1", "a1", corev1.ProtocolUDP, 7777},
		{"c1", "b1", corev1.ProtocolTCP, 7777},
		{"b1", "c1", corev1.ProtocolTCP, 7777},
	}
	pods := map[string]*evalPod{}
	for i := range p.world.Pods {
		pods[p.world.Pods[i].Name] = &p.world.Pods[i]
	}
	with := &policyWorld{Namespaces: p.world.Namespaces, Pods: p.world.Pods, Policies: append(slices.Clone(p.world.Policies), toggle)}
	for _, c := range flips {
		if p.world.allowed(pods[c.from], pods[c.to], c.protocol, c.port) || !with.allowed(pods[c.from], pods[c.to], c.protocol, c.port) {
			t.Fatalf("the toggle does not open %s by the oracle", c)
		}
	}
	spec, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&toggle.Spec)
	if err != nil {
		t.Fatal(err)
	}
	obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "k8s.cni.cncf.io/v1beta1", "kind": "MultiNetworkPolicy",
		"metadata": map[string]any{"name": toggle.Name, "annotations": map[string]any{v1beta1.PolicyForAnnotation: ns.nad}},
		"spec":     spec}}
	policies := p.dyn.Resource(v1beta1.MultiNetworkPolicies).Namespace(ns.name)

	chat := p.startChat(t, ns.name, "c1", netip.AddrPortFrom(p.ips["a1"], 7778).String())
	var took []time.Duration
	for i := range 20 {
		want := "open"
		write := func(ctx context.Context) error {
			_, err := policies.Create(ctx, obj, metav1.CreateOptions{})
			return err
		}
		if i%2 == 1 {
			want = "closed"
			write = func(ctx context.Context) error { return policies.Delete(ctx, toggle.Name, metav1.DeleteOptions{}) }
		}
		d := p.flipTime(t, flips, want, write, 20000+i*500)
		t.Logf("write %d (%s): every node enforced it after %v", i+1, want, d)
		took = append(took, d)
	}
	slices.Sort(took)
	// Nearest rank: with twenty writes, p99 is the slowest.
	p99 := took[(len(took)*99+99)/100-1]
	figures.Duration(t, "policy-convergence-p50", took[len(took)/2])
	figures.Duration(t, "policy-convergence-p99", p99)
	t.Logf("from a policy write to enforcement on every node, %d writes: p50 %v, p99 %v, max %v (goal: p99 < 1s)",
		len(took), took[len(took)/2], p99, took[len(took)-1])

	r := chat()
	t.Logf("c1's connection to a1's echo through the churn: %s", r)
	if r.Opened != 1 || r.Alive != 1 || len(r.Errors) > 0 {
		t.Errorf("the allowed connection did not survive the policy churn: %s", r)
	}
}

// flipTime starts podnet flip for every cell, makes the write once each
// is trying, and returns how long after the write the last cell turned.
//
// UDP cells send from the 500 source ports from udpBase (podnet flip's
// block), which the caller makes different for each write: a port an
// answered attempt of an earlier write used has an established flow that
// a closing policy rightly lets on, so one reused would see the cell open
// before the write.
func (p *policyTest) flipTime(t *testing.T, cells []policyCell, want string, write func(context.Context) error, udpBase int) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	nsOf := map[string]string{}
	for _, pp := range policyPods {
		nsOf[pp.name] = pp.ns
	}
	type flipper struct {
		cmd   *exec.Cmd
		lines *bufio.Scanner
	}
	var fs []flipper
	// Each podnet flip ends once it printed its time; on an early return
	// the cancel kills what still runs.
	defer func() {
		cancel()
		for _, f := range fs {
			_ = f.cmd.Wait()
		}
	}()
	for _, c := range cells {
		addr := netip.AddrPortFrom(p.ips[c.to], uint16(c.port)).String()
		args := []string{"--kubeconfig", p.env.Kubeconfig, "-n", nsOf[c.from], "exec", c.from, "--",
			podnetBin, "flip", want, strings.ToLower(string(c.protocol)), addr}
		if c.protocol == corev1.ProtocolUDP {
			args = append(args, strconv.Itoa(udpBase))
		}
		cmd := exec.CommandContext(ctx, "kubectl", args...)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := bufio.NewScanner(out)
		fs = append(fs, flipper{cmd, lines})
		if !lines.Scan() || lines.Text() != "ready" {
			t.Fatalf("podnet flip %s %s: no ready line (%v)", want, c, lines.Err())
		}
	}
	// Let the attempts see the cells as they are before the write.
	time.Sleep(100 * time.Millisecond)
	written := time.Now()
	if err := write(ctx); err != nil {
		t.Fatalf("writing the toggle policy: %v", err)
	}
	var last time.Duration
	for i, f := range fs {
		if !f.lines.Scan() {
			t.Fatalf("podnet flip %s %s: no time within a minute (%v)", want, cells[i], f.lines.Err())
		}
		ns, err := strconv.ParseInt(f.lines.Text(), 10, 64)
		if err != nil {
			t.Fatalf("podnet flip %s %s: %v", want, cells[i], err)
		}
		d := time.Unix(0, ns).Sub(written)
		if d < 0 {
			t.Errorf("%s was %s %v before the write", cells[i], want, -d)
		}
		last = max(last, d)
	}
	return last
}

// startChat holds a connection from the pod to the echo at addr, and
// returns a function that stops it and returns its last report.
func (p *policyTest) startChat(t *testing.T, ns, pod, addr string) func() report.Chat {
	t.Helper()
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	cmd := exec.CommandContext(ctx, "kubectl", "--kubeconfig", p.env.Kubeconfig, "-n", ns, "exec", pod, "--",
		podnetBin, "chat", "-conns", "1", "-every", "100ms", "-for", "30m", addr)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var last report.Chat
	done := make(chan struct{})
	go func() {
		defer close(done)
		lines := bufio.NewScanner(out)
		for lines.Scan() {
			var r report.Chat
			if json.Unmarshal(lines.Bytes(), &r) == nil {
				mu.Lock()
				last = r
				mu.Unlock()
			}
		}
	}()
	stop := func() report.Chat {
		cancel()
		<-done
		_ = cmd.Wait() // killed: its error says so and nothing more
		mu.Lock()
		defer mu.Unlock()
		return last
	}
	t.Cleanup(func() { stop() })
	poll.Until(t, time.Minute, "c1's connection to have an echo", func(context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		return last.Settled()
	})
	return stop
}
