package agent_test

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kos-sdn/kos/components/agent/cniserver"
	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/controllers/podnetwork"
	"github.com/kos-sdn/kos/components/fabric/ovs"
	"github.com/kos-sdn/kos/tools/ovsenv"
	"github.com/kos-sdn/kos/tools/poll"
	"github.com/kos-sdn/kos/tools/testenv"
)

var (
	cniRate = flag.Float64("cni.rate", 10, "pods BenchmarkCNIAdd's second sub-benchmark creates per second")
	cniKeep = flag.Int("cni.keep", 100, "pods BenchmarkCNIAdd's churn sub-benchmark keeps on the node at most (kubelet's default limit is 110)")
)

// BenchmarkCNIAdd times a pod's CNI ADD from the moment kos-cni is run
// until it prints its result, with the whole pipeline behind it real:
// kube-apiserver with the NetworkAttachmentDefinition CRD, kos-apiserver,
// kos-controller-manager's IPAM and pod-network controllers, and an agent
// with its CNI server on Open vSwitch. Each pod is created, bound to the
// agent's node, and its ADD is run as soon as the create returns, so that
// the ADD waits for the controller to create the pod's attachment, for
// IPAM to address it and for the agent to make it ready: a worst case, as
// kubelet runs the plugin only after it has made the pod's sandbox.
//
// Sub-benchmarks:
//
//   - idle: one pod at a time, each ADD alone in the pipeline;
//   - 10pods/s: pods created at 10 a second (-cni.rate), each ADD run
//     beside the others;
//   - ready-10pods/s: the node's part alone, kos-cni → agent → Open
//     vSwitch, as kubelet sees it: the pods are created and their
//     attachments made ready first (untimed), then their ADDs are run at
//     10 a second (-cni.rate), each beside the others;
//   - churn-10pods/s: as 10pods/s, for a node that stays within its pod
//     limit however long the run: once an ADD is done and the node has
//     more than 100 of the run's pods (-cni.keep), the oldest gets its
//     DEL and is deleted (untimed, beside the ADDs), as kubelet does
//     when a pod goes. Its adds/s is the rate a node sustains with the
//     control plane on the same cores;
//   - ready-churn-10pods/s: as churn, with the pods created and their
//     attachments made ready first, as in ready-10pods/s: the rate the
//     node's part sustains, the control plane doing only the deletes of
//     the pods that go beside it.
//
// Each reports the p50, p99 and longest ADD (p50-ms, p99-ms, max-ms), the
// ADDs done per second from the first pod's creation to the last result
// (adds/s), and the agent's mean time per fabric operation of a pod
// (plug_local-ms: the veth as the attachment's port, and its flows; a
// pod's attachment gets no internal port, so create_local-ms and
// delete_ports-ms, which an internal port's making and removal would
// take, stay 0 with no such operation counted), and logs them, with how
// many ran, and the machine's load average. Run it as
//
//	go test ./components/agent/ -run '^$' -bench CNIAdd -benchtime 100x
//
// and, for the rate one node sustains, with a rate above it, such as
// -cni.rate 40.
func BenchmarkCNIAdd(b *testing.B) {
	env := testenv.Shared(b)
	kube, err := kubernetes.NewForConfig(env.RESTConfig)
	if err != nil {
		b.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(env.RESTConfig)
	if err != nil {
		b.Fatal(err)
	}
	installNADCRD(b, dyn)
	k := newAPI(b)
	const vni = 234
	// Room for every pod of a long run: only churn deletes its pods.
	k.subnet("blue", "10.234.0.0/16", vni)
	// Started after the subnet, so stopped before the subnet's cleanup,
	// which would otherwise race it making the pods' attachments anew.
	startControllerManager(b)

	inst := ovsenv.StartT(b, ovsenv.Options{})
	cfg := agentConfig(b, k.node("a"), hostA, ovs.New(ovs.Config{RunDir: inst.RunDir, DatapathType: "netdev", MTU: podMTU}))
	// The agent checks its flows as often as by default, not as often as
	// the tests need.
	cfg.FlowCheckPeriod, cfg.ReconcilePeriod = 0, 0
	cfg.CNI = cniserver.Config{
		Socket:            filepath.Join(shortDir(b), "cni.sock"),
		Wait:              time.Minute,
		HostNetns:         "/run/netns/" + inst.Netns.Name,
		NoChecksumOffload: true,
	}
	agt := startAgent(b, cfg)
	conf := `{"cniVersion":"1.0.0","name":"blue","type":"kos","subnet":"blue"}`
	createNAD(b, dyn.Resource(podnetwork.NetworkAttachmentDefinitions).Namespace(k.ns), "blue", conf)
	if _, err := kube.CoreV1().ServiceAccounts(k.ns).Create(b.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		b.Fatal(err)
	}
	plugin := testenv.Build(b, "cmd/kos-cni")
	rt := &runtime{binDir: filepath.Dir(plugin), socket: cfg.CNI.Socket}
	poll.Until(b, settle, "the CNI server answers STATUS", func(ctx context.Context) error {
		// STATUS came with CNI 1.1.0.
		status := `{"cniVersion":"1.1.0","name":"blue","type":"kos","subnet":"blue"}`
		out, err := rt.runPlugin(ctx, "STATUS", &podSandbox{pod: &corev1.Pod{}, netns: &ovsenv.Netns{}}, filepath.Base(plugin), "", status)
		if err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}
		return nil
	})
	var pods atomic.Int64
	createPod := func(ctx context.Context, tb testing.TB, p *podSandbox) bool {
		name := fmt.Sprintf("pod-%d", pods.Add(1))
		pod, err := kube.CoreV1().Pods(k.ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{podnetwork.NetworksAnnotation: "blue"}},
			Spec: corev1.PodSpec{
				NodeName:   k.node("a"),
				Containers: []corev1.Container{{Name: "main", Image: "kos.example.com/pause:never-pulled"}},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			tb.Errorf("creating pod %s: %v", name, err)
			return false
		}
		p.pod, p.containerID = pod, "sandbox-"+name
		return true
	}
	runADD := func(ctx context.Context, tb testing.TB, p *podSandbox) time.Duration {
		began := time.Now()
		out, err := rt.runPlugin(ctx, "ADD", p, filepath.Base(plugin), "net1", conf)
		took := time.Since(began)
		if err != nil {
			tb.Errorf("ADD of pod %s: %v\n%s", p.pod.Name, err, out)
		}
		return took
	}
	// removePod runs a pod's DEL and deletes it, as kubelet does when a
	// pod goes.
	removePod := func(ctx context.Context, tb testing.TB, p *podSandbox) {
		if out, err := rt.runPlugin(ctx, "DEL", p, filepath.Base(plugin), "net1", conf); err != nil {
			tb.Errorf("DEL of pod %s: %v\n%s", p.pod.Name, err, out)
		}
		if err := kube.CoreV1().Pods(k.ns).Delete(ctx, p.pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))}); err != nil {
			tb.Errorf("deleting pod %s: %v", p.pod.Name, err)
		}
	}
	add := func(ctx context.Context, tb testing.TB, p *podSandbox) time.Duration {
		if !createPod(ctx, tb, p) {
			return 0
		}
		return runADD(ctx, tb, p)
	}
	netnses := func(tb testing.TB, n int) []*podSandbox {
		s := make([]*podSandbox, n)
		for i := range s {
			s[i] = &podSandbox{netns: ovsenv.NetnsT(tb)}
		}
		return s
	}
	// One pod through the whole chain, untimed, makes sure that everything
	// is up (the subnet validated, the caches synced).
	add(b.Context(), b, netnses(b, 1)[0])
	if b.Failed() {
		return
	}

	b.Run("idle", func(b *testing.B) {
		sandboxes := netnses(b, b.N)
		took := make([]time.Duration, b.N)
		ops := fabricTimes(b, agt.registry)
		began := time.Now()
		b.ResetTimer()
		for i := range b.N {
			took[i] = add(b.Context(), b, sandboxes[i])
		}
		reportLatencies(b, took, time.Since(began), ops, fabricTimes(b, agt.registry))
	})
	b.Run(fmt.Sprintf("%gpods/s", *cniRate), func(b *testing.B) {
		sandboxes := netnses(b, b.N)
		runAtRate(b, *cniRate, agt.registry, func(i int) time.Duration { return add(b.Context(), b, sandboxes[i]) })
	})
	// readySandboxes returns n sandboxes whose pods are created and whose
	// attachments are ready on the node: the control plane's part of the
	// pods' ADDs, done before the ADDs are timed.
	readySandboxes := func(b *testing.B, n int) []*podSandbox {
		sandboxes := netnses(b, n)
		for _, p := range sandboxes {
			if !createPod(b.Context(), b, p) {
				b.FailNow()
			}
		}
		poll.Until(b, time.Duration(n)*time.Second+settle, "the pods' attachments are ready on the node", func(ctx context.Context) error {
			atts, err := k.client.NetworkV1alpha1().NetworkAttachments(k.ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			ready := map[string]bool{}
			for _, att := range atts.Items {
				ready[att.Name] = att.Status.HostIP == hostA
			}
			for _, p := range sandboxes {
				if name := v1alpha1.AttachmentName(p.pod.Name, "net1"); !ready[name] {
					return fmt.Errorf("attachment %s is not ready", name)
				}
			}
			return nil
		})
		return sandboxes
	}
	b.Run(fmt.Sprintf("ready-%gpods/s", *cniRate), func(b *testing.B) {
		sandboxes := readySandboxes(b, b.N)
		runAtRate(b, *cniRate, agt.registry, func(i int) time.Duration { return runADD(b.Context(), b, sandboxes[i]) })
	})
	b.Run(fmt.Sprintf("churn-%gpods/s", *cniRate), func(b *testing.B) {
		churn(b, netnses(b, b.N), agt.registry, add, removePod)
	})
	b.Run(fmt.Sprintf("ready-churn-%gpods/s", *cniRate), func(b *testing.B) {
		churn(b, readySandboxes(b, b.N), agt.registry, runADD, removePod)
	})
}

// churn runs the ADDs of sandboxes at -cni.rate a second, each beside the
// others, with add, keeping at most -cni.keep of them on the node: once an
// ADD is done and there are more, the oldest goes with remove (untimed,
// beside the ADDs). It reports as runAtRate does.
func churn(b *testing.B, sandboxes []*podSandbox, reg prometheus.Gatherer, add func(context.Context, testing.TB, *podSandbox) time.Duration, remove func(context.Context, testing.TB, *podSandbox)) {
	var mu sync.Mutex
	var live []*podSandbox
	most := 0
	var gone sync.WaitGroup
	runAtRate(b, *cniRate, reg, func(i int) time.Duration {
		took := add(b.Context(), b, sandboxes[i])
		mu.Lock()
		live = append(live, sandboxes[i])
		most = max(most, len(live))
		var oldest *podSandbox
		if len(live) > *cniKeep {
			oldest, live = live[0], live[1:]
		}
		mu.Unlock()
		if oldest != nil {
			gone.Go(func() { remove(b.Context(), b, oldest) })
		}
		return took
	})
	gone.Wait()
	b.Logf("at most %d of the run's pods plugged and not yet sent away at once (each goes with its DEL and delete)", most)
}

// runAtRate starts b.N ADDs at rate a second, each beside the others:
// add(i) runs the i-th and returns its latency. It reports the latencies
// and the agent's fabric times (from reg) over the run.
func runAtRate(b *testing.B, rate float64, reg prometheus.Gatherer, add func(i int) time.Duration) {
	took := make([]time.Duration, b.N)
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	ops := fabricTimes(b, reg)
	began := time.Now()
	b.ResetTimer()
	for i := range b.N {
		if i > 0 {
			<-tick.C
		}
		wg.Go(func() { took[i] = add(i) })
	}
	wg.Wait()
	reportLatencies(b, took, time.Since(began), ops, fabricTimes(b, reg))
}

// reportLatencies reports the p50, p99 and longest of a sub-benchmark's ADD
// latencies, the ADDs done per second over elapsed, the mean time of each
// fabric operation of a pod between the agent's fabric times before and
// after, and the load average.
func reportLatencies(b *testing.B, took []time.Duration, elapsed time.Duration, before, after map[string]opTime) {
	b.StopTimer()
	slices.Sort(took)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(msec(percentile(took, 0.50)), "p50-ms")
	b.ReportMetric(msec(percentile(took, 0.99)), "p99-ms")
	b.ReportMetric(msec(took[len(took)-1]), "max-ms")
	b.ReportMetric(float64(len(took))/elapsed.Seconds(), "adds/s")
	means := ""
	for _, op := range []string{"create_local", "delete_ports", "plug_local"} {
		d := after[op].minus(before[op])
		b.ReportMetric(msec(d.mean()), op+"-ms")
		means += fmt.Sprintf(", %s %s (%d)", op, d.mean().Round(time.Millisecond), d.count)
	}
	b.Logf("%d ADDs in %s: p50 %s, p99 %s, max %s; mean fabric operations%s; load average %s", len(took), elapsed.Round(time.Millisecond),
		percentile(took, 0.50).Round(time.Millisecond), percentile(took, 0.99).Round(time.Millisecond),
		took[len(took)-1].Round(time.Millisecond), means, loadAverage())
}

// opTime is the time an agent spent in one kind of fabric operation, and
// how many it did.
type opTime struct {
	seconds float64
	count   uint64
}

func (o opTime) minus(p opTime) opTime { return opTime{o.seconds - p.seconds, o.count - p.count} }

func (o opTime) mean() time.Duration {
	if o.count == 0 {
		return 0
	}
	return time.Duration(o.seconds / float64(o.count) * float64(time.Second))
}

// fabricTimes returns an agent's fabric operation times so far, by
// operation.
func fabricTimes(b *testing.B, reg prometheus.Gatherer) map[string]opTime {
	b.Helper()
	families, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	times := map[string]opTime{}
	for _, f := range families {
		if f.GetName() != "kos_agent_fabric_operation_duration_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "operation" {
					times[l.GetValue()] = opTime{m.GetHistogram().GetSampleSum(), m.GetHistogram().GetSampleCount()}
				}
			}
		}
	}
	return times
}
