package e2e

// This file holds the chaos step of TestIntegrationStandardRelease: every
// KOS process killed in turn while tenants work, what is measured of each
// kill, and how the processes to kill are found. The churn and the informer
// it reads are in chaos_churn_test.go; the checks of what a kill left behind
// in chaos_aftermath_test.go.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"

	"github.com/kos-sdn/kos/tools/figures"
	"github.com/kos-sdn/kos/tools/kosinstall"
	"github.com/kos-sdn/kos/tools/ovsenv"
	"github.com/kos-sdn/kos/tools/poll"
)

// The chaos step: every KOS process killed in turn while tenants work.
const (
	// pingInterval is how often the chaos step's pinger sends an echo
	// request; it bounds how finely a ping gap is measured.
	pingInterval = 100 * time.Millisecond
	// churnLive is how many attachments each churn worker keeps; it
	// deletes its oldest when it has more.
	churnLive = 3
	// churnPause is how long a churn worker rests between two attachments.
	churnPause = 300 * time.Millisecond
	// churnFlash is how often a churn worker deletes an attachment at once
	// after creating it (every churnFlash-th), before it can be ready:
	// IPAM and the agent may be half-way through it.
	churnFlash = 4
	// convergeTimeout bounds how long KOS may take to recover from a kill;
	// it is a failure, not a figure, when it takes longer.
	convergeTimeout = 4 * time.Minute
	// churnPrefix names the churn's attachments.
	churnPrefix = "chaos-"
)

// chaosTarget is one process the chaos step kills.
type chaosTarget struct {
	// name names the target in figures.
	name string
	// pod and container are what kubelet restarts after the kill.
	pod       *corev1.Pod
	container string
	// pid finds the process to kill.
	pid func(t *testing.T) int
	// guestsLost is the node whose guests lose their interfaces with the
	// process (ovs-vswitchd's), "" for none: they are plumbed again, as a
	// workload's runtime would.
	guestsLost string
}

// testChaos kills, with SIGKILL, one etcd member, one kos-apiserver, the
// controller manager that holds the Lease, one node's agent and that node's
// ovs-vswitchd, one after the other, while attachments are created and
// deleted on every node and two guests on different nodes ping each other.
// After each kill it waits for KOS to converge: the killed container
// restarted and every KOS pod Ready, a new attachment ready on every node,
// every guest's attachment ready, the ping answered again. It logs the
// longest ping gap, the lost echo requests and the time to converge of each
// kill as figures. Users see nothing of the etcd member's kill
// (requireEtcdKillUnseen). Afterwards no two attachments of a VNI share an
// address, every IPLock belongs to the attachment that holds its address,
// and every node's switch holds exactly the ports and flows of the
// attachments there are: before and after the churn's last attachments are
// deleted.
func (s *standard) testChaos(t *testing.T) {
	ctx := t.Context()
	from, to := s.guests["blue-1"], s.guests["blue-2"]
	if from == nil || to == nil || from.Attachment.Spec.Node == to.Attachment.Spec.Node {
		t.Fatalf("the chaos step needs the guests blue-1 and blue-2 on two nodes")
	}
	target := s.node(t, to.Attachment.Spec.Node)

	watch := newAttachmentWatch(t, s)
	pings, err := kosinstall.WatchPing(from, to.IP, pingInterval)
	if err != nil {
		t.Fatal(err)
	}
	defer pings.Stop()
	awaitPing(t, from, to.IP, time.Minute)
	churn := startChurn(s, watch)
	defer churn.stop()

	targets := []func(t *testing.T) chaosTarget{
		func(t *testing.T) chaosTarget {
			pod := s.firstPod(t, kosinstall.Namespace, "kos-etcd", "")
			return s.containerTarget("etcd-member", pod, "etcd")
		},
		func(t *testing.T) chaosTarget {
			pod := s.firstPod(t, kosinstall.Namespace, "kos-apiserver", "")
			return s.containerTarget("kos-apiserver", pod, "kos-apiserver")
		},
		func(t *testing.T) chaosTarget {
			return s.containerTarget("controller-manager-leader", s.leadingControllerManager(t), "kos-controller-manager")
		},
		func(t *testing.T) chaosTarget {
			pod := s.firstPod(t, kosinstall.AgentNamespace, "kos-agent", target.Name)
			return s.containerTarget("agent", pod, "kos-agent")
		},
		func(t *testing.T) chaosTarget {
			pod := s.firstPod(t, kosinstall.AgentNamespace, "kos-agent", target.Name)
			return chaosTarget{
				name: "ovs-vswitchd", pod: pod, container: "ovs",
				pid:        func(t *testing.T) int { return vswitchdPID(t, target) },
				guestsLost: target.Name,
			}
		},
	}
	for _, find := range targets {
		tg := find(t)
		if !t.Run(tg.name+" killed", func(t *testing.T) { s.kill(t, tg, pings, churn, watch) }) {
			t.FailNow()
		}
	}
	churned := churn.stop()
	t.Logf("the churn made %d attachments (%d deleted at once) and deleted %d; %d writes failed and were retried",
		churned.created, churned.flashed, churned.deleted, churned.failedWrites)
	if churned.created == 0 {
		t.Fatal("the churn made no attachment")
	}
	total := pings.Stats()
	figures.Count(t, "chaos-pings-sent", total.Sent, "packets")
	figures.Count(t, "chaos-pings-lost", total.Lost, "packets")

	s.checkAftermath(t, "with the churn's last attachments")
	began := time.Now()
	// By listing, not from the churn's own list: a create the churn's end
	// interrupted may have passed.
	list, err := s.network.NetworkV1alpha1().NetworkAttachments(standardNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	left := 0
	for _, a := range list.Items {
		if !strings.HasPrefix(a.Name, churnPrefix) {
			continue
		}
		left++
		if err := s.network.NetworkV1alpha1().NetworkAttachments(standardNamespace).Delete(ctx, a.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("deleting attachment %s: %v", a.Name, err)
		}
	}
	t.Logf("deleting the churn's %d attachments left", left)
	poll.Until(t, time.Minute, "the churn's attachments gone", func(ctx context.Context) error {
		list, err := s.network.NetworkV1alpha1().NetworkAttachments(standardNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, a := range list.Items {
			if strings.HasPrefix(a.Name, churnPrefix) {
				return fmt.Errorf("attachment %s still exists", a.Name)
			}
		}
		return nil
	})
	s.checkAftermath(t, "after the churn's attachments were deleted")
	figures.Duration(t, "chaos-cleanup", time.Since(began))
}

// kill kills tg's process and waits for KOS to converge, then logs the
// figures of the kill.
func (s *standard) kill(t *testing.T, tg chaosTarget, pings *kosinstall.PingWatch, churn *churn, watch *attachmentWatch) {
	restarts := containerRestarts(tg.pod, tg.container)
	if restarts < 0 {
		t.Fatalf("pod %s has no container %s", tg.pod.Name, tg.container)
	}
	// The guests whose interfaces die with the process.
	var lost []string
	if tg.guestsLost != "" {
		for name, g := range s.guests {
			if g.Attachment.Spec.Node == tg.guestsLost {
				lost = append(lost, name)
			}
		}
		slices.Sort(lost)
	}
	failedBefore := churn.failedWrites()
	t.Logf("before the kill: %s", s.apiPath(t.Context()))
	pid := tg.pid(t)
	killed := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("killing %s (PID %d): %v", tg.name, pid, err)
	}
	t.Logf("killed %s: PID %d, container %s of pod %s on %s", tg.name, pid, tg.container, tg.pod.Name, tg.pod.Spec.NodeName)

	// The workload's runtime gives the guests their new interfaces as
	// soon as there are. The userspace datapath's interfaces are tap
	// devices that outlive their ovs-vswitchd, dead: the restarted one
	// makes new ones in the node's namespace, which replace them.
	for _, name := range lost {
		g := s.guests[name]
		node := &ovsenv.Netns{Name: s.node(t, tg.guestsLost).Netns}
		poll.Until(t, convergeTimeout, "the new interface of guest "+name+" on its node", func(ctx context.Context) error {
			_, err := node.Run(ctx, "ip", "link", "show", g.Attachment.Status.IfcName)
			return err
		})
		s.plumb(t, name)
	}
	poll.Until(t, convergeTimeout, "container "+tg.container+" of "+tg.pod.Name+" restarted and every KOS pod Ready", func(ctx context.Context) error {
		p, err := s.kube.CoreV1().Pods(tg.pod.Namespace).Get(ctx, tg.pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if n := containerRestarts(p, tg.container); n <= restarts {
			return fmt.Errorf("container %s restarted %d times, as before the kill", tg.container, n)
		}
		if !podReady(p) {
			return fmt.Errorf("pod %s not Ready", p.Name)
		}
		return kosinstall.Ready(ctx, s.kube, s.agg)
	})
	podsBack := time.Since(killed)
	// Ready, one list answered included, does not yet mean that the main
	// kube-apiserver routes every request to a replica that answers: its
	// view of the endpoints and its availability check follow the pods by
	// a moment, and after an etcd member's kill 503s came for seconds
	// after Ready. What users see counts.
	apiFailed := s.apiSteady(t, convergeTimeout, steadyLists)
	churn.awaitProgress(t, killed, convergeTimeout)
	poll.Until(t, convergeTimeout, "every guest's attachment ready", func(context.Context) error {
		for name := range s.guests {
			if err := watch.ready(standardNamespace, name); err != nil {
				return err
			}
		}
		return nil
	})
	poll.Until(t, time.Minute, "the ping answered again", func(context.Context) error { return pings.AnsweredSince(killed) })
	converged := time.Since(killed)
	if err := s.duplicateAddresses(t); err != nil {
		t.Error(err)
	}

	window := pings.Window(killed, time.Now())
	gap, sent, missed := window.LongestGap, window.Sent, window.Lost
	t.Logf("%s: pods Ready again after %s, converged after %s; ping gap %s, %d of %d echo requests unanswered; slowest churn attachment since the kill ready after %s, %d churn writes failed; %d KOS API requests failed once the pods were Ready",
		tg.name, podsBack.Round(100*time.Millisecond), converged.Round(100*time.Millisecond), gap.Round(10*time.Millisecond), missed, sent,
		churn.slowestSince(killed).Round(100*time.Millisecond), churn.failedWrites()-failedBefore, apiFailed)
	figures.Duration(t, "chaos-"+tg.name+"-ping-gap", gap)
	figures.Count(t, "chaos-"+tg.name+"-lost-pings", missed, "packets")
	figures.Duration(t, "chaos-"+tg.name+"-converge", converged)
	figures.Count(t, "chaos-"+tg.name+"-api-errors-after-ready", apiFailed, "requests")
	if tg.name == "etcd-member" {
		requireEtcdKillUnseen(t, apiFailed, churn.failuresFrom(failedBefore))
	}
}

// etcdKillWriteErrors is how many of the churn's writes may fail through an
// etcd member's kill (SIGKILL): one whose answer died with the member after
// etcd applied it. kos-apiserver sends again every write whose outcome etcd
// could not tell when that cannot apply it twice
// (--etcd-replay-uncertain-writes, components/apiserver
// TestIntegrationEtcdMemberRestart); an update or delete the dead member had
// applied cannot be told from one it had not, and fails with etcd's
// Unavailable (500). Its figures: 0 failed requests of ~400 in each of the
// four cases (a follower or the leader, SIGTERM or SIGKILL), where the
// library's behaviour failed ~18 writes through the leader's kill.
const etcdKillWriteErrors = 1

// requireEtcdKillUnseen fails the test when users saw an etcd member's kill:
// a list failed once the pods were Ready again (the readiness grace keeps
// every kos-apiserver replica in the Service throughout), or more of the
// churn's writes failed than etcdKillWriteErrors, or any for another
// reason than etcd's Unavailable.
func requireEtcdKillUnseen(t *testing.T, listsFailed int, writeFailures []string) {
	t.Helper()
	if listsFailed > 0 {
		t.Errorf("%d lists through the main kube-apiserver failed after an etcd member's kill; want 0", listsFailed)
	}
	unavailable := 0
	for _, f := range writeFailures {
		if strings.Contains(f, "etcdserver: ") || strings.Contains(f, "code = Unavailable") {
			unavailable++
			continue
		}
		t.Errorf("a churn write failed through an etcd member's kill, not by etcd's Unavailable: %s", f)
	}
	if unavailable > etcdKillWriteErrors {
		t.Errorf("%d churn writes failed by etcd's Unavailable through an etcd member's kill; want at most %d:\n%s",
			unavailable, etcdKillWriteErrors, strings.Join(writeFailures, "\n"))
	}
	for _, f := range writeFailures {
		t.Logf("a churn write failed through the etcd member's kill: %s", f)
	}
}

// steadyLists is how many lists in a row apiSteady wants answered after a
// kill.
const steadyLists = 5

// apiSteady waits until lists lists of attachments in a row, a tenth of a
// second apart, are answered through the main kube-apiserver, as a user's
// would be, and returns how many failed on the way; each failure is logged,
// with what routes the KOS API then (apiPath) at most every pathEvery.
// Not so within timeout fails the test. Each list has a time limit of its
// own, so that a long streak is not cut short by poll's bound on one check.
func (s *standard) apiSteady(t *testing.T, timeout time.Duration, lists int) int {
	t.Helper()
	const pathEvery = 2 * time.Second
	began := time.Now()
	var pathAt time.Time
	failed, streak := 0, 0
	for streak < lists {
		if time.Since(began) > timeout {
			t.Fatalf("the KOS API did not answer %d lists in a row within %s: %d failed, the last streak %d", lists, timeout, failed, streak)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		_, err := s.network.NetworkV1alpha1().NetworkAttachments("").List(ctx, metav1.ListOptions{Limit: 1})
		cancel()
		if err != nil {
			failed++
			streak = 0
			if time.Since(pathAt) < pathEvery {
				t.Logf("a list through the main kube-apiserver failed: %s", serverSaid(err))
			} else {
				ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
				t.Logf("a list through the main kube-apiserver failed: %s; %s", serverSaid(err), s.apiPath(ctx))
				cancel()
				pathAt = time.Now()
			}
		} else {
			streak++
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("the KOS API answering %d lists in a row after %s", lists, since(began))
	return failed
}

// containerTarget is the main process of container of pod.
func (s *standard) containerTarget(name string, pod *corev1.Pod, container string) chaosTarget {
	return chaosTarget{
		name: name, pod: pod, container: container,
		pid: func(t *testing.T) int { return containerPID(t, pod, container) },
	}
}

// firstPod returns the first (by name) Ready pod of app in namespace, on
// node unless node is "".
func (s *standard) firstPod(t *testing.T, namespace, app, node string) *corev1.Pod {
	t.Helper()
	pods, err := s.kube.CoreV1().Pods(namespace).List(t.Context(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + app})
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(pods.Items, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	for i, p := range pods.Items {
		if podReady(&p) && (node == "" || p.Spec.NodeName == node) {
			return &pods.Items[i]
		}
	}
	t.Fatalf("no Ready %s pod in %s (node %q)", app, namespace, node)
	return nil
}

// leadingControllerManager returns the controller manager pod that holds
// the Lease.
func (s *standard) leadingControllerManager(t *testing.T) *corev1.Pod {
	t.Helper()
	var leader *corev1.Pod
	poll.Until(t, time.Minute, "a controller manager holding the Lease", func(ctx context.Context) error {
		lease, err := s.kube.CoordinationV1().Leases(kosinstall.Namespace).Get(ctx, "kos-controller-manager", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if lease.Spec.HolderIdentity == nil {
			return errors.New("the Lease has no holder")
		}
		pod, _, ok := strings.Cut(*lease.Spec.HolderIdentity, "_")
		if !ok {
			return fmt.Errorf("the Lease's holder %q names no pod", *lease.Spec.HolderIdentity)
		}
		p, err := s.kube.CoreV1().Pods(kosinstall.Namespace).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			return err
		}
		leader = p
		return nil
	})
	return leader
}

// containerRestarts returns how often container of pod restarted, -1 if
// the pod has no such container.
func containerRestarts(p *corev1.Pod, container string) int32 {
	for _, st := range p.Status.ContainerStatuses {
		if st.Name == container {
			return st.RestartCount
		}
	}
	return -1
}

// containerPID returns the host PID of the main process of container of
// pod: the process in the container's cgroup that is PID 1 of its own PID
// namespace.
func containerPID(t *testing.T, pod *corev1.Pod, container string) int {
	t.Helper()
	pid, err := kosinstall.ContainerPID(pod, container)
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// serverSaid is err's text with what the server wrote when that was not a
// Status: client-go keeps such a body (the aggregator's own 503s, "service
// unavailable" or "Error trying to reach service: ...") only as a cause,
// and which of them it was tells an unavailable APIService from an
// endpoint that does not answer.
func serverSaid(err error) string {
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Details == nil {
		return err.Error()
	}
	var said []string
	for _, c := range status.Status().Details.Causes {
		if c.Type == metav1.CauseTypeUnexpectedServerResponse {
			said = append(said, strings.TrimSpace(c.Message))
		}
	}
	if len(said) == 0 {
		return err.Error()
	}
	return fmt.Sprintf("%v; the server said %q", err, strings.Join(said, "; "))
}

// apiPath says what the main kube-apiserver routes the KOS API by: the
// APIService's Available condition, the KOS control pods with their nodes
// and addresses, and the kos-apiserver Service's endpoints with their
// readiness.
func (s *standard) apiPath(ctx context.Context) string {
	var b strings.Builder
	if svc, err := s.agg.ApiregistrationV1().APIServices().Get(ctx, kosinstall.APIService, metav1.GetOptions{}); err != nil {
		fmt.Fprintf(&b, "APIService: %v", err)
	} else {
		for _, c := range svc.Status.Conditions {
			if c.Type == apiregistrationv1.Available {
				fmt.Fprintf(&b, "APIService Available %s since %s (%s: %s)", c.Status, c.LastTransitionTime.Format("15:04:05"), c.Reason, c.Message)
			}
		}
	}
	if pods, err := s.kube.CoreV1().Pods(kosinstall.Namespace).List(ctx, metav1.ListOptions{}); err != nil {
		fmt.Fprintf(&b, "; pods: %v", err)
	} else {
		for _, p := range pods.Items {
			fmt.Fprintf(&b, "; pod %s on %s IP %s ready %t", p.Name, p.Spec.NodeName, p.Status.PodIP, podReady(&p))
		}
	}
	endpoints, err := s.kube.DiscoveryV1().EndpointSlices(kosinstall.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelServiceName + "=kos-apiserver",
	})
	if err != nil {
		fmt.Fprintf(&b, "; endpoints: %v", err)
		return b.String()
	}
	for _, es := range endpoints.Items {
		for _, e := range es.Endpoints {
			ready := e.Conditions.Ready != nil && *e.Conditions.Ready
			node := ""
			if e.NodeName != nil {
				node = *e.NodeName
			}
			fmt.Fprintf(&b, "; endpoint %v on %s ready %t", e.Addresses, node, ready)
		}
	}
	return b.String()
}
