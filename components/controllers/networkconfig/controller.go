// Package networkconfig provides the controller that keeps the cluster's
// NetworkConfig, named "cluster": it creates it on first start with every
// default filled in explicitly, records in status the configuration
// applied, which node agents use, and reports the nodes whose underlay
// cannot carry the overlay MTU.
//
// Nodes report their underlay MTU in the annotation
// network.example.com/underlay-mtu of their Node object in the main
// cluster, which their agent writes. The overlay MTU is computed from those
// reports once, when the controller fills spec.overlayMTU in; it is never
// recomputed afterwards, whatever the nodes report later.
package networkconfig

import (
	"context"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
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
const QueueName = "kos_network_config"

// attachmentsByMTUIndex indexes NetworkAttachments by status.mtu, in
// decimal; attachments without one are not indexed.
const attachmentsByMTUIndex = "networkconfig-mtu"

// Metrics receives what the controller observes: the status it keeps and
// the underlay MTU of every reporting node, by node name.
type Metrics interface {
	Observe(status *v1alpha1.NetworkConfigStatus, underlays map[string]int32)
}

// Options tune a Controller. The zero value is usable.
type Options struct {
	// Metrics, when set, receives the status and the nodes' underlay MTUs
	// after every sync.
	Metrics Metrics
}

// Controller keeps the cluster's NetworkConfig.
type Controller struct {
	client  versioned.Interface
	configs listers.NetworkConfigLister
	nodes   corelisters.NodeLister
	// attachments indexes the NetworkAttachments by status.mtu.
	attachments cache.Indexer
	synced      []cache.InformerSynced
	queue       *keyqueue.Queue
	recorder    record.EventRecorder
	metrics     Metrics
}

// NewController returns a controller that keeps the NetworkConfig configs
// informs about, through client, from the underlay MTUs of the Nodes nodes
// informs about, and counts the attachments attachments informs about
// whose interface has another MTU. It registers its event handlers and an
// index at once and trims the Nodes the node informer keeps to their name
// and underlay annotation, so the node informer must be its alone; the
// attachment informer may be shared. The caller starts the informers.
func NewController(client versioned.Interface, configs informers.NetworkConfigInformer, nodes coreinformers.NodeInformer,
	attachments informers.NetworkAttachmentInformer, recorder record.EventRecorder, opts Options) (*Controller, error) {
	c := &Controller{
		client:      client,
		configs:     configs.Lister(),
		nodes:       nodes.Lister(),
		attachments: attachments.Informer().GetIndexer(),
		synced:      []cache.InformerSynced{configs.Informer().HasSynced, nodes.Informer().HasSynced, attachments.Informer().HasSynced},
		queue:       keyqueue.New(QueueName),
		recorder:    recorder,
		metrics:     opts.Metrics,
	}
	if err := nodes.Informer().SetTransform(TrimNode); err != nil {
		return nil, fmt.Errorf("trimming the nodes of the node informer: %w", err)
	}
	enqueue := func(any) { c.queue.Add(v1alpha1.NetworkConfigName) }
	_, err := configs.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	})
	if err != nil {
		return nil, fmt.Errorf("adding the networkconfig event handler: %w", err)
	}
	_, err = nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue,
		UpdateFunc: func(old, obj any) {
			if underlayAnnotation(old) != underlayAnnotation(obj) {
				enqueue(obj)
			}
		},
		DeleteFunc: enqueue,
	})
	if err != nil {
		return nil, fmt.Errorf("adding the node event handler: %w", err)
	}
	if err := attachments.Informer().AddIndexers(cache.Indexers{attachmentsByMTUIndex: attachmentMTU}); err != nil {
		return nil, fmt.Errorf("indexing the attachments by MTU: %w", err)
	}
	_, err = attachments.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if mtuOf(obj) != 0 {
				enqueue(obj)
			}
		},
		UpdateFunc: func(old, obj any) {
			if mtuOf(old) != mtuOf(obj) {
				enqueue(obj)
			}
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if mtuOf(obj) != 0 {
				enqueue(obj)
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("adding the attachment event handler: %w", err)
	}
	return c, nil
}

// mtuOf returns the MTU an attachment's status reports, 0 for none.
func mtuOf(obj any) int32 {
	att, ok := obj.(*v1alpha1.NetworkAttachment)
	if !ok {
		return 0
	}
	return att.Status.MTU
}

// attachmentMTU is the index function of attachmentsByMTUIndex.
func attachmentMTU(obj any) ([]string, error) {
	mtu := mtuOf(obj)
	if mtu == 0 {
		return nil, nil
	}
	return []string{strconv.Itoa(int(mtu))}, nil
}

// underlayAnnotation returns the underlay MTU annotation of a Node.
func underlayAnnotation(obj any) string {
	node, ok := obj.(*corev1.Node)
	if !ok {
		return ""
	}
	return node.Annotations[v1alpha1.UnderlayMTUAnnotation]
}

// TrimNode keeps of a Node what the controller reads: its name, UID,
// resource version and underlay MTU annotation. A Node's status (images,
// conditions) is most of its size and changes every few seconds.
func TrimNode(obj any) (any, error) {
	node, ok := obj.(*corev1.Node)
	if !ok {
		// A tombstone, or something else: the handlers cope.
		return obj, nil
	}
	trimmed := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: node.Name, UID: node.UID, ResourceVersion: node.ResourceVersion,
	}}
	if v, ok := node.Annotations[v1alpha1.UnderlayMTUAnnotation]; ok {
		trimmed.Annotations = map[string]string{v1alpha1.UnderlayMTUAnnotation: v}
	}
	return trimmed, nil
}

// Run waits for the informers' caches, then runs workers goroutines that
// keep the NetworkConfig until ctx ends. It returns once they all stopped.
// There is one key, so more than one worker buys nothing.
func (c *Controller) Run(ctx context.Context, workers int) error {
	logger := klog.FromContext(ctx)
	logger.Info("Starting the network configuration controller", "workers", workers)
	// The first sync creates the NetworkConfig when it is missing, even if
	// no informer event ever comes.
	c.queue.Add(v1alpha1.NetworkConfigName)
	if err := c.queue.Run(ctx, workers, c.sync, c.synced...); err != nil {
		return err
	}
	logger.Info("Stopped the network configuration controller")
	return nil
}
