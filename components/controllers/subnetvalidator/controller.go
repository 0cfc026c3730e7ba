// Package subnetvalidator provides the controller that validates Subnets: it
// sets status.validated on a subnet that conflicts with no other subnet of its
// VNI (no overlapping CIDR block, no other namespace), and lists the conflicts
// in status.errors otherwise. It stays correct when two copies run at once:
// it checks each subnet against a live list from the server, never its cache.
package subnetvalidator

import (
	"context"
	"fmt"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/kos-sdn/kos/components/controllers/keyqueue"
	"github.com/kos-sdn/kos/components/generated/clientset/versioned"
	informers "github.com/kos-sdn/kos/components/generated/informers/externalversions/network/v1alpha1"
	listers "github.com/kos-sdn/kos/components/generated/listers/network/v1alpha1"
)

// QueueName names the controller's work queue in metrics.
const QueueName = "kos_subnet_validator"

// Observer takes samples of a distribution, such as a Prometheus histogram.
type Observer interface {
	Observe(float64)
}

// Options tune a Controller. The zero value is usable.
type Options struct {
	// ValidationLatency, when set, receives the seconds from a subnet's
	// creation to its validation, both as the server recorded them.
	ValidationLatency Observer
}

// Controller validates Subnets.
type Controller struct {
	client   versioned.Interface
	subnets  listers.SubnetLister
	synced   cache.InformerSynced
	queue    *keyqueue.Queue
	recorder record.EventRecorder
	latency  Observer

	// conflicts remembers which subnets failed validation because of which
	// rivals, so that a rival's deletion re-checks them.
	conflicts *conflictsCache
}

// NewController returns a controller that validates the subnets subnets
// informs about, through client. It registers its event handlers at once;
// the caller starts the informer.
func NewController(client versioned.Interface, subnets informers.SubnetInformer, recorder record.EventRecorder, opts Options) (*Controller, error) {
	c := &Controller{
		client:    client,
		subnets:   subnets.Lister(),
		synced:    subnets.Informer().HasSynced,
		recorder:  recorder,
		latency:   opts.ValidationLatency,
		queue:     keyqueue.New(QueueName),
		conflicts: newConflictsCache(),
	}
	_, err := subnets.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: func(_, obj any) { c.enqueue(obj) },
		DeleteFunc: c.enqueue,
	})
	if err != nil {
		return nil, fmt.Errorf("adding the subnet event handler: %w", err)
	}
	return c, nil
}

// enqueue adds the key of a subnet, or of a deleted one's tombstone.
func (c *Controller) enqueue(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	c.queue.Add(key)
}

// Run waits for the informer's cache, then runs workers goroutines that
// validate subnets until ctx ends. It returns once they all stopped.
func (c *Controller) Run(ctx context.Context, workers int) error {
	logger := klog.FromContext(ctx)
	logger.Info("Starting the subnet validator", "workers", workers)
	if err := c.queue.Run(ctx, workers, c.sync, c.synced); err != nil {
		return err
	}
	logger.Info("Stopped the subnet validator")
	return nil
}
