// Package attachmentliveness provides the controller that marks the
// attachments of a node whose agent stopped heartbeating: each agent renews
// a coordination.k8s.io Lease named after its node in one namespace of the
// main cluster, and once a node's Lease has gone unrenewed for its duration
// and a grace, the controller sets Ready=Unknown (reason
// AgentNotHeartbeating) on that node's Ready attachments; once the Lease is
// renewed again, it asks the server to derive Ready afresh. It judges only
// nodes that have a Lease: an agent that never heartbeats (0.3.0, or one
// without the rights to) is never taken for dead.
//
// Like Kubernetes' node lifecycle controller it times a Lease by its own
// clock, from when it saw the Lease's renewTime change, not by the agent's
// clock, so skew between the nodes does not mark a live agent dead. The cost
// is that a Lease already stale when the controller starts (or a new leader
// takes over) is judged one duration and grace later; the marks it finds
// then stay until it sees their Lease renewed, or deleted.
package attachmentliveness

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	coordinationinformers "k8s.io/client-go/informers/coordination/v1"
	coordinationlisters "k8s.io/client-go/listers/coordination/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/controllers/keyqueue"
	"github.com/kos-sdn/kos/components/generated/clientset/versioned"
	informers "github.com/kos-sdn/kos/components/generated/informers/externalversions/network/v1alpha1"
)

// QueueName names the controller's work queue in metrics.
const QueueName = "kos_attachment_liveness"

// DefaultGrace is how long past a Lease's duration the controller waits
// before it marks the node's attachments: one renewal interval of the agent
// that was slow to reach the API server must not mark them.
const DefaultGrace = 5 * time.Second

// DefaultLeaseDuration is the duration of a Lease that states none.
const DefaultLeaseDuration = 40 * time.Second

// attachmentsByNodeIndex indexes attachments by spec.node.
const attachmentsByNodeIndex = "attachmentliveness.node"

// Gauge is a value that goes up and down, such as a Prometheus gauge.
type Gauge interface {
	Set(float64)
}

// Options tune a Controller. The zero value is usable.
type Options struct {
	// SilentNodes, when set, is kept at the number of nodes whose agent
	// the controller judges silent (their Lease stale).
	SilentNodes Gauge
	// Grace is added to each Lease's duration; DefaultGrace when zero.
	Grace time.Duration
	// Clock tells the time; the real clock when nil.
	Clock clock.Clock
}

// Controller marks the attachments of nodes whose agents stopped
// heartbeating. Its queue holds node names.
type Controller struct {
	client      versioned.Interface
	leases      coordinationlisters.LeaseNamespaceLister
	attachments cache.Indexer
	synced      []cache.InformerSynced
	queue       *keyqueue.Queue
	clock       clock.Clock
	grace       time.Duration

	// mu guards seen, which holds, by node, the last renewTime seen on its
	// Lease and when this controller first saw it, and silent, the nodes
	// judged silent, which silentNodes counts.
	mu          sync.Mutex
	seen        map[string]heartbeat
	silent      map[string]bool
	silentNodes Gauge

	// ignored warns once that the server does not keep the Unknown
	// condition (a kos-apiserver older than this controller).
	ignored sync.Once
}

// heartbeat is a renewal of a node's Lease as this controller saw it:
// renewTime is the Lease's, seenAt this controller's time when it first
// saw it, and renewalSeen whether it saw the renewTime change to it (not
// so for the renewTime of a Lease it had not seen before).
type heartbeat struct {
	renewTime   time.Time
	seenAt      time.Time
	renewalSeen bool
}

// NewController returns a controller that reads the agents' Leases from
// leases, an informer of the namespace that holds them, and writes the
// status of the attachments that attachments informs about through client.
// It registers its event handlers and an index at once; the caller starts
// the informers.
func NewController(client versioned.Interface, leases coordinationinformers.LeaseInformer, namespace string, attachments informers.NetworkAttachmentInformer, opts Options) (*Controller, error) {
	c := &Controller{
		client:      client,
		leases:      leases.Lister().Leases(namespace),
		attachments: attachments.Informer().GetIndexer(),
		synced:      []cache.InformerSynced{leases.Informer().HasSynced, attachments.Informer().HasSynced},
		queue:       keyqueue.New(QueueName),
		clock:       opts.Clock,
		grace:       opts.Grace,
		seen:        map[string]heartbeat{},
		silent:      map[string]bool{},
		silentNodes: opts.SilentNodes,
	}
	if c.clock == nil {
		c.clock = clock.RealClock{}
	}
	if c.grace == 0 {
		c.grace = DefaultGrace
	}
	if err := attachments.Informer().AddIndexers(cache.Indexers{attachmentsByNodeIndex: attachmentNode}); err != nil {
		return nil, fmt.Errorf("adding the attachment index: %w", err)
	}
	if _, err := leases.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueLease,
		UpdateFunc: func(_, obj any) { c.enqueueLease(obj) },
		DeleteFunc: c.enqueueLease,
	}); err != nil {
		return nil, fmt.Errorf("adding the lease event handler: %w", err)
	}
	if _, err := attachments.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueAttachment,
		UpdateFunc: func(_, obj any) { c.enqueueAttachment(obj) },
		// A deleted attachment needs no mark.
	}); err != nil {
		return nil, fmt.Errorf("adding the attachment event handler: %w", err)
	}
	return c, nil
}

func attachmentNode(obj any) ([]string, error) {
	att, ok := obj.(*v1alpha1.NetworkAttachment)
	if !ok || att.Spec.Node == "" {
		return nil, nil
	}
	return []string{att.Spec.Node}, nil
}

// enqueueLease adds the node of a Lease, or of a deleted one's tombstone:
// the Lease is named after its node.
func (c *Controller) enqueueLease(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	lease, ok := obj.(*coordinationv1.Lease)
	if !ok {
		utilruntime.HandleError(fmt.Errorf("unexpected object %T in the lease informer", obj))
		return
	}
	c.queue.Add(lease.Name)
}

// enqueueAttachment adds the node of an attachment.
func (c *Controller) enqueueAttachment(obj any) {
	att, ok := obj.(*v1alpha1.NetworkAttachment)
	if !ok {
		utilruntime.HandleError(fmt.Errorf("unexpected object %T in the attachment informer", obj))
		return
	}
	if att.Spec.Node != "" {
		c.queue.Add(att.Spec.Node)
	}
}

// Run waits for the informers' caches, then runs workers goroutines that
// judge nodes until ctx ends. It returns once they all stopped.
func (c *Controller) Run(ctx context.Context, workers int) error {
	logger := klog.FromContext(ctx)
	logger.Info("Starting the attachment liveness controller", "workers", workers, "grace", c.grace)
	if err := c.queue.Run(ctx, workers, c.sync, c.synced...); err != nil {
		return err
	}
	logger.Info("Stopped the attachment liveness controller")
	return nil
}
