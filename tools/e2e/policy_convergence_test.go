package e2e

// This file holds the steps of TestIntegrationPolicyTruthTable after the
// truth table: what an operator sees of the policies (drops counted per
// policy, kubectl kos trace naming them), and how long a policy write takes
// to be enforced on every node while an allowed connection lives through the
// churn.

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
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kos-sdn/kos/components/apis/multinetworkpolicy/v1beta1"
	"github.com/kos-sdn/kos/tools/cluster"
	"github.com/kos-sdn/kos/tools/e2e/podnet/report"
	"github.com/kos-sdn/kos/tools/figures"
	"github.com/kos-sdn/kos/tools/poll"
)

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
		d := p.flipTime(t, flips, want, write, 20000+i*1500)
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
// UDP cells send from the 1500 source ports from udpBase (podnet flip's
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
