package agent

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
)

// Defaults of Heartbeat: the agent renews its Lease every 10 s and the
// Lease says it holds 40 s, so three renewals may fail before the
// attachment liveness controller judges the node.
const (
	DefaultHeartbeatInterval = 10 * time.Second
	DefaultHeartbeatDuration = 40 * time.Second
	// DefaultHeartbeatNamespace holds the Leases when the agent does not
	// run in a pod (whose namespace it uses otherwise).
	DefaultHeartbeatNamespace = "kos-node"
)

// serviceAccountNamespaceFile holds the namespace of the agent's pod.
const serviceAccountNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// HeartbeatNamespace returns the namespace of the agents' Leases: the
// agent's own, as its pod's service account says, or
// DefaultHeartbeatNamespace. The DaemonSet's namespace is there in 0.3.0's
// manifests already, and holds only the agents.
func HeartbeatNamespace() string {
	if b, err := os.ReadFile(serviceAccountNamespaceFile); err == nil {
		if ns := strings.TrimSpace(string(b)); ns != "" {
			return ns
		}
	}
	return DefaultHeartbeatNamespace
}

// Heartbeat renews a coordination.k8s.io Lease named after the agent's node
// while the agent is healthy, so that the attachment liveness controller
// can tell a dead agent's attachments. It needs the rights to get, create
// and update Leases in Namespace; without them (0.3.0's manifests) it logs
// that once and keeps trying quietly: the controller judges only nodes
// whose Lease it has seen, so an agent that never heartbeats is never
// taken for dead. The agent does not delete its Lease when it stops: a
// stopped agent and a dead one look the same to the controller.
type Heartbeat struct {
	// Client reaches the Leases of the main cluster.
	Client coordinationclient.LeasesGetter
	// Namespace and Node name the Lease.
	Namespace, Node string
	// Interval is how often the Lease is renewed; DefaultHeartbeatInterval
	// when zero. Duration is the leaseDurationSeconds it states;
	// DefaultHeartbeatDuration when zero.
	Interval, Duration time.Duration
	// Healthy, when set, must return nil for a renewal: an agent that has
	// not reconciled the fabric yet, or whose fabric checks fail, does
	// not vouch for its attachments.
	Healthy func() error
	// Clock stamps the renewals; the real clock when nil.
	Clock clock.PassiveClock

	// lease is the Lease as last written, to update without a read.
	lease *coordinationv1.Lease
	// failing is how the last beat went (beatRenewed, ...), so that each
	// trouble is logged once.
	failing string
}

// startHeartbeat runs the Heartbeat of s's agent, in the agent's namespace
// of the main cluster, until ctx ends or the returned stop is called; stop
// returns once it has stopped.
func (s *Server) startHeartbeat(ctx context.Context) (stop func()) {
	hb := &Heartbeat{Client: s.kube.CoordinationV1(), Namespace: HeartbeatNamespace(), Node: s.agent.node, Healthy: s.agent.Healthy}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		hb.Run(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}

// Run renews the Lease every Interval until ctx ends, and returns then.
// While the Lease is forbidden to it, it asks only every
// heartbeatForbiddenRetry, so that the agents of a cluster whose manifests
// give them no rights do not load its API server.
func (h *Heartbeat) Run(ctx context.Context) {
	if h.Clock == nil {
		h.Clock = clock.RealClock{}
	}
	interval := h.Interval
	if interval <= 0 {
		interval = DefaultHeartbeatInterval
	}
	logger := klog.FromContext(ctx).WithValues("lease", klog.KRef(h.Namespace, h.Node))
	ctx = klog.NewContext(ctx, logger)
	logger.Info("Heartbeating", "interval", interval, "duration", h.duration())
	for {
		next := interval
		if h.beat(ctx) == beatForbidden {
			next = heartbeatForbiddenRetry
		}
		t := time.NewTimer(wait.Jitter(next, 0.04))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// heartbeatForbiddenRetry is how often the heartbeat asks again for a
// Lease it may not write.
const heartbeatForbiddenRetry = 5 * time.Minute

func (h *Heartbeat) duration() time.Duration {
	if h.Duration <= 0 {
		return DefaultHeartbeatDuration
	}
	return h.Duration
}

// The outcomes of a beat.
const (
	beatRenewed   = ""
	beatUnhealthy = "unhealthy"
	beatForbidden = "forbidden"
	beatFailed    = "failed"
)

// beat renews the Lease once, when the agent is healthy, and returns how
// it went. It logs an outcome only when it differs from the last one: a
// heartbeat that keeps failing the same way says so once.
func (h *Heartbeat) beat(ctx context.Context) string {
	logger := klog.FromContext(ctx)
	outcome, err := beatRenewed, error(nil)
	if h.Healthy != nil {
		if err = h.Healthy(); err != nil {
			outcome = beatUnhealthy
		}
	}
	if outcome == beatRenewed {
		if err = h.renew(ctx); apierrors.IsForbidden(err) {
			outcome = beatForbidden
		} else if err != nil {
			outcome = beatFailed
		}
	}
	if outcome != h.failing {
		switch outcome {
		case beatRenewed:
			logger.Info("Heartbeating again")
		case beatUnhealthy:
			// As every agent is until its first reconcile.
			logger.V(2).Info("Not renewing the Lease while the agent is unhealthy", "reason", err.Error())
		case beatForbidden:
			logger.Info("Not heartbeating: the agent may not write its Lease; the manifests need get, create and update on leases in its namespace. Its node's attachments are not judged by its liveness", "err", err.Error(), "retry", heartbeatForbiddenRetry)
		default:
			logger.Info("Heartbeat failed; trying again quietly", "err", err.Error())
		}
	}
	h.failing = outcome
	return outcome
}

// renew creates or updates the Lease with the time now.
func (h *Heartbeat) renew(ctx context.Context) error {
	now := metav1.NewMicroTime(h.Clock.Now())
	leases := h.Client.Leases(h.Namespace)
	if h.lease == nil {
		l, err := leases.Get(ctx, h.Node, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			l, err = leases.Create(ctx, &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Namespace: h.Namespace, Name: h.Node},
				Spec: coordinationv1.LeaseSpec{
					HolderIdentity:       ptr.To(h.Node),
					LeaseDurationSeconds: ptr.To(int32(h.duration() / time.Second)),
					AcquireTime:          &now,
					RenewTime:            &now,
				},
			}, metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("creating the lease: %w", err)
			}
			h.lease = l
			return nil
		case err != nil:
			return fmt.Errorf("reading the lease: %w", err)
		}
		h.lease = l
	}
	l := h.lease.DeepCopy()
	l.Spec.HolderIdentity = ptr.To(h.Node)
	l.Spec.LeaseDurationSeconds = ptr.To(int32(h.duration() / time.Second))
	l.Spec.RenewTime = &now
	updated, err := leases.Update(ctx, l, metav1.UpdateOptions{})
	if err != nil {
		// Read it afresh next time: a conflict or a deletion made the copy stale.
		h.lease = nil
		return fmt.Errorf("renewing the lease: %w", err)
	}
	h.lease = updated
	return nil
}
