package e2e

// This file holds the truth table of TestIntegrationPolicyTruthTable: its
// twelve policies, the step that probes every cell and compares it with the
// oracle, the probes themselves, and the matrix it prints.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kos-sdn/kos/components/apis/multinetworkpolicy/v1beta1"
	"github.com/kos-sdn/kos/tools/figures"
	"github.com/kos-sdn/kos/tools/poll"
)

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
