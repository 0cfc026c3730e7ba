package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	networkv1alpha1 "github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/controllers/ipam"
	"github.com/kos-sdn/kos/components/fabric"
	"github.com/kos-sdn/kos/components/fabric/ovs"
	kosinformers "github.com/kos-sdn/kos/components/generated/informers/externalversions"
	"github.com/kos-sdn/kos/tools/cluster"
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
	apiFailed := s.apiSteady(t, convergeTimeout)
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

// steadyLists is how many lists in a row apiSteady wants answered.
const steadyLists = 5

// apiSteady waits until steadyLists lists of attachments in a row, a tenth
// of a second apart, are answered through the main kube-apiserver, as a
// user's would be, and returns how many failed on the way. Not so within
// timeout fails the test.
func (s *standard) apiSteady(t *testing.T, timeout time.Duration) int {
	t.Helper()
	failed, streak := 0, 0
	poll.Until(t, timeout, fmt.Sprintf("the KOS API answering %d lists in a row", steadyLists), func(ctx context.Context) error {
		for streak < steadyLists {
			if _, err := s.network.NetworkV1alpha1().NetworkAttachments("").List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
				failed++
				streak = 0
				t.Logf("a list through the main kube-apiserver failed: %v", err)
				return err
			}
			streak++
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
		return nil
	})
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

// attachmentWatch is an informer on the attachments of every namespace,
// which the chaos step reads instead of polling the API.
type attachmentWatch struct {
	store cache.Store
}

func newAttachmentWatch(t *testing.T, s *standard) *attachmentWatch {
	factory := kosinformers.NewSharedInformerFactory(s.network, 0)
	inf := factory.Network().V1alpha1().NetworkAttachments().Informer()
	// The informer stops with the step.
	factory.Start(t.Context().Done())
	if !cache.WaitForCacheSync(t.Context().Done(), inf.HasSynced) {
		t.Fatal("the attachments informer did not sync")
	}
	return &attachmentWatch{store: inf.GetStore()}
}

// ready returns nil when the attachment exists, has an address and its
// interface on its node, and no errors; else what it lacks.
func (w *attachmentWatch) ready(namespace, name string) error {
	obj, ok, err := w.store.GetByKey(namespace + "/" + name)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("attachment %s/%s does not exist", namespace, name)
	}
	return attachmentUsable(obj.(*networkv1alpha1.NetworkAttachment))
}

// attachmentUsable returns nil when att has an address and its interface on
// its node, and no errors; else what it lacks.
func attachmentUsable(att *networkv1alpha1.NetworkAttachment) error {
	st := att.Status
	if st.IPv4 == "" || st.IfcName == "" || st.HostIP == "" || len(st.Errors.IPAM) > 0 || len(st.Errors.Host) > 0 {
		return fmt.Errorf("attachment %s/%s on %s: ipv4 %q, ifcName %q, hostIP %q, errors %+v", att.Namespace, att.Name, att.Spec.Node, st.IPv4, st.IfcName, st.HostIP, st.Errors)
	}
	return nil
}

// churn creates and deletes attachments on every node, as tenants do, each
// node's by a worker of its own: create one (in blue and red by turns),
// wait until it is ready, delete the oldest beyond churnLive; every
// churnFlash-th is deleted at once instead. Failed writes are retried.
type churn struct {
	s      *standard
	watch  *attachmentWatch
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	workers []*churnWorker
	stats   churnStats
	// failures are the failed writes, each with its time, in order.
	failures []string
	// readied holds when each attachment that got ready was created, and
	// how long it took.
	readied []churnReady
}

type churnWorker struct {
	node string
	// lastReady is when the newest attachment that got ready was created.
	lastReady time.Time
	// pending is the attachment being waited for, if any.
	pending string
}

type churnReady struct {
	created time.Time
	took    time.Duration
}

// churnStats is what a churn did.
type churnStats struct {
	created, flashed, deleted, failedWrites int
}

func startChurn(s *standard, watch *attachmentWatch) *churn {
	ctx, cancel := context.WithCancel(context.Background())
	c := &churn{s: s, watch: watch, cancel: cancel}
	for i, n := range s.env.Nodes {
		w := &churnWorker{node: n.Name}
		c.workers = append(c.workers, w)
		c.wg.Go(func() { c.run(ctx, i, w) })
	}
	return c
}

// stop stops the workers, waits for them, and returns what they did. It
// may be called more than once.
func (c *churn) stop() churnStats {
	c.cancel()
	c.wg.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

func (c *churn) run(ctx context.Context, worker int, w *churnWorker) {
	api := c.s.network.NetworkV1alpha1().NetworkAttachments(standardNamespace)
	var live []string
	// write retries a write until it passes or ctx ends.
	write := func(do func(ctx context.Context) error) bool {
		for ctx.Err() == nil {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := do(wctx)
			cancel()
			if err == nil {
				return true
			}
			if ctx.Err() != nil {
				return false
			}
			c.mu.Lock()
			c.stats.failedWrites++
			c.failures = append(c.failures, time.Now().Format("15:04:05.000")+" "+err.Error())
			c.mu.Unlock()
			time.Sleep(churnPause)
		}
		return false
	}
	remove := func(name string) bool {
		if !write(func(ctx context.Context) error {
			err := api.Delete(ctx, name, metav1.DeleteOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
		}) {
			return false
		}
		c.mu.Lock()
		c.stats.deleted++
		c.mu.Unlock()
		return true
	}
	subnets := []string{"blue", "red"}
	for n := 1; ctx.Err() == nil; n++ {
		name := fmt.Sprintf("%s%d-%d", churnPrefix, worker+1, n)
		att := &networkv1alpha1.NetworkAttachment{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       networkv1alpha1.NetworkAttachmentSpec{Node: w.node, Subnet: subnets[n%2]},
		}
		created := time.Now()
		if !write(func(ctx context.Context) error {
			_, err := api.Create(ctx, att, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				// An earlier try that timed out made it.
				return nil
			}
			return err
		}) {
			return
		}
		c.mu.Lock()
		c.stats.created++
		c.mu.Unlock()
		live = append(live, name)
		if n%churnFlash == 0 {
			if !remove(name) {
				return
			}
			live = live[:len(live)-1]
			c.mu.Lock()
			c.stats.flashed++
			c.mu.Unlock()
			continue
		}
		c.mu.Lock()
		w.pending = name
		c.mu.Unlock()
		for c.watch.ready(standardNamespace, name) != nil {
			select {
			case <-ctx.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
		c.mu.Lock()
		w.pending = ""
		w.lastReady = created
		c.readied = append(c.readied, churnReady{created: created, took: time.Since(created)})
		c.mu.Unlock()
		for len(live) > churnLive {
			if !remove(live[0]) {
				return
			}
			live = live[1:]
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(churnPause):
		}
	}
}

// awaitProgress waits until every worker has had an attachment created
// after since become ready: new attachments work on every node again.
func (c *churn) awaitProgress(t *testing.T, since time.Time, timeout time.Duration) {
	t.Helper()
	poll.Until(t, timeout, "a new attachment ready on every node", func(context.Context) error {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, w := range c.workers {
			if !w.lastReady.After(since) {
				err := fmt.Errorf("no attachment of node %s created since the kill is ready", w.node)
				if w.pending != "" {
					err = fmt.Errorf("%w: %w", err, c.watch.ready(standardNamespace, w.pending))
				}
				return err
			}
		}
		return nil
	})
}

// failedWrites returns how many of the churn's writes have failed so far.
func (c *churn) failedWrites() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats.failedWrites
}

// failuresFrom returns the failed writes from the n-th on (failedWrites
// before), each with its time.
func (c *churn) failuresFrom(n int) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.failures[min(n, len(c.failures)):])
}

// slowestSince returns the longest time an attachment created after since
// took to be ready.
func (c *churn) slowestSince(since time.Time) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	var slowest time.Duration
	for _, r := range c.readied {
		if r.created.After(since) {
			slowest = max(slowest, r.took)
		}
	}
	return slowest
}

// checkAftermath checks, when says with what, that no two attachments of a
// VNI share an address, that every attachment is ready, that every IPLock
// belongs to the attachment that holds its address and every address has
// its lock, and that every node's switch holds exactly the ports and flows
// of the attachments there are. The last two may take a moment to settle
// after the churn; not settling within a minute is a failure.
func (s *standard) checkAftermath(t *testing.T, when string) {
	if err := s.duplicateAddresses(t); err != nil {
		t.Fatal(err)
	}
	figures.Count(t, "chaos-duplicate-addresses", 0, "addresses")
	poll.Until(t, 2*time.Minute, "every attachment ready "+when, func(ctx context.Context) error {
		list, err := s.network.NetworkV1alpha1().NetworkAttachments("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		var errs []error
		for _, a := range list.Items {
			errs = append(errs, attachmentUsable(&a))
		}
		return errors.Join(errs...)
	})
	poll.Until(t, time.Minute, "no leaked or missing IPLock "+when, s.lockProblems)
	figures.Count(t, "chaos-leaked-iplocks", 0, "locks")
	poll.Until(t, time.Minute, "no stale or missing port or flow on any node "+when, func(ctx context.Context) error {
		list, err := s.network.NetworkV1alpha1().NetworkAttachments("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		var errs []error
		for _, n := range s.env.Nodes {
			errs = append(errs, fabricProblems(ctx, n, list.Items))
		}
		return errors.Join(errs...)
	})
	figures.Count(t, "chaos-stale-flows-or-ports", 0, "flows")
	if err := s.duplicateAddresses(t); err != nil {
		t.Fatal(err)
	}
}

// duplicateAddresses returns an error naming every address that two
// attachments of one VNI hold, nil when there is none.
func (s *standard) duplicateAddresses(t *testing.T) error {
	holders := map[string][]string{}
	for _, a := range s.allAttachments(t) {
		if a.Status.IPv4 != "" {
			addr := fmt.Sprintf("%d/%s", a.Status.AddressVNI, a.Status.IPv4)
			holders[addr] = append(holders[addr], a.Namespace+"/"+a.Name)
		}
	}
	var dups []string
	for addr, names := range holders {
		if len(names) > 1 {
			dups = append(dups, fmt.Sprintf("%s held by %v", addr, names))
		}
	}
	if len(dups) > 0 {
		slices.Sort(dups)
		return fmt.Errorf("%d duplicate addresses: %s", len(dups), strings.Join(dups, "; "))
	}
	return nil
}

// allAttachments lists the attachments of every namespace. Right after a
// kill the main kube-apiserver may answer 503 for a moment while its
// aggregator catches up with the restarted replica (see apiSteady); a list
// that fails is tried again for up to a minute, each failure logged.
func (s *standard) allAttachments(t *testing.T) []networkv1alpha1.NetworkAttachment {
	t.Helper()
	var list *networkv1alpha1.NetworkAttachmentList
	poll.Until(t, time.Minute, "the attachments listed", func(ctx context.Context) error {
		l, err := s.network.NetworkV1alpha1().NetworkAttachments("").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Logf("listing the attachments: %v", err)
			return err
		}
		list = l
		return nil
	})
	return list.Items
}

// lockProblems returns nil when every IPLock is held by the attachment
// that its controller owner reference names, and whose address (VNI and
// IPv4) its name encodes, and every attachment with an address has its
// lock; else an error naming every leaked and missing lock.
func (s *standard) lockProblems(ctx context.Context) error {
	atts, err := s.network.NetworkV1alpha1().NetworkAttachments("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	locks, err := s.network.NetworkV1alpha1().IPLocks("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	byUID := map[string]*networkv1alpha1.NetworkAttachment{}
	for i, a := range atts.Items {
		byUID[string(a.UID)] = &atts.Items[i]
	}
	var problems []string
	locked := map[string]bool{}
	for _, l := range locks.Items {
		owner := metav1.GetControllerOf(&l)
		var att *networkv1alpha1.NetworkAttachment
		if owner != nil {
			att = byUID[string(owner.UID)]
		}
		vni, ip, err := ipam.ParseLockName(l.Name)
		switch {
		case err != nil:
			problems = append(problems, fmt.Sprintf("IPLock %s/%s: %v", l.Namespace, l.Name, err))
		case att == nil || att.Namespace != l.Namespace || att.Name != owner.Name:
			problems = append(problems, fmt.Sprintf("IPLock %s/%s leaked: its owner %v does not exist", l.Namespace, l.Name, owner))
		case att.Status.AddressVNI != vni || att.Status.IPv4 != ip.String() || att.Status.LockUID != string(l.UID):
			problems = append(problems, fmt.Sprintf("IPLock %s/%s leaked: its owner %s holds %d/%s with lock %s", l.Namespace, l.Name, att.Name, att.Status.AddressVNI, att.Status.IPv4, att.Status.LockUID))
		default:
			locked[string(att.UID)] = true
		}
	}
	for _, a := range atts.Items {
		if a.Status.IPv4 != "" && !locked[string(a.UID)] {
			problems = append(problems, fmt.Sprintf("attachment %s/%s holds %d/%s without its IPLock", a.Namespace, a.Name, a.Status.AddressVNI, a.Status.IPv4))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%d IPLock problems: %s", len(problems), strings.Join(problems, "; "))
	}
	return nil
}

// fabricProblems returns nil when node's switch holds exactly what the
// attachments call for: a whole local attachment (interface and flows) for
// each of the node's attachments with an address, the flows of a whole
// remote attachment towards its node for each attachment of another node
// in a network that has one of the node's, and nothing else: no other port
// on the bridge and no other flow. Otherwise its error lists what is stale
// and what is missing.
func fabricProblems(ctx context.Context, node *cluster.Node, atts []networkv1alpha1.NetworkAttachment) error {
	type network struct {
		namespace string
		vni       uint32
	}
	relevant := map[network]bool{}
	wantPorts := []string{ovs.TunnelPort}
	var wantLocal, wantRemote []string
	for _, a := range atts {
		ip, err := netip.ParseAddr(a.Status.IPv4)
		if err != nil || a.Spec.Node != node.Name {
			continue
		}
		relevant[network{a.Namespace, a.Status.AddressVNI}] = true
		l := fabric.LocalAttachment{VNI: a.Status.AddressVNI, IP: ip}
		wantLocal = append(wantLocal, l.String())
		wantPorts = append(wantPorts, l.InterfaceName())
	}
	for _, a := range atts {
		ip, err := netip.ParseAddr(a.Status.IPv4)
		host, herr := netip.ParseAddr(a.Status.HostIP)
		if err != nil || herr != nil || a.Spec.Node == node.Name || !relevant[network{a.Namespace, a.Status.AddressVNI}] {
			continue
		}
		wantRemote = append(wantRemote, fabric.RemoteAttachment{VNI: a.Status.AddressVNI, IP: ip, HostIP: host}.String())
	}
	runDir := node.HostPath(agentOVSRunDir)
	inv, err := ovs.New(ovs.Config{RunDir: runDir, Timeout: 20 * time.Second}).List(ctx)
	if err != nil {
		return fmt.Errorf("node %s: %w", node.Name, err)
	}
	var problems []string
	compare := func(what string, got, want []string) {
		slices.Sort(got)
		slices.Sort(want)
		for _, g := range got {
			if !slices.Contains(want, g) {
				problems = append(problems, "stale "+what+" "+g)
			}
		}
		for _, w := range want {
			if !slices.Contains(got, w) {
				problems = append(problems, "missing "+what+" "+w)
			}
		}
	}
	compare("local attachment", stringsOf(inv.Local), wantLocal)
	compare("remote attachment", stringsOf(inv.Remote), wantRemote)
	compare("partial local attachment", stringsOf(inv.PartialLocal), nil)
	compare("partial remote attachment", stringsOf(inv.PartialRemote), nil)

	// What the inventory does not see: ports and flows that name no
	// attachment.
	env := append(os.Environ(), "OVS_RUNDIR="+runDir)
	out, err := runEnv(ctx, env, "ovs-vsctl", "--timeout=20", "list-ports", ovs.DefaultBridge)
	if err != nil {
		return fmt.Errorf("node %s: %w", node.Name, err)
	}
	compare("port", strings.Fields(out), wantPorts)
	out, err = runEnv(ctx, env, "ovs-ofctl", "-O", "OpenFlow14", "dump-flows", ovs.DefaultBridge)
	if err != nil {
		return fmt.Errorf("node %s: %w", node.Name, err)
	}
	flows := 0
	for line := range strings.SplitSeq(out, "\n") {
		if !strings.Contains(line, "cookie=") {
			continue
		}
		flows++
		if !strings.Contains(line, "cookie=0x6b") {
			problems = append(problems, "flow of no KOS attachment: "+strings.TrimSpace(line))
		}
	}
	// The default flows, then four per local and three per remote
	// attachment (components/fabric/ovs/flows.go).
	if want := 4 + 4*len(wantLocal) + 3*len(wantRemote); flows != want {
		problems = append(problems, fmt.Sprintf("%d flows, want %d", flows, want))
	}
	if len(problems) > 0 {
		return fmt.Errorf("node %s: %s", node.Name, strings.Join(problems, "; "))
	}
	return nil
}

func stringsOf[S fmt.Stringer](list []S) []string {
	out := make([]string, 0, len(list))
	for _, x := range list {
		out = append(out, x.String())
	}
	return out
}

// runEnv runs name with args and environment env and returns its standard
// output; the error holds its standard error.
func runEnv(ctx context.Context, env []string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, stderr.String())
	}
	return string(out), nil
}
