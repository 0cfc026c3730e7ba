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
	// failing is what last went wrong, so each trouble is logged once.
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
	wait.JitterUntilWithContext(ctx, func(ctx context.Context) { h.beat(ctx) }, interval, 0.04, true)
}

func (h *Heartbeat) duration() time.Duration {
	if h.Duration <= 0 {
		return DefaultHeartbeatDuration
	}
	return h.Duration
}

// beat renews the Lease once, when the agent is healthy, and logs a
// failure only when it differs from the last one.
func (h *Heartbeat) beat(ctx context.Context) {
	logger := klog.FromContext(ctx)
	var problem string
	if h.Healthy != nil {
		if err := h.Healthy(); err != nil {
			problem = fmt.Sprintf("not renewing the Lease of an unhealthy agent: %v", err)
		}
	}
	if problem == "" {
		if err := h.renew(ctx); err != nil {
			problem = err.Error()
			if apierrors.IsForbidden(err) {
				problem = "no rights to heartbeat (the manifests need get, create and update on leases in this namespace); the node's attachments are not judged by their agent's liveness: " + problem
			}
		}
	}
	switch {
	case problem != "" && problem != h.failing:
		logger.Info("Heartbeat failed; trying again quietly", "problem", problem)
	case problem == "" && h.failing != "":
		logger.Info("Heartbeating again")
	}
	h.failing = problem
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
