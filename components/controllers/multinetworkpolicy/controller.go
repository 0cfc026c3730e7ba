// Package multinetworkpolicy provides the MultiNetworkPolicy controller: it
// tells, in Events on each MultiNetworkPolicy, which KOS networks the policy
// governs, how many pods it selects on them, and what of it KOS cannot
// honour (policymodel's Report); and, when asked to publish, it keeps one
// NodeNetworkPolicy per network and node where policy isolates attachments
// (policymodel's model of that network on that node), which the node's
// agent programs into its switch.
//
// It reads MultiNetworkPolicies and NetworkAttachmentDefinitions through
// dynamic informers, pods and namespaces from the main cluster, Subnets and
// NetworkAttachments from kos-apiserver. Its pod informer must keep pods'
// labels and container ports (TrimPod): the pod-network controller's
// trimmed pods lack both.
package multinetworkpolicy

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/kos-sdn/kos/components/controllers/keyqueue"
	"github.com/kos-sdn/kos/components/generated/clientset/versioned"
	kosinformers "github.com/kos-sdn/kos/components/generated/informers/externalversions/network/v1alpha1"
	listers "github.com/kos-sdn/kos/components/generated/listers/network/v1alpha1"
)

// QueueName names the controller's work queue of policies (Events) in
// metrics, and PublishQueueName its queue of namespaces (publishing).
const (
	QueueName        = "kos_multi_network_policy"
	PublishQueueName = "kos_multi_network_policy_publish"
)

// TrimPod is a cache transform that keeps only what policies read of a
// pod: name, namespace, UID, resource version, labels, phase and the
// containers' (and sidecars') ports. Other objects pass unchanged.
func TrimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	trimmed := &corev1.Pod{
		TypeMeta: pod.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name:            pod.Name,
			Namespace:       pod.Namespace,
			UID:             pod.UID,
			ResourceVersion: pod.ResourceVersion,
			Labels:          pod.Labels,
		},
		Status: corev1.PodStatus{Phase: pod.Status.Phase},
	}
	trim := func(cs []corev1.Container, sidecars bool) []corev1.Container {
		var out []corev1.Container
		for _, c := range cs {
			if len(c.Ports) == 0 || (sidecars && (c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways)) {
				continue
			}
			out = append(out, corev1.Container{Name: c.Name, Ports: c.Ports, RestartPolicy: c.RestartPolicy})
		}
		return out
	}
	trimmed.Spec.Containers = trim(pod.Spec.Containers, false)
	trimmed.Spec.InitContainers = trim(pod.Spec.InitContainers, true)
	return trimmed, nil
}

// PodInformerOptions are the options of the shared informer factory of the
// controller's pods: every pod, cut down by TrimPod.
func PodInformerOptions() []informers.SharedInformerOption {
	return []informers.SharedInformerOption{informers.WithTransform(TrimPod)}
}

// Controller reports what MultiNetworkPolicies apply to.
type Controller struct {
	policies    cache.GenericLister
	definitions cache.GenericLister
	pods        corelisters.PodLister
	namespaces  corelisters.NamespaceLister
	subnets     listers.SubnetLister
	attachments listers.NetworkAttachmentLister
	synced      []cache.InformerSynced
	queue       *keyqueue.Queue
	recorder    record.EventRecorder

	// kos, nodePolicies and publishQueue are set when the controller
	// publishes; publishQueue holds namespaces (as keys without a
	// namespace).
	kos          versioned.Interface
	nodePolicies listers.NodeNetworkPolicyLister
	publishQueue *keyqueue.Queue

	// told holds, by policy key, what the Events last said of the policy,
	// so that a policy gets Events when what they say changes, not at each
	// pod's change. It is forgotten on restart: each policy then gets its
	// Events once more.
	mu   sync.Mutex
	told map[string]told
}

// Options are the controller's optional settings.
type Options struct {
	// Publish, when set, makes the controller keep the NodeNetworkPolicies
	// of NodePolicies (which must then be set) with this client.
	Publish      versioned.Interface
	NodePolicies kosinformers.NodeNetworkPolicyInformer
}

// NewController returns a controller that reports on the MultiNetworkPolicies
// policies informs about (a dynamic informer), given definitions
// (NetworkAttachmentDefinitions, a dynamic informer), pods (cut down by
// TrimPod at most), namespaces, subnets and attachments, and publishes
// their models when opts say so. It registers its event handlers at once;
// the caller starts the informers.
func NewController(policies, definitions informers.GenericInformer, pods coreinformers.PodInformer, namespaces coreinformers.NamespaceInformer,
	subnets kosinformers.SubnetInformer, attachments kosinformers.NetworkAttachmentInformer, recorder record.EventRecorder, opts Options) (*Controller, error) {
	c := &Controller{
		policies:    policies.Lister(),
		definitions: definitions.Lister(),
		pods:        pods.Lister(),
		namespaces:  namespaces.Lister(),
		subnets:     subnets.Lister(),
		attachments: attachments.Lister(),
		queue:       keyqueue.New(QueueName),
		recorder:    recorder,
		told:        map[string]told{},
	}
	if opts.Publish != nil {
		if opts.NodePolicies == nil {
			return nil, fmt.Errorf("publishing needs a NodeNetworkPolicy informer")
		}
		c.kos = opts.Publish
		c.nodePolicies = opts.NodePolicies.Lister()
		c.publishQueue = keyqueue.New(PublishQueueName)
		if _, err := opts.NodePolicies.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    c.enqueuePublish,
			UpdateFunc: func(_, obj any) { c.enqueuePublish(obj) },
			DeleteFunc: c.enqueuePublish,
		}); err != nil {
			return nil, fmt.Errorf("adding the NodeNetworkPolicy event handler: %w", err)
		}
		c.synced = append(c.synced, opts.NodePolicies.Informer().HasSynced)
	}
	if _, err := policies.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueuePolicy,
		UpdateFunc: func(_, obj any) { c.enqueuePolicy(obj) },
		DeleteFunc: c.enqueuePolicy,
	}); err != nil {
		return nil, fmt.Errorf("adding the policy event handler: %w", err)
	}
	c.synced = append(c.synced, policies.Informer().HasSynced)
	// A pod, an attachment, a definition or a subnet changes only what
	// the policies of its namespace apply to (see input); a namespace's
	// labels may change any policy's peers.
	inNamespace := cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueNamespace,
		UpdateFunc: func(_, obj any) { c.enqueueNamespace(obj) },
		DeleteFunc: c.enqueueNamespace,
	}
	everything := cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueNamespaceObject,
		UpdateFunc: func(_, obj any) { c.enqueueNamespaceObject(obj) },
		DeleteFunc: c.enqueueNamespaceObject,
	}
	for _, h := range []struct {
		name     string
		informer cache.SharedIndexInformer
		handler  cache.ResourceEventHandler
	}{
		{"definition", definitions.Informer(), inNamespace},
		{"pod", pods.Informer(), inNamespace},
		{"namespace", namespaces.Informer(), everything},
		{"subnet", subnets.Informer(), inNamespace},
		{"attachment", attachments.Informer(), inNamespace},
	} {
		if _, err := h.informer.AddEventHandler(h.handler); err != nil {
			return nil, fmt.Errorf("adding the %s event handler: %w", h.name, err)
		}
		c.synced = append(c.synced, h.informer.HasSynced)
	}
	return c, nil
}

// enqueue adds the key of a policy, or of a deleted one's tombstone.
func (c *Controller) enqueue(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	c.queue.Add(key)
}

// enqueuePolicy adds the key of a policy, or of a deleted one's tombstone,
// and its namespace for publishing.
func (c *Controller) enqueuePolicy(obj any) {
	c.enqueue(obj)
	c.enqueuePublish(obj)
}

// enqueueNamespace adds the keys of the policies of the namespace of obj,
// or of a deleted one's tombstone, and the namespace for publishing.
func (c *Controller) enqueueNamespace(obj any) {
	if ns, ok := namespaceOf(obj); ok {
		c.enqueueAll(ns)
		c.enqueuePublishing(ns)
	}
}

// enqueueNamespaceObject handles a change of a Namespace: its labels may
// change any policy's peers (by namespaceSelector), but the models of its
// own networks only (their pods are all of it).
func (c *Controller) enqueueNamespaceObject(obj any) {
	c.enqueueAll("")
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	if o, err := meta.Accessor(obj); err == nil {
		c.enqueuePublishing(o.GetName())
	}
}

// enqueuePublish adds the namespace of obj, or of a deleted one's
// tombstone, for publishing.
func (c *Controller) enqueuePublish(obj any) {
	if ns, ok := namespaceOf(obj); ok {
		c.enqueuePublishing(ns)
	}
}

// enqueuePublishing adds namespace ns for publishing, when the controller
// publishes.
func (c *Controller) enqueuePublishing(ns string) {
	if c.publishQueue != nil && ns != "" {
		c.publishQueue.Add(ns)
	}
}

// namespaceOf returns the namespace of obj, or of a deleted one's
// tombstone.
func namespaceOf(obj any) (string, bool) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	o, err := meta.Accessor(obj)
	if err != nil {
		utilruntime.HandleError(fmt.Errorf("reading the namespace of %T: %w", obj, err))
		return "", false
	}
	return o.GetNamespace(), true
}

// enqueueAll adds the key of every policy of namespace, or of every one
// when namespace is "". The queue holds a key once, so a burst of changes
// costs each policy one sync.
func (c *Controller) enqueueAll(namespace string) {
	var objs []runtime.Object
	var err error
	if namespace == "" {
		objs, err = c.policies.List(labels.Everything())
	} else {
		objs, err = c.policies.ByNamespace(namespace).List(labels.Everything())
	}
	if err != nil {
		utilruntime.HandleError(fmt.Errorf("listing MultiNetworkPolicies from the cache: %w", err))
		return
	}
	for _, obj := range objs {
		c.enqueue(obj)
	}
}

// Run waits for the informers' caches, then runs workers goroutines that
// report on policies and, when the controller publishes, workers more that
// publish namespaces' models, until ctx ends. It returns once they all
// stopped.
func (c *Controller) Run(ctx context.Context, workers int) error {
	logger := klog.FromContext(ctx)
	logger.Info("Starting the MultiNetworkPolicy controller", "workers", workers, "publish", c.publishQueue != nil)
	errs := make(chan error, 1)
	if c.publishQueue != nil {
		go func() { errs <- c.publishQueue.Run(ctx, workers, c.publish, c.synced...) }()
	} else {
		errs <- nil
	}
	err := c.queue.Run(ctx, workers, c.sync, c.synced...)
	if perr := <-errs; err == nil {
		err = perr
	}
	if err != nil {
		return err
	}
	logger.Info("Stopped the MultiNetworkPolicy controller")
	return nil
}
