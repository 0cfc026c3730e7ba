package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/kos-sdn/kos/components/apis/multinetworkpolicy/v1beta1"
	networkv1alpha1 "github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/tools/cluster"
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

// TestIntegrationPolicyTruthTable installs the standard release on three
// nodes that run Multus, turns MultiNetworkPolicy on as a 0.4.0 release
// is to (the CRD, kos-controller-manager's --multi-network-policy, and the
// rights docs/policy.md lists, granted to both the controller manager and
// the running agents), and checks a truth table: four pods on
// the three nodes, four policies (ingress from a podSelector on one port,
// default deny, egress to a podSelector and to an ipBlock with except on a
// named port, ingress from a namespaceSelector on a port range), and every
// (from, to, TCP port) cell probed by a real connection and compared with
// networking/v1's semantics, worked out by hand beside each policy; then
// what an operator sees of it: the drops per policy in the agents' metrics
// and kubectl kos trace naming the policy.
func TestIntegrationPolicyTruthTable(t *testing.T) {
	began := time.Now()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	env := startCluster(t, false, true)
	figures.Duration(t, "policy-cluster-up", time.Since(began))

	p := &policyTest{podsTest: &podsTest{standard: newStandard(t, env, root), ips: map[string]netip.Addr{}}}
	runStepsDumping(t, func() {
		p.dumpState()
		p.dumpNamespace(podsNamespace)
		p.dumpFabrics()
	}, []step{
		{"images pushed and the release published", p.testPublishPods},
		{"install from s3", p.testInstall},
		{"MultiNetworkPolicy turned on", p.testPolicyOn},
		{"pods get KOS interfaces", p.testPolicyPods},
		{"every cell of the truth table", p.testTruthTable},
		{"drops counted per policy, traces name the policy", p.testPolicySeen},
	})
	figures.Duration(t, "policy-whole-test", time.Since(began))
}

// policyTest is TestIntegrationPolicyTruthTable's state.
type policyTest struct {
	*podsTest
	dyn dynamic.Interface
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

// The pods of the truth table: name, app label, node index.
var policyPods = []struct {
	name, app string
	node      int
}{
	{"a1", "a", 0},
	{"a2", "a", 1},
	{"b1", "b", 1},
	{"c1", "c", 2},
}

// testPolicyPods makes the network and the pods, and waits until they run.
func (p *policyTest) testPolicyPods(t *testing.T) {
	ctx := t.Context()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: podsNamespace, Labels: map[string]string{"team": "e2e"}}}
	if _, err := p.kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	subnet := &networkv1alpha1.Subnet{ObjectMeta: metav1.ObjectMeta{Name: "blue"}, Spec: networkv1alpha1.SubnetSpec{IPv4: policyCIDR, VNI: policyVNI}}
	if _, err := p.network.NetworkV1alpha1().Subnets(podsNamespace).Create(ctx, subnet, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p.createNAD(t, "blue-net", map[string]any{"cniVersion": "1.0.0", "type": "kos", "subnet": "blue"})
	grace := int64(1)
	for _, pp := range policyPods {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: pp.name, Labels: map[string]string{"app": pp.app},
				Annotations: map[string]string{"k8s.v1.cni.cncf.io/networks": "blue-net"}},
			Spec: corev1.PodSpec{
				NodeName:                      p.env.Nodes[pp.node].Name,
				AutomountServiceAccountToken:  new(bool),
				TerminationGracePeriodSeconds: &grace,
				Containers: []corev1.Container{{
					Name:            "podnet",
					Image:           p.image,
					ImagePullPolicy: corev1.PullIfNotPresent,
					Ports: []corev1.ContainerPort{
						{Name: "sink", ContainerPort: 7777, Protocol: corev1.ProtocolTCP},
						{Name: "echo", ContainerPort: 7778, Protocol: corev1.ProtocolTCP},
					},
				}},
			},
		}
		if _, err := p.kube.CoreV1().Pods(podsNamespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating pod %s: %v", pp.name, err)
		}
	}
	for _, pp := range policyPods {
		p.awaitRunning(t, pp.name, 3*time.Minute)
	}
	for _, pp := range policyPods {
		p.ips[pp.name] = p.policyAddress(t, pp.name)
		t.Logf("pod %s (app=%s) on %s: %s", pp.name, pp.app, p.env.Nodes[pp.node].Name, p.ips[pp.name])
	}
	// Without policy, every cell is open.
	cells := policyCells()
	poll.Until(t, 2*time.Minute, "every cell to be open without policy", func(ctx context.Context) error {
		got := p.probe(ctx, t, cells)
		var closed []string
		for _, c := range cells {
			if !got[c] {
				closed = append(closed, c)
			}
		}
		if len(closed) > 0 {
			return fmt.Errorf("%d closed: %s", len(closed), strings.Join(closed, " "))
		}
		return nil
	})
}

// policyCells returns every cell of the truth table: from>to:port.
func policyCells() []string {
	var cells []string
	for _, from := range policyPods {
		for _, to := range policyPods {
			if from.name == to.name {
				continue
			}
			for _, port := range []string{podnetPort, policyEchoPort} {
				cells = append(cells, from.name+">"+to.name+":"+port)
			}
		}
	}
	return cells
}

// policyAddress is kosAddress for the policy test's CIDR.
func (p *policyTest) policyAddress(t *testing.T, pod string) netip.Addr {
	t.Helper()
	var a netip.Addr
	poll.Until(t, time.Minute, "pod "+pod+"'s attachment to have an address", func(ctx context.Context) error {
		atts := p.attachmentsOf(t, pod)
		if len(atts) != 1 || atts[0].Status.IPv4 == "" {
			return fmt.Errorf("%d attachments, none addressed", len(atts))
		}
		var err error
		a, err = netip.ParseAddr(atts[0].Status.IPv4)
		return err
	})
	return a
}

// testTruthTable writes the policies and probes every cell until the
// table is right, then probes it once more and prints it.
func (p *policyTest) testTruthTable(t *testing.T) {
	ctx := t.Context()
	policies := p.dyn.Resource(v1beta1.MultiNetworkPolicies).Namespace(podsNamespace)
	app := func(name string) map[string]any {
		return map[string]any{"matchLabels": map[string]any{"app": name}}
	}
	for name, spec := range map[string]map[string]any{
		// b admits a on 7777 only.
		"b-from-a": {"podSelector": app("b"), "policyTypes": []any{"Ingress"},
			"ingress": []any{map[string]any{"from": []any{map[string]any{"podSelector": app("a")}}, "ports": []any{map[string]any{"port": int64(7777)}}}}},
		// c admits nothing: default deny.
		"c-deny": {"podSelector": app("c"), "policyTypes": []any{"Ingress"}},
		// a may open connections to b on any port, and to the network but
		// c1 on the port the destination names echo.
		"a-egress": {"podSelector": app("a"), "policyTypes": []any{"Egress"},
			"egress": []any{
				map[string]any{"to": []any{map[string]any{"podSelector": app("b")}}},
				map[string]any{"to": []any{map[string]any{"ipBlock": map[string]any{"cidr": policyCIDR, "except": []any{p.ips["c1"].String() + "/32"}}}},
					"ports": []any{map[string]any{"port": "echo"}}},
			}},
		// a admits the namespace's pods on 7770-7780.
		"a-from-namespace": {"podSelector": app("a"), "policyTypes": []any{"Ingress"},
			"ingress": []any{map[string]any{
				"from":  []any{map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"team": "e2e"}}}},
				"ports": []any{map[string]any{"protocol": "TCP", "port": int64(7770), "endPort": int64(7780)}},
			}}},
	} {
		obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "k8s.cni.cncf.io/v1beta1", "kind": "MultiNetworkPolicy",
			"metadata": map[string]any{"name": name, "annotations": map[string]any{v1beta1.PolicyForAnnotation: "blue-net"}},
			"spec":     spec}}
		if _, err := policies.Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating MultiNetworkPolicy %s: %v", name, err)
		}
	}
	written := time.Now()
	// want is what networking/v1 allows: to c nothing; to b from a on
	// 7777 (and a's egress to b allows any port); from a only to b, and
	// to the others but c1 on echo (7778); to a on both ports from anyone
	// whose egress allows it.
	allow := map[string]bool{
		"a1>b1:7777": true, "a2>b1:7777": true,
		"a1>a2:7778": true, "a2>a1:7778": true,
		"b1>a1:7777": true, "b1>a1:7778": true, "b1>a2:7777": true, "b1>a2:7778": true,
		"c1>a1:7777": true, "c1>a1:7778": true, "c1>a2:7777": true, "c1>a2:7778": true,
	}
	cells := policyCells()
	var got map[string]bool
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
		list, err := p.network.NetworkV1alpha1().NodeNetworkPolicies(podsNamespace).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Logf("listing NodeNetworkPolicies: %v", err)
			return
		}
		for _, n := range list.Items {
			data, _ := json.Marshal(n.Spec)
			t.Logf("NodeNetworkPolicy %s: %s", n.Name, data)
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
	t.Logf("truth table (TCP; rows from, columns to, each cell %s/%s):\n%s", podnetPort, policyEchoPort, matrix(got))
	if w := wrong(); len(w) > 0 {
		t.Errorf("%d wrong cells of %d on the second probe: %s", len(w), len(cells), strings.Join(w, "; "))
	}
	list, err := p.network.NetworkV1alpha1().NodeNetworkPolicies(podsNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range list.Items {
		t.Logf("NodeNetworkPolicy %s: %d policies", n.Name, len(n.Spec.Policies))
	}
}

// probe opens a TCP connection for every cell "from>to:port" at once (six
// at a time), and returns which opened: podnet send of no bytes to the
// sink (podnetPort), which answers with the length and hash of nothing;
// podnet chat for half a second to the echo port. Both give up connecting
// after 10 s.
func (p *policyTest) probe(ctx context.Context, t *testing.T, cells []string) map[string]bool {
	// Not the caller's context: poll.Until gives each check a few
	// seconds, less than the denied cells' 10 s, and a probe it killed
	// would count as denied.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Minute)
	defer cancel()
	var mu sync.Mutex
	got := map[string]bool{}
	sem := make(chan struct{}, 6)
	var wg sync.WaitGroup
	for _, c := range cells {
		from, rest, _ := strings.Cut(c, ">")
		to, port, _ := strings.Cut(rest, ":")
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			addr := p.ips[to].String() + ":" + port
			command := []string{podnetBin, "send", addr, "0"}
			if port == policyEchoPort {
				command = []string{podnetBin, "chat", "-conns", "1", "-for", "500ms", addr}
			}
			// A connection that does not open times out dialing; any
			// other failure (kubectl exec's own, under load) says
			// nothing of the policy, and the cell is probed again.
			var allowed bool
			for try := 1; ; try++ {
				out, err := p.execErr(ctx, from, command...)
				if err == nil {
					allowed = true
					break
				}
				if msg := err.Error(); strings.Contains(msg, "dial tcp") && strings.Contains(msg, "i/o timeout") {
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

func verdict(allowed bool) string {
	if allowed {
		return "allowed"
	}
	return "denied"
}

// matrix prints the cells as a table: rows from, columns to, each cell
// the two ports' verdicts (+ allowed, - denied).
func matrix(got map[string]bool) string {
	var b strings.Builder
	b.WriteString("from\\to")
	for _, to := range policyPods {
		fmt.Fprintf(&b, "\t%s", to.name)
	}
	b.WriteString("\n")
	for _, from := range policyPods {
		b.WriteString(from.name)
		for _, to := range policyPods {
			if from.name == to.name {
				b.WriteString("\t.")
				continue
			}
			b.WriteString("\t")
			for _, port := range []string{podnetPort, policyEchoPort} {
				if got[from.name+">"+to.name+":"+port] {
					b.WriteString("+")
				} else {
					b.WriteString("-")
				}
			}
		}
		b.WriteString("\n")
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
		{"c1", fmt.Sprintf("Dropped: the egress of %v is isolated by %s/a-egress, and no rule of theirs allows the packet.", p.ips["a1"], podsNamespace)},
		{"b1", fmt.Sprintf("The egress of %v is allowed by %s/a-egress egress[", p.ips["a1"], podsNamespace)},
	} {
		out := kk.mustPlugin(t, "trace", a1, "--to", p.ips[c.to].String(), "--protocol", "tcp", "--port", podnetPort, "-n", podsNamespace)
		if !strings.Contains(out, c.want) {
			t.Errorf("kubectl kos trace from a1 to %s does not say %q:\n%s", c.to, c.want, out)
		}
	}
}
