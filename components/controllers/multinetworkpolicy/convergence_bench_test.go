package multinetworkpolicy_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/kos-sdn/kos/components/agent/policy"
	"github.com/kos-sdn/kos/components/apis/multinetworkpolicy/v1beta1"
	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/controllermanager"
	"github.com/kos-sdn/kos/components/controllers/podnetwork"
	"github.com/kos-sdn/kos/components/fabric"
	"github.com/kos-sdn/kos/components/fabric/ovs"
	"github.com/kos-sdn/kos/components/generated/clientset/versioned"
	"github.com/kos-sdn/kos/components/generated/informers/externalversions"
	"github.com/kos-sdn/kos/tools/ovsenv"
	"github.com/kos-sdn/kos/tools/poll"
	"github.com/kos-sdn/kos/tools/testenv"
)

// convergenceNodes are the simulated nodes of BenchmarkPolicyConvergence,
// each with an Open vSwitch of its own, as the three-node cluster has.
var convergenceNodes = []string{"node-1", "node-2", "node-3"}

// BenchmarkPolicyConvergence measures, without a cluster, how long a
// MultiNetworkPolicy write takes to reach the switch of every node, and
// where the time goes. It runs what the cluster runs on that path: a real
// kube-apiserver with the CRDs, kos-apiserver, kos-controller-manager's
// controllers (IPAM, pod networks and the MultiNetworkPolicy controller,
// as the manager wires them) and, for each of three nodes, the agent's
// policy enforcer on a real Open vSwitch (userspace datapath). Six pods, two
// a node, are isolated by twelve base policies, so that each node has a
// NodeNetworkPolicy, as in TestIntegrationPolicyTruthTable; each iteration
// then creates or deletes a toggle policy that changes every node's model,
// as that test's convergence step does, and waits until every node's
// switch holds it.
//
// Along the path it takes timestamps: the write's API call; the policy's
// watch event (an informer of the benchmark's own, which sees what the
// controller's sees); the NodeNetworkPolicies' watch events (another); and
// the enforcers' SetPolicy calls on the switches, from start to return
// (flows in the tables). It reports p50 and p99 of the whole and of each
// stage, and the machine's load:
//
//	KOS_TEST_LANE=integration go test -run '^$' -bench PolicyConvergence -benchtime 40x ./components/controllers/multinetworkpolicy/
//
// What it leaves out is the datapath after the flow tables (Open vSwitch's
// revalidation of cached flows) and kubectl exec's probes on the cluster.
func BenchmarkPolicyConvergence(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	env := testenv.Shared(b)
	// A name of its own: the package's tests leave theirs running.
	kosSrv, err := env.StartKOS(ctx, testenv.KOSOptions{Name: "converge", DirectOnly: true})
	if err != nil {
		b.Fatalf("starting kos-apiserver: %v", err)
	}
	kube, err := kubernetes.NewForConfig(env.RESTConfig)
	if err != nil {
		b.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(env.RESTConfig)
	if err != nil {
		b.Fatal(err)
	}
	kos, err := versioned.NewForConfig(kosSrv.DirectConfig)
	if err != nil {
		b.Fatal(err)
	}
	for file, gvr := range map[string]schema.GroupVersionResource{
		"tools/multus/testdata/network-attachment-definitions.yaml": podnetwork.NetworkAttachmentDefinitions,
		"docs/multi-networkpolicy-crd.yaml":                         v1beta1.MultiNetworkPolicies,
	} {
		if err := testenv.InstallCRD(ctx, dyn, file, gvr); err != nil {
			b.Fatal(err)
		}
	}
	m, err := controllermanager.Config{Kube: env.RESTConfig, KOS: kosSrv.DirectConfig,
		SubnetValidatorWorkers: 1, IPAMWorkers: 1, PodNetworks: true, PodNetworkWorkers: 1, MultiNetworkPolicy: true}.Complete().New()
	if err != nil {
		b.Fatal(err)
	}
	managerDone := make(chan error, 1)
	go func() { managerDone <- m.Run(ctx) }()

	rec := &stamps{changed: make(chan struct{}, 1)}
	enforcers := map[string]*policy.Enforcer{}
	var wg sync.WaitGroup
	b.Cleanup(func() {
		cancel()
		wg.Wait()
		if err := <-managerDone; err != nil {
			b.Errorf("controller manager: %v", err)
		}
	})
	for _, node := range convergenceNodes {
		inst := ovsenv.StartT(b, ovsenv.Options{})
		f := ovs.New(ovs.Config{RunDir: inst.RunDir, DatapathType: "netdev"})
		if _, err := f.Ensure(ctx); err != nil {
			b.Fatalf("ensuring the bridge of %s: %v", node, err)
		}
		e, err := policy.New(policy.Config{Node: node, Client: kos, Switch: &timedSwitch{node: node, f: f, rec: rec}})
		if err != nil {
			b.Fatal(err)
		}
		enforcers[node] = e
		// The agent runs its enforcer with two workers.
		wg.Go(func() { _ = e.Run(ctx, 2) })
	}

	nsObj, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "converge-"}}, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	ns := nsObj.Name
	if _, err := kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		b.Fatal(err)
	}
	const vni = 190
	if _, err := kos.NetworkV1alpha1().Subnets(ns).Create(ctx, &v1alpha1.Subnet{
		ObjectMeta: metav1.ObjectMeta{Name: "blue"}, Spec: v1alpha1.SubnetSpec{IPv4: "10.190.0.0/24", VNI: vni},
	}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	createB(b, dyn.Resource(podnetwork.NetworkAttachmentDefinitions).Namespace(ns), map[string]any{"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
		"metadata": map[string]any{"name": "blue"}, "spec": map[string]any{"config": `{"cniVersion":"1.0.0","type":"kos","subnet":"blue"}`}})
	for i, node := range convergenceNodes {
		for j, app := range []string{"a", "c"} {
			_, err := kube.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s%d", app, i+1), Labels: map[string]string{"app": app},
					Annotations: map[string]string{podnetwork.NetworksAnnotation: "blue"}},
				Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "main", Image: "kos.example.com/pause:never-pulled"}}},
			}, metav1.CreateOptions{})
			if err != nil {
				b.Fatalf("creating pod %d of %s: %v", j, node, err)
			}
		}
	}
	poll.Until(b, time.Minute, "every pod's attachment has an address", func(ctx context.Context) error {
		list, err := kos.NetworkV1alpha1().NetworkAttachments(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		n := 0
		for _, a := range list.Items {
			if a.Status.IPv4 != "" {
				n++
			}
		}
		if n < 2*len(convergenceNodes) {
			return fmt.Errorf("%d of %d attachments have an address", n, 2*len(convergenceNodes))
		}
		return nil
	})

	policies := dyn.Resource(v1beta1.MultiNetworkPolicies).Namespace(ns)
	mnp := func(name string, selected string, port int64) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "k8s.cni.cncf.io/v1beta1", "kind": "MultiNetworkPolicy",
			"metadata": map[string]any{"name": name, "annotations": map[string]any{v1beta1.PolicyForAnnotation: "blue"}},
			"spec": map[string]any{"podSelector": map[string]any{"matchLabels": map[string]any{"app": selected}}, "ingress": []any{map[string]any{
				"from":  []any{map[string]any{"podSelector": map[string]any{"matchLabels": map[string]any{"app": "c"}}}},
				"ports": []any{map[string]any{"protocol": "TCP", "port": port}},
			}}}}}
	}
	// The base policies isolate every pod, so that every node has a model
	// before the toggle comes and goes; there are as many as the truth
	// table's.
	const basePolicies = 12
	for i := range basePolicies {
		base := mnp(fmt.Sprintf("base-%d", i), "a", int64(7000+i))
		base.Object["spec"].(map[string]any)["podSelector"] = map[string]any{}
		if _, err := policies.Create(ctx, base, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	for node, e := range enforcers {
		poll.Until(b, time.Minute, "the base policies are on the switch of "+node, func(context.Context) error {
			p := e.Applied(vni)
			if len(p.Policies) != basePolicies || len(p.Policies[0].Selected) != 2 {
				return fmt.Errorf("the switch has %+v", p.Policies)
			}
			return nil
		})
	}

	// The benchmark's own informers see the watch events when the
	// controller's and the agents' do.
	toggle := ns + "/toggle"
	dynFactory := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, ns, nil)
	if _, err := dynFactory.ForResource(v1beta1.MultiNetworkPolicies).Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { rec.policyEvent(obj, true) },
		DeleteFunc: func(obj any) { rec.policyEvent(obj, false) },
	}); err != nil {
		b.Fatal(err)
	}
	kosFactory := externalversions.NewSharedInformerFactoryWithOptions(kos, 0, externalversions.WithNamespace(ns))
	nodePolicyEvent := func(obj any) {
		if p, ok := obj.(*v1alpha1.NodeNetworkPolicy); ok {
			rec.add(stamp{kind: stageNodePolicy, node: p.Spec.Node, has: slices.ContainsFunc(p.Spec.Policies, func(m v1alpha1.PolicyModel) bool { return m.Name == toggle })})
		}
	}
	if _, err := kosFactory.Network().V1alpha1().NodeNetworkPolicies().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    nodePolicyEvent,
		UpdateFunc: func(_, obj any) { nodePolicyEvent(obj) },
	}); err != nil {
		b.Fatal(err)
	}
	dynFactory.Start(ctx.Done())
	kosFactory.Start(ctx.Done())
	// Shutdown waits for the informers, which stop with ctx.
	defer func() {
		cancel()
		dynFactory.Shutdown()
		kosFactory.Shutdown()
	}()
	dynFactory.WaitForCacheSync(ctx.Done())
	kosFactory.WaitForCacheSync(ctx.Done())
	rec.toggle = toggle

	// The setup runs once; the sub-benchmark runs the writes.
	// The toggle's state outlives a run: testing runs the sub-benchmark
	// with b.N 1 first.
	present := false
	b.Run("toggle", func(b *testing.B) {
		toggleWrites(ctx, b, policies, mnp("toggle", "a", 7777), &present, rec)
	})
}

// toggleWrites creates and deletes the toggle policy in turn, b.N writes,
// each once the last one is on every switch, and reports the stages;
// present says whether the toggle exists.
func toggleWrites(ctx context.Context, b *testing.B, policies dynamic.ResourceInterface, toggle *unstructured.Unstructured, present *bool, rec *stamps) {
	loadStart := load(b)
	var runs []run
	b.ResetTimer()
	for i := range b.N {
		want := !*present
		write := func() error {
			_, err := policies.Create(ctx, toggle, metav1.CreateOptions{})
			return err
		}
		if !want {
			write = func() error { return policies.Delete(ctx, toggle.GetName(), metav1.DeleteOptions{}) }
		}
		began := rec.reset()
		if err := write(); err != nil {
			b.Fatalf("writing the toggle policy: %v", err)
		}
		r, err := rec.wait(ctx, began, time.Now(), want, time.Minute)
		if err != nil {
			b.Fatalf("write %d: %v", i+1, err)
		}
		*present = want
		runs = append(runs, r)
		// As on the cluster, the next write comes a little after.
		b.StopTimer()
		time.Sleep(100 * time.Millisecond)
		b.StartTimer()
	}
	b.StopTimer()
	loadEnd := load(b)
	report(b, runs, loadStart, loadEnd)
}

// run is one write's timestamps, as durations since the write began.
type run struct {
	api, policy time.Duration
	// By node: the NodeNetworkPolicy's watch event, the enforcer's read
	// of the drops just before it sets the policy, SetPolicy's start and
	// return.
	nodePolicy, drops, set, applied map[string]time.Duration
}

// total is when the last switch held the write.
func (r run) total() time.Duration {
	var d time.Duration
	for _, a := range r.applied {
		d = max(d, a)
	}
	return d
}

// stages are the run's stages, each by its own duration, named.
func (r run) stages() map[string]time.Duration {
	s := map[string]time.Duration{
		"api-call":         r.api,
		"policy-watch":     r.policy,
		"end-to-end":       r.total(),
		"publish-first":    time.Duration(1<<63 - 1),
		"publish-last":     0,
		"agent-queue-max":  0,
		"drops-read-max":   0,
		"switch-write-max": 0,
	}
	for node, np := range r.nodePolicy {
		s["publish-first"] = min(s["publish-first"], np-r.policy)
		s["publish-last"] = max(s["publish-last"], np-r.policy)
		s["agent-queue-max"] = max(s["agent-queue-max"], r.drops[node]-np)
		s["drops-read-max"] = max(s["drops-read-max"], r.set[node]-r.drops[node])
		s["switch-write-max"] = max(s["switch-write-max"], r.applied[node]-r.set[node])
	}
	return s
}

const (
	stagePolicy     = "policy"
	stageNodePolicy = "nodePolicy"
	stageDrops      = "drops"
	stageSet        = "set"
	stageApplied    = "applied"
)

type stamp struct {
	kind, node string
	has        bool
	at         time.Time
}

// stamps collects the timestamps of the path.
type stamps struct {
	toggle  string
	changed chan struct{}

	mu  sync.Mutex
	all []stamp
}

func (s *stamps) add(st stamp) {
	if st.at.IsZero() {
		st.at = time.Now()
	}
	s.mu.Lock()
	s.all = append(s.all, st)
	s.mu.Unlock()
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

func (s *stamps) policyEvent(obj any, has bool) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	if u, ok := obj.(*unstructured.Unstructured); ok && u.GetNamespace()+"/"+u.GetName() == s.toggle {
		s.add(stamp{kind: stagePolicy, has: has})
	}
}

// reset forgets every stamp and returns the time a write begins.
func (s *stamps) reset() time.Time {
	s.mu.Lock()
	s.all = nil
	s.mu.Unlock()
	return time.Now()
}

// wait waits until every node's switch holds the toggle (has) and returns
// the run's timestamps: the first of each kind that has it.
func (s *stamps) wait(ctx context.Context, began, written time.Time, has bool, timeout time.Duration) (run, error) {
	deadline := time.After(timeout)
	for {
		s.mu.Lock()
		r := run{api: written.Sub(began), nodePolicy: map[string]time.Duration{}, drops: map[string]time.Duration{},
			set: map[string]time.Duration{}, applied: map[string]time.Duration{}}
		seenPolicy := false
		drops := map[string][]time.Duration{}
		for _, st := range s.all {
			if st.kind == stageDrops {
				drops[st.node] = append(drops[st.node], st.at.Sub(began))
				continue
			}
			if st.has != has {
				continue
			}
			d := st.at.Sub(began)
			first := func(m map[string]time.Duration) {
				if _, ok := m[st.node]; !ok {
					m[st.node] = d
				}
			}
			switch st.kind {
			case stagePolicy:
				if !seenPolicy {
					r.policy, seenPolicy = d, true
				}
			case stageNodePolicy:
				first(r.nodePolicy)
			case stageSet:
				first(r.set)
			case stageApplied:
				first(r.applied)
			}
		}
		s.mu.Unlock()
		// The drops read of a set is the last one before it.
		for node, set := range r.set {
			r.drops[node] = set
			for _, d := range drops[node] {
				if d <= set {
					r.drops[node] = d
				}
			}
		}
		if seenPolicy && len(r.applied) == len(convergenceNodes) && len(r.nodePolicy) == len(convergenceNodes) {
			return r, nil
		}
		select {
		case <-s.changed:
		case <-deadline:
			return r, fmt.Errorf("not on every switch within %v: %+v", timeout, r)
		case <-ctx.Done():
			return r, ctx.Err()
		}
	}
}

// timedSwitch is a node's real switch that stamps the enforcer's calls.
type timedSwitch struct {
	node string
	f    *ovs.Fabric
	rec  *stamps
}

func (s *timedSwitch) has(p fabric.NetworkPolicy) bool {
	return slices.ContainsFunc(p.Policies, func(p fabric.Policy) bool { return p.Name == s.rec.toggle })
}

func (s *timedSwitch) SetPolicy(ctx context.Context, p fabric.NetworkPolicy) error {
	s.rec.add(stamp{kind: stageSet, node: s.node, has: s.has(p)})
	err := s.f.SetPolicy(ctx, p)
	if err == nil {
		s.rec.add(stamp{kind: stageApplied, node: s.node, has: s.has(p)})
	}
	return err
}

// NetworkPolicyDrops keeps the enforcer's read of the drops before each
// rewrite, as the agent's switch has it.
func (s *timedSwitch) NetworkPolicyDrops(ctx context.Context, vni uint32) ([]fabric.PolicyDrop, error) {
	s.rec.add(stamp{kind: stageDrops, node: s.node})
	return s.f.NetworkPolicyDrops(ctx, vni)
}

// load returns the machine's one-minute load average.
func load(b *testing.B) float64 {
	out, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		b.Logf("reading the load: %v", err)
		return -1
	}
	l, _ := strconv.ParseFloat(strings.Fields(string(out))[0], 64)
	return l
}

// report logs p50 and p99 of each stage, and reports the whole's as
// metrics with the load.
func report(b *testing.B, runs []run, loadStart, loadEnd float64) {
	if len(runs) == 0 {
		return
	}
	by := map[string][]time.Duration{}
	for _, r := range runs {
		for name, d := range r.stages() {
			by[name] = append(by[name], d)
		}
	}
	pct := func(ds []time.Duration, p int) time.Duration {
		ds = slices.Sorted(slices.Values(ds))
		// Nearest rank.
		return ds[max(0, (len(ds)*p+99)/100-1)]
	}
	var lines []string
	for _, name := range []string{"api-call", "policy-watch", "publish-first", "publish-last", "agent-queue-max", "drops-read-max", "switch-write-max", "end-to-end"} {
		ds := by[name]
		lines = append(lines, fmt.Sprintf("%-17s p50 %8v  p99 %8v  max %8v", name, pct(ds, 50).Round(100*time.Microsecond),
			pct(ds, 99).Round(100*time.Microsecond), slices.Max(ds).Round(100*time.Microsecond)))
	}
	// To standard error: testing cuts a benchmark's log to ten lines.
	fmt.Fprintf(os.Stderr, "%s: %d writes, load %.2f → %.2f. Stages: publish, from the policy's watch event to the NodeNetworkPolicies'; "+
		"agent queue, from those to the enforcer's read of the drops; drops read, from there to SetPolicy; switch write, SetPolicy itself:\n%s\n",
		b.Name(), len(runs), loadStart, loadEnd, strings.Join(lines, "\n"))
	total := by["end-to-end"]
	b.ReportMetric(float64(pct(total, 50).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(pct(total, 99).Microseconds())/1000, "p99-ms")
	b.ReportMetric(max(loadStart, loadEnd), "load")
}

func createB(b *testing.B, r dynamic.ResourceInterface, obj map[string]any) {
	b.Helper()
	if _, err := r.Create(context.Background(), &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{}); err != nil {
		b.Fatalf("creating %v: %v", obj["metadata"], err)
	}
}
