// Package ipam provides the controller that gives NetworkAttachments their
// addresses. An address of a VNI is taken by creating the IPLock named after
// the VNI and the address (v1-<vni>-<a>-<b>-<c>-<d>) in the attachment's
// namespace, owned by the attachment: the server lets only one such create
// succeed, so two copies of this controller running at once never give one
// address to two attachments. An attachment whose spec.ipv4 asks for an
// address gets exactly that one, or none and a status.errors.ipam message
// that says why (outside the subnet, or held by another attachment, which
// it waits for). An address, once written, never changes into another: it
// is kept, or cleared first, and it is cleared only when its lock went to
// another attachment. A change of the subnet (deleted, made again with
// another block or VNI, not validated) never takes a live attachment's
// address: the attachment keeps it until it is deleted, and its
// status.errors.ipam says why the subnet no longer gives it. The controller
// also releases the locks that attachments no longer use, including those of
// deleted attachments, since a garbage collector may not run.
package ipam

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/controllers/keyqueue"
	"github.com/kos-sdn/kos/components/generated/clientset/versioned"
	informers "github.com/kos-sdn/kos/components/generated/informers/externalversions/network/v1alpha1"
	listers "github.com/kos-sdn/kos/components/generated/listers/network/v1alpha1"
)

// QueueName names the controller's work queue in metrics.
const QueueName = "kos_ipam"

// Names of the cache indexes the controller adds to the shared informers.
const (
	// attachmentsBySubnetIndex indexes attachments by <namespace>/<spec.subnet>.
	attachmentsBySubnetIndex = "ipam-subnet"
	// locksByOwnerIndex indexes IP locks by <namespace>/<name of the
	// controlling attachment>.
	locksByOwnerIndex = "ipam-owner"
	// locksByVNIIndex indexes IP locks by the VNI their name encodes.
	locksByVNIIndex = "ipam-vni"
	// locksByAddressIndex indexes IP locks by their name alone, which
	// encodes VNI and address: whether an address is locked, in any
	// namespace, is one lookup.
	locksByAddressIndex = "ipam-address"
	// subnetsByVNIIndex indexes subnets by spec.vni.
	subnetsByVNIIndex = "ipam-vni"
)

// Observer takes samples of a distribution, such as a Prometheus histogram.
type Observer interface {
	Observe(float64)
}

// Options tune a Controller. The zero value is usable.
type Options struct {
	// AddressLatency, when set, receives the seconds from an attachment's
	// creation to the write of its address, both as the server recorded them.
	AddressLatency Observer
	// AddressEvents records a Normal Event (AddressAssigned) on every
	// attachment given an address. Off, only the problems are recorded
	// (Warning NoAddress): the address and its write time are in the
	// attachment itself, and one Event per address adds a write to the main
	// cluster for every two KOS writes.
	AddressEvents bool
}

// Controller assigns addresses to NetworkAttachments.
type Controller struct {
	client      versioned.Interface
	subnets     listers.SubnetLister
	attachments listers.NetworkAttachmentLister
	locks       listers.IPLockLister
	// The indexers are the informers' caches, for lookups by index.
	subnetIndex     cache.Indexer
	attachmentIndex cache.Indexer
	lockIndex       cache.Indexer
	synced          []cache.InformerSynced

	queue    *keyqueue.Queue
	recorder record.EventRecorder
	latency  Observer
	// addressEvents is Options.AddressEvents.
	addressEvents bool
	// intN returns a random number in [0,n); a field so that tests can
	// replay a choice.
	intN func(n uint64) uint64

	inflight *inflightRecords
}

// NewController returns a controller that assigns addresses through client,
// informed by the three informers. It adds its indexes and event handlers at
// once, so it must be called before the informers start.
func NewController(client versioned.Interface, subnets informers.SubnetInformer, attachments informers.NetworkAttachmentInformer, locks informers.IPLockInformer, recorder record.EventRecorder, opts Options) (*Controller, error) {
	c := &Controller{
		client:          client,
		subnets:         subnets.Lister(),
		attachments:     attachments.Lister(),
		locks:           locks.Lister(),
		subnetIndex:     subnets.Informer().GetIndexer(),
		attachmentIndex: attachments.Informer().GetIndexer(),
		lockIndex:       locks.Informer().GetIndexer(),
		synced:          []cache.InformerSynced{subnets.Informer().HasSynced, attachments.Informer().HasSynced, locks.Informer().HasSynced},
		queue:           keyqueue.New(QueueName),
		recorder:        recorder,
		latency:         opts.AddressLatency,
		addressEvents:   opts.AddressEvents,
		intN:            rand.Uint64N,
		inflight:        newInflightRecords(),
	}
	if err := subnets.Informer().AddIndexers(cache.Indexers{subnetsByVNIIndex: subnetVNI}); err != nil {
		return nil, fmt.Errorf("adding the subnet index: %w", err)
	}
	if err := attachments.Informer().AddIndexers(cache.Indexers{attachmentsBySubnetIndex: attachmentSubnet}); err != nil {
		return nil, fmt.Errorf("adding the attachment index: %w", err)
	}
	if err := locks.Informer().AddIndexers(cache.Indexers{locksByOwnerIndex: lockOwner, locksByVNIIndex: lockVNI, locksByAddressIndex: lockAddress}); err != nil {
		return nil, fmt.Errorf("adding the IP lock indexes: %w", err)
	}
	handlers := []struct {
		informer cache.SharedIndexInformer
		handler  cache.ResourceEventHandler
		what     string
	}{
		{subnets.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    c.enqueueSubnetAttachments,
			UpdateFunc: func(_, obj any) { c.enqueueSubnetAttachments(obj) },
			DeleteFunc: c.enqueueSubnetAttachments,
		}, "subnet"},
		{attachments.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    c.enqueueAttachment,
			UpdateFunc: func(_, obj any) { c.enqueueAttachment(obj) },
			DeleteFunc: c.enqueueAttachment,
		}, "attachment"},
		{locks.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    c.enqueueLockOwner,
			UpdateFunc: func(_, obj any) { c.enqueueLockOwner(obj) },
			DeleteFunc: c.lockDeleted,
		}, "IP lock"},
	}
	for _, h := range handlers {
		if _, err := h.informer.AddEventHandler(h.handler); err != nil {
			return nil, fmt.Errorf("adding the %s event handler: %w", h.what, err)
		}
	}
	return c, nil
}

func subnetVNI(obj any) ([]string, error) {
	s, ok := obj.(*v1alpha1.Subnet)
	if !ok {
		return nil, nil
	}
	return []string{strconv.FormatUint(uint64(s.Spec.VNI), 10)}, nil
}

func attachmentSubnet(obj any) ([]string, error) {
	a, ok := obj.(*v1alpha1.NetworkAttachment)
	if !ok {
		return nil, nil
	}
	return []string{a.Namespace + "/" + a.Spec.Subnet}, nil
}

func lockOwner(obj any) ([]string, error) {
	l, ok := obj.(*v1alpha1.IPLock)
	if !ok {
		return nil, nil
	}
	if ref := ownerRef(l); ref != nil {
		return []string{l.Namespace + "/" + ref.Name}, nil
	}
	return nil, nil
}

func lockVNI(obj any) ([]string, error) {
	l, ok := obj.(*v1alpha1.IPLock)
	if !ok {
		return nil, nil
	}
	vni, _, err := ParseLockName(l.Name)
	if err != nil {
		// Not one of ours: it holds no address.
		return nil, nil
	}
	return []string{strconv.FormatUint(uint64(vni), 10)}, nil
}

func lockAddress(obj any) ([]string, error) {
	l, ok := obj.(*v1alpha1.IPLock)
	if !ok {
		return nil, nil
	}
	if _, _, err := ParseLockName(l.Name); err != nil {
		return nil, nil
	}
	return []string{l.Name}, nil
}

// ownerRef returns the controller reference of a lock to its attachment.
func ownerRef(l *v1alpha1.IPLock) *metav1.OwnerReference {
	ref := metav1.GetControllerOfNoCopy(l)
	if ref == nil || ref.Kind != "NetworkAttachment" || ref.APIVersion != v1alpha1.SchemeGroupVersion.String() {
		return nil
	}
	return ref
}

// tombstoneObject unwraps the final state of a deleted object.
func tombstoneObject(obj any) any {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return t.Obj
	}
	return obj
}

func (c *Controller) enqueueAttachment(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	c.queue.Add(key)
}

// enqueueSubnetAttachments adds the attachments that refer to a subnet.
func (c *Controller) enqueueSubnetAttachments(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	atts, err := c.attachmentIndex.ByIndex(attachmentsBySubnetIndex, key)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	for _, a := range atts {
		c.enqueueAttachment(a)
	}
}

// enqueueLockOwner adds the attachment that controls a lock.
func (c *Controller) enqueueLockOwner(obj any) {
	l, ok := tombstoneObject(obj).(*v1alpha1.IPLock)
	if !ok {
		return
	}
	if ref := ownerRef(l); ref != nil {
		c.queue.Add(l.Namespace + "/" + ref.Name)
	}
}

// lockDeleted adds the lock's owner and, since an address just came free,
// the attachments of its VNI that still wait for one.
func (c *Controller) lockDeleted(obj any) {
	c.enqueueLockOwner(obj)
	l, ok := tombstoneObject(obj).(*v1alpha1.IPLock)
	if !ok {
		return
	}
	vni, _, err := ParseLockName(l.Name)
	if err != nil {
		return
	}
	subnets, err := c.subnetIndex.ByIndex(subnetsByVNIIndex, strconv.FormatUint(uint64(vni), 10))
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	for _, s := range subnets {
		s := s.(*v1alpha1.Subnet)
		atts, err := c.attachmentIndex.ByIndex(attachmentsBySubnetIndex, s.Namespace+"/"+s.Name)
		if err != nil {
			utilruntime.HandleError(err)
			continue
		}
		for _, a := range atts {
			if a := a.(*v1alpha1.NetworkAttachment); a.Status.IPv4 == "" {
				c.enqueueAttachment(a)
			}
		}
	}
}

// Run waits for the informers' caches, then runs workers goroutines that
// assign addresses until ctx ends. It returns once they all stopped.
func (c *Controller) Run(ctx context.Context, workers int) error {
	logger := klog.FromContext(ctx)
	logger.Info("Starting the IPAM controller", "workers", workers)
	if err := c.queue.Run(ctx, workers, c.sync, c.synced...); err != nil {
		return err
	}
	logger.Info("Stopped the IPAM controller")
	return nil
}
