package kubectlkos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kos-sdn/kos/components/agent/api"
	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	kosfake "github.com/kos-sdn/kos/components/generated/clientset/versioned/fake"
)

// fakeProber is a datapath whose tunnel of the nodes in blocked carries
// nothing, and which records the probes it holds.
type fakeProber struct {
	mu      sync.Mutex
	served  bool
	blocked map[string]bool
	failOn  string // a node whose probe cannot start
	// lagging is how many starts on a node the agent answers 409 "not
	// ready" to, as while its cache is behind the API.
	lagging  map[string]int
	onCheck  func() // called at every check
	running  map[string]bool
	started  int
	checkMTU []int
}

func newFakeProber() *fakeProber {
	return &fakeProber{served: true, blocked: map[string]bool{}, running: map[string]bool{}, lagging: map[string]int{}}
}

func (p *fakeProber) Served(context.Context, string) error {
	if !p.served {
		return fmt.Errorf("GET %s: %w", api.PathProbes, errNotServed)
	}
	return nil
}

func (p *fakeProber) Start(_ context.Context, node string, att *v1alpha1.NetworkAttachment) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if node == p.failOn {
		return errors.New("no switch")
	}
	if p.lagging[node] > 0 {
		p.lagging[node]--
		return &answerError{method: "POST", path: api.PathProbes, code: http.StatusConflict, body: "attachment " + att.Name + " is not ready"}
	}
	p.running[att.Name] = true
	p.started++
	return nil
}

func (p *fakeProber) Check(ctx context.Context, node string, req api.ProbeCheckRequest) (api.ProbeCheckResult, error) {
	if p.onCheck != nil {
		p.onCheck()
	}
	if err := ctx.Err(); err != nil {
		return api.ProbeCheckResult{}, err
	}
	p.mu.Lock()
	p.checkMTU = append(p.checkMTU, req.MTU)
	p.mu.Unlock()
	ok := api.ProbeOutcome{OK: true}
	if p.blocked[node] || p.blocked[nodeOf(req.To)] {
		lost := api.ProbeOutcome{Detail: "100% loss"}
		return api.ProbeCheckResult{Ping: lost, FullSizePing: lost, TCP: api.ProbeOutcome{Detail: "timed out"}}, nil
	}
	return api.ProbeCheckResult{Ping: ok, FullSizePing: ok, TCP: ok}, nil
}

func (p *fakeProber) Stop(_ context.Context, _ string, att *v1alpha1.NetworkAttachment) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.running, att.Name)
	return nil
}

// The fake IPAM gives node-N's attachment 172.31.254.N.
func nodeOf(addr string) string {
	return "node-" + addr[strings.LastIndex(addr, ".")+1:]
}

// newFakeClusters returns clients whose creates name objects by their
// generateName, and whose attachments are Ready with an address and an
// MTU as soon as they are created, as IPAM and the agent would make them.
func newFakeClusters(existing ...runtime.Object) (*kubefake.Clientset, *kosfake.Clientset) {
	kube := kubefake.NewClientset()
	kos := kosfake.NewSimpleClientset(existing...)
	var n int
	name := func(action k8stesting.Action) (bool, runtime.Object, error) {
		obj := action.(k8stesting.CreateAction).GetObject().(metav1.Object)
		if obj.GetName() == "" {
			n++
			obj.SetName(fmt.Sprintf("%s%05d", obj.GetGenerateName(), n))
		}
		if att, ok := obj.(*v1alpha1.NetworkAttachment); ok {
			att.Status.IPv4 = "172.31.254." + strings.TrimPrefix(att.Spec.Node, "node-")
			att.Status.MTU = 1450
			att.Status.Conditions = []metav1.Condition{{Type: v1alpha1.NetworkAttachmentReady, Status: metav1.ConditionTrue}}
		}
		return false, nil, nil
	}
	kube.PrependReactor("create", "*", name)
	kos.PrependReactor("create", "*", name)
	return kube, kos
}

// leftovers lists what the check left in the clusters.
func leftovers(t *testing.T, kube *kubefake.Clientset, kos *kosfake.Clientset, p *fakeProber) []string {
	t.Helper()
	ctx := context.Background()
	var left []string
	nss, err := kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range nss.Items {
		left = append(left, "namespace "+ns.Name)
	}
	subnets, err := kos.NetworkV1alpha1().Subnets("").List(ctx, metav1.ListOptions{LabelSelector: api.ProbeLabel})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range subnets.Items {
		left = append(left, "subnet "+s.Name)
	}
	atts, err := kos.NetworkV1alpha1().NetworkAttachments("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range atts.Items {
		left = append(left, "attachment "+a.Name)
	}
	for name := range p.running {
		left = append(left, "probe "+name)
	}
	return left
}

func agentsOn(nodes ...string) []NodeStatus {
	var out []NodeStatus
	for _, n := range nodes {
		out = append(out, NodeStatus{Node: n, Pod: "kos-agent-" + n})
	}
	return out
}

func TestDatapathCheck(t *testing.T) {
	t.Parallel()
	ok := api.ProbeOutcome{OK: true}
	pass := api.ProbeCheckResult{Ping: ok, FullSizePing: ok, TCP: ok}
	tests := []struct {
		name       string
		nodes      []string
		namespace  string
		prepare    func(p *fakeProber)
		wantPassed bool
		wantSkip   bool
		wantPairs  []string // the pairs checked, "from>to"
		wantFailed []string
		wantDetail string
	}{{
		name:       "healthy",
		nodes:      []string{"node-3", "node-1", "node-2"},
		wantPassed: true,
		wantPairs:  []string{"node-1>node-2", "node-1>node-3", "node-2>node-1", "node-2>node-3", "node-3>node-1", "node-3>node-2"},
		wantDetail: "6 pairs of 3 nodes: ping, full-size ping and TCP",
	}, {
		name:       "healthy in the user's namespace",
		nodes:      []string{"node-1", "node-2"},
		namespace:  "ops",
		wantPassed: true,
		wantPairs:  []string{"node-1>node-2", "node-2>node-1"},
		wantDetail: "2 pairs of 2 nodes: ping, full-size ping and TCP",
	}, {
		name:       "one node's tunnel blocked",
		nodes:      []string{"node-1", "node-2", "node-3"},
		prepare:    func(p *fakeProber) { p.blocked["node-2"] = true },
		wantPairs:  []string{"node-1>node-2", "node-1>node-3", "node-2>node-1", "node-2>node-3", "node-3>node-1", "node-3>node-2"},
		wantFailed: []string{"node-1 → node-2", "node-2 → node-1", "node-2 → node-3", "node-3 → node-2"},
		wantDetail: "4 of 6 pairs failed: node-1 → node-2, node-2 → node-1, node-2 → node-3, node-3 → node-2",
	}, {
		name:       "an agent a moment behind the API",
		nodes:      []string{"node-1", "node-2"},
		prepare:    func(p *fakeProber) { p.lagging["node-2"] = 3 },
		wantPassed: true,
		wantPairs:  []string{"node-1>node-2", "node-2>node-1"},
		wantDetail: "2 pairs of 2 nodes: ping, full-size ping and TCP",
	}, {
		name:       "a probe that cannot start",
		nodes:      []string{"node-1", "node-2"},
		prepare:    func(p *fakeProber) { p.failOn = "node-2" },
		wantDetail: "starting the probe on node node-2: no switch",
	}, {
		name:       "agents that serve no probes",
		nodes:      []string{"node-1", "node-2"},
		prepare:    func(p *fakeProber) { p.served = false },
		wantPassed: true,
		wantSkip:   true,
		wantDetail: "the agents serve no probes (a release before probes): only status was checked",
	}, {
		name:       "one node",
		nodes:      []string{"node-1"},
		wantDetail: "1 nodes with an agent: a datapath check needs two",
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var existing []runtime.Object
			kube, kos := newFakeClusters(existing...)
			if tc.namespace != "" {
				if _, err := kube.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tc.namespace}}, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			p := newFakeProber()
			if tc.prepare != nil {
				tc.prepare(p)
			}
			d := &datapathCheck{kube: kube, kos: kos, probes: p, namespace: tc.namespace, timeout: 5 * time.Second, poll: time.Millisecond}
			got, pairs := d.check(context.Background(), agentsOn(tc.nodes...))

			if got.Passed != tc.wantPassed || got.Skipped != tc.wantSkip || got.Detail != tc.wantDetail {
				t.Errorf("check = %+v, want passed %t, skipped %t, detail %q", got, tc.wantPassed, tc.wantSkip, tc.wantDetail)
			}
			var gotPairs []string
			for _, r := range pairs {
				gotPairs = append(gotPairs, r.From+">"+r.To)
				if r.Passed() && r.Result != pass {
					t.Errorf("pair %s passed with %+v", r.Name(), r.Result)
				}
			}
			if diff := cmp.Diff(gotPairs, tc.wantPairs); diff != "" {
				t.Errorf("pairs (-got +want):\n%s", diff)
			}
			if diff := cmp.Diff(failedPairs(pairs), tc.wantFailed); diff != "" {
				t.Errorf("failed pairs (-got +want):\n%s", diff)
			}
			for _, mtu := range p.checkMTU {
				if mtu != 1450 {
					t.Errorf("a check's MTU is %d, want the attachments' 1450", mtu)
				}
			}
			// Everything made is gone; the user's namespace stays.
			var want []string
			if tc.namespace != "" {
				want = []string{"namespace " + tc.namespace}
			}
			if diff := cmp.Diff(leftovers(t, kube, kos, p), want); diff != "" {
				t.Errorf("left behind (-got +want):\n%s", diff)
			}
		})
	}
}

// TestDatapathCheckCleansUpWhenInterrupted cancels the check's context, as
// Ctrl-C does, while it checks the pairs: what it made is deleted all the
// same.
func TestDatapathCheckCleansUpWhenInterrupted(t *testing.T) {
	t.Parallel()
	kube, kos := newFakeClusters()
	p := newFakeProber()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p.onCheck = cancel
	d := &datapathCheck{kube: kube, kos: kos, probes: p, timeout: 5 * time.Second, poll: time.Millisecond}
	got, pairs := d.check(ctx, agentsOn("node-1", "node-2", "node-3"))
	if got.Passed {
		t.Errorf("an interrupted check passed: %+v", got)
	}
	for _, r := range pairs {
		if r.Passed() || !strings.Contains(r.Error, "context canceled") {
			t.Errorf("pair %s = %+v, want failed as canceled", r.Name(), r)
		}
	}
	if p.started != 3 {
		t.Errorf("%d probes started, want 3", p.started)
	}
	if left := leftovers(t, kube, kos, p); len(left) > 0 {
		t.Errorf("left behind after Ctrl-C: %v", left)
	}
}

func TestFreeVNI(t *testing.T) {
	t.Parallel()
	subnet := func(ns string, vni uint32) runtime.Object {
		return &v1alpha1.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprint(vni)}, Spec: v1alpha1.SubnetSpec{VNI: vni}}
	}
	_, kos := newFakeClusters(subnet("a", maxVNI), subnet("b", maxVNI-1), subnet("a", 7))
	d := &datapathCheck{kos: kos}
	got, err := d.freeVNI(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if want := uint32(maxVNI - 2); got != want {
		t.Errorf("freeVNI = %d, want %d", got, want)
	}
}

func TestPrintPairs(t *testing.T) {
	t.Parallel()
	ok := api.ProbeOutcome{OK: true}
	results := []PairResult{
		{From: "node-1", To: "node-2", Result: api.ProbeCheckResult{Ping: ok, FullSizePing: ok, TCP: ok}},
		{From: "node-1", To: "node-3", Result: api.ProbeCheckResult{Ping: ok, FullSizePing: api.ProbeOutcome{Detail: "1422 bytes: message too long"}, TCP: ok}},
		{From: "node-3", To: "node-1", Error: "POST /debug/probes/check: no agent"},
	}
	var b bytes.Buffer
	if err := printPairs(&b, results, false); err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	fields := make([][]string, len(got))
	for i, line := range got {
		fields[i] = strings.Fields(line)
	}
	want := [][]string{
		{"FROM", "TO", "PING", "FULL-SIZE", "PING", "TCP", "DETAIL"},
		{"node-1", "node-2", "ok", "ok", "ok", "<none>"},
		{"node-1", "node-3", "ok", "FAIL", "ok", "1422", "bytes:", "message", "too", "long"},
		{"node-3", "node-1", "-", "-", "-", "POST", "/debug/probes/check:", "no", "agent"},
	}
	if diff := cmp.Diff(fields, want); diff != "" {
		t.Errorf("printPairs (-got +want):\n%s\n%s", diff, b.String())
	}
}

func TestChecksErrorNamesThePairs(t *testing.T) {
	t.Parallel()
	results := []CheckResult{
		{Check: "agents", Passed: true},
		{Check: "attachments", Passed: false},
		{Check: "datapath", Detail: "2 of 2 pairs failed: node-1 → node-2, node-2 → node-1"},
		{Check: "skipped", Passed: true, Skipped: true},
	}
	err := checksError(results)
	want := "2 of 4 checks failed: attachments, datapath (2 of 2 pairs failed: node-1 → node-2, node-2 → node-1)"
	if err == nil || err.Error() != want {
		t.Errorf("checksError = %v, want %q", err, want)
	}
	if err := checksError(slices.Clone(results[:1])); err != nil {
		t.Errorf("checksError of passed checks = %v, want nil", err)
	}
}

// TestDatapathCheckWaitsForTheSubnetToBeUnused: the server refuses to
// delete a Subnet while it still counts a deleted attachment (409); the
// cleanup asks again until it may.
func TestDatapathCheckWaitsForTheSubnetToBeUnused(t *testing.T) {
	t.Parallel()
	kube, kos := newFakeClusters()
	refusals := 2
	kos.PrependReactor("delete", "subnets", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if refusals == 0 {
			return false, nil, nil
		}
		refusals--
		return true, nil, apierrors.NewConflict(v1alpha1.Resource("subnets"), action.(k8stesting.DeleteAction).GetName(), errors.New("subnet in use"))
	})
	p := newFakeProber()
	d := &datapathCheck{kube: kube, kos: kos, probes: p, timeout: 5 * time.Second, poll: time.Millisecond}
	if got, _ := d.check(context.Background(), agentsOn("node-1", "node-2")); !got.Passed {
		t.Errorf("check = %+v, want passed", got)
	}
	if refusals != 0 {
		t.Errorf("%d refusals left, want the cleanup to have asked until allowed", refusals)
	}
	if left := leftovers(t, kube, kos, p); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}
