package e2e

// This file holds TestIntegrationStandardRelease's node steps: a node
// stopped (the API stays available, its attachments turn Ready=Unknown) and
// started again (its agent back, its guests pinging).

import (
	"context"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	networkv1alpha1 "github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/tools/figures"
	"github.com/kos-sdn/kos/tools/kosinstall"
	"github.com/kos-sdn/kos/tools/poll"
)

// testNodeStops stops the last node entirely: the KOS API stays available
// (etcd keeps its quorum with two members), a new attachment still gets an
// address and an interface, and the guests of the other two nodes keep
// pinging each other.
func (s *standard) testNodeStops(t *testing.T) {
	ctx := t.Context()
	s.stopped = s.env.Nodes[len(s.env.Nodes)-1]
	began := time.Now()
	if err := s.env.StopNode(ctx, s.stopped.Name); err != nil {
		t.Fatalf("stopping node %s: %v", s.stopped.Name, err)
	}
	stopped := time.Now()
	figures.Duration(t, "node-stop", stopped.Sub(began))
	// A write through the KOS API, and the controllers act on it. A
	// request in flight to the stopped etcd member fails (its connection
	// times out), so the write is tried until it passes, as a client
	// would; how long that takes is the API's gap.
	began = time.Now()
	const late = "blue-late"
	failures := 0
	poll.Until(t, time.Minute, "a write through the KOS API", func(ctx context.Context) error {
		att := &networkv1alpha1.NetworkAttachment{
			ObjectMeta: metav1.ObjectMeta{Name: late},
			Spec:       networkv1alpha1.NetworkAttachmentSpec{Node: s.env.Nodes[0].Name, Subnet: "blue"},
		}
		_, err := s.network.NetworkV1alpha1().NetworkAttachments(standardNamespace).Create(ctx, att, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			failures++
			t.Logf("creating attachment %s with node %s down: %v", late, s.stopped.Name, err)
			return err
		}
		return nil
	})
	figures.Duration(t, "first-write-with-a-node-down", time.Since(began))
	t.Logf("%d writes failed before one passed", failures)
	s.plumb(t, late)
	figures.Duration(t, "attachment-with-a-node-down", time.Since(began))
	reads := 0
	poll.Until(t, 2*time.Minute, "ten reads of the KOS API in a row to succeed", func(ctx context.Context) error {
		if _, err := s.network.NetworkV1alpha1().Subnets(standardNamespace).List(ctx, metav1.ListOptions{}); err != nil {
			reads = 0
			return err
		}
		if reads++; reads < 10 {
			return fmt.Errorf("%d reads in a row so far", reads)
		}
		return nil
	})
	var alive []*kosinstall.Guest
	for _, g := range s.guestsOf("blue") {
		if g.Attachment.Spec.Node != s.stopped.Name {
			alive = append(alive, g)
		}
	}
	alive = append(alive, s.guests[late])
	checkPings(t, alive, 10, 1, 30*time.Second)
	// Its agent renews its heartbeat no more: its attachments are no
	// longer known to be Ready (issue 36's stale Ready), the others are.
	s.awaitReadiness(t, s.stopped.Name, metav1.ConditionUnknown, stopped, 3*time.Minute, "stale-ready-unknown-after-node-stop")
}

// testNodeComesBack starts the stopped node again: it becomes Ready, its
// agent and etcd member catch up, and its guests, given their interfaces
// again, ping the others.
func (s *standard) testNodeComesBack(t *testing.T) {
	ctx := t.Context()
	began := time.Now()
	back := s.stopped
	if err := s.env.StartNode(ctx, back.Name); err != nil {
		t.Fatalf("starting node %s: %v", back.Name, err)
	}
	s.stopped = nil
	figures.Duration(t, "node-start", time.Since(began))
	// Until the node's kubelet reports on its pods, they keep the status
	// of before the stop, Ready; the node's interfaces are the ones its
	// agent keeps only once the agent's first reconcile is done.
	s.waitAgentBack(t, back.Name, began, 4*time.Minute)
	s.waitKOSReady(t, 4*time.Minute)
	figures.Duration(t, "node-back-to-kos-ready", time.Since(began))
	// Once every KOS pod is Ready, every request is answered: half a
	// minute of lists in a row, none failed. Lists routed to the node's
	// kos-apiserver replica used to be reset, refused or hang here while
	// a pod left over from before the stop answered for its address
	// (cluster.StartNode now starts the node's network as a reboot does).
	failed := s.apiSteady(t, 6*time.Minute, 300)
	figures.Duration(t, "node-back-to-api-steady", time.Since(began))
	figures.Count(t, "node-back-api-errors-after-ready", failed, "requests")
	if failed > 0 {
		t.Errorf("%d lists through the main kube-apiserver failed after every KOS pod was Ready again, want 0: each is logged above with what the server said and, every 2 s, which replica the API was routed to", failed)
	}
	s.awaitReadiness(t, back.Name, metav1.ConditionTrue, began, time.Minute, "stale-ready-back-after-node-start")
	for name, g := range s.guests {
		if g.Attachment.Spec.Node == back.Name {
			s.plumb(t, name)
		}
	}
	figures.Duration(t, "node-back-to-guests-replumbed", time.Since(began))
	checkPings(t, s.guestsOf("blue"), 5, 1, time.Minute)
	checkPings(t, s.guestsOf("red"), 5, 1, time.Minute)
	figures.Duration(t, "node-back-to-pinging", time.Since(began))
}

// waitAgentBack waits until the agent pod of node runs again after the node
// started (at since): every container started since then and Ready. The
// agent is Ready once its first reconcile of the node's switch is done.
func (s *standard) waitAgentBack(t *testing.T, node string, since time.Time, timeout time.Duration) {
	t.Helper()
	// Start times have a resolution of a second.
	since = since.Truncate(time.Second)
	poll.Until(t, timeout, "the agent on node "+node+" to run again and be Ready", func(ctx context.Context) error {
		pods, err := s.kube.CoreV1().Pods(kosinstall.AgentNamespace).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
		if err != nil {
			return err
		}
		if len(pods.Items) == 0 {
			return fmt.Errorf("no agent pod on node %s", node)
		}
		for _, p := range pods.Items {
			if len(p.Status.ContainerStatuses) == 0 {
				return fmt.Errorf("pod %s: no container status yet", p.Name)
			}
			for _, c := range p.Status.ContainerStatuses {
				running := c.State.Running
				switch {
				case running == nil:
					return fmt.Errorf("pod %s: container %s not running", p.Name, c.Name)
				case running.StartedAt.Time.Before(since):
					return fmt.Errorf("pod %s: container %s runs since %s, before the node started", p.Name, c.Name, running.StartedAt.Format(time.RFC3339))
				case !c.Ready:
					return fmt.Errorf("pod %s: container %s not Ready", p.Name, c.Name)
				}
			}
		}
		return nil
	})
}
