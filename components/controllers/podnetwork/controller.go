// Package podnetwork provides the pod-network controller: it gives each pod
// bound to a node one NetworkAttachment for every entry of its
// k8s.v1.cni.cncf.io/networks annotation whose NetworkAttachmentDefinition
// is of type kos. An attachment is made in the pod's namespace, on the pod's
// node, in the Subnet the definition names, under a name derived from the
// pod's name and the interface's (v1alpha1.AttachmentName), so that the
// node's agent finds it when the CNI plugin asks for that interface. The pod is the
// attachment's controller owner, so the garbage collector deletes it with
// the pod; the controller also deletes the attachments of pods that are gone
// or finished, since a garbage collector may not run. A live pod keeps the
// attachments its sandbox may be using: edits of its annotation or of a
// definition apply to new sandboxes (see sync), and kos-apiserver lets no one
// but this controller and the garbage collector delete a pod's attachment.
//
// It reads pods and NetworkAttachmentDefinitions from the main cluster and
// writes only NetworkAttachments (and Events on pods): node agents need no
// right to create anything.
package podnetwork

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/controllers/keyqueue"
	"github.com/kos-sdn/kos/components/generated/clientset/versioned"
	kosinformers "github.com/kos-sdn/kos/components/generated/informers/externalversions/network/v1alpha1"
	listers "github.com/kos-sdn/kos/components/generated/listers/network/v1alpha1"
)

// QueueName names the controller's work queue in metrics.
const QueueName = "kos_pod_network"

// Names of the cache indexes the controller adds to the shared informers.
const (
	// podsByDefinitionIndex indexes pods by the <namespace>/<name> of each
	// NetworkAttachmentDefinition their annotation names.
	podsByDefinitionIndex = "podnetwork-definition"
	// attachmentsByPodIndex indexes the controller's attachments by the
	// <namespace>/<name> of their pod.
	attachmentsByPodIndex = "podnetwork-pod"
)

// PodFieldSelector selects the pods that may want attachments: bound to a
// node, not on the host's network, not finished. A pod that leaves the
// selection (finishes) leaves the informer's cache as if deleted, and its
// attachments go.
var PodFieldSelector = fields.AndSelectors(
	fields.OneTermNotEqualSelector("spec.nodeName", ""),
	fields.OneTermNotEqualSelector("spec.hostNetwork", "true"),
	fields.OneTermNotEqualSelector("status.phase", string(corev1.PodSucceeded)),
	fields.OneTermNotEqualSelector("status.phase", string(corev1.PodFailed)),
).String()

// PodInformerOptions are the options of a shared informer factory whose pod
// informer feeds only this controller: the pods PodFieldSelector selects,
// cut down by TrimPod.
func PodInformerOptions() []informers.SharedInformerOption {
	return []informers.SharedInformerOption{
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = PodFieldSelector }),
		informers.WithTransform(TrimPod),
	}
}

// TrimPod is a cache transform that keeps only what the controller reads of
// a pod, so that a cache of every pod of a cluster stays small: name,
// namespace, UID, resource version, deletion time, the networks annotation,
// node, host network and phase. Other objects pass unchanged.
func TrimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	trimmed := &corev1.Pod{
		TypeMeta: pod.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name:              pod.Name,
			Namespace:         pod.Namespace,
			UID:               pod.UID,
			ResourceVersion:   pod.ResourceVersion,
			DeletionTimestamp: pod.DeletionTimestamp,
		},
		Spec:   corev1.PodSpec{NodeName: pod.Spec.NodeName, HostNetwork: pod.Spec.HostNetwork},
		Status: corev1.PodStatus{Phase: pod.Status.Phase},
	}
	if v, ok := pod.Annotations[NetworksAnnotation]; ok {
		trimmed.Annotations = map[string]string{NetworksAnnotation: v}
	}
	return trimmed, nil
}

// Controller gives pods their NetworkAttachments.
type Controller struct {
	client          versioned.Interface
	pods            corelisters.PodLister
	podIndex        cache.Indexer
	definitions     cache.GenericLister
	attachments     listers.NetworkAttachmentLister
	attachmentIndex cache.Indexer
	synced          []cache.InformerSynced

	queue    *keyqueue.Queue
	recorder record.EventRecorder
}

// NewController returns a controller that makes attachments through client,
// informed by pods (of the main cluster, best from a factory made with
// PodInformerOptions), definitions (NetworkAttachmentDefinitions, a dynamic
// informer of the main cluster) and attachments. It adds its indexes and
// event handlers at once, so it must be called before the informers start.
func NewController(client versioned.Interface, pods coreinformers.PodInformer, definitions informers.GenericInformer, attachments kosinformers.NetworkAttachmentInformer, recorder record.EventRecorder) (*Controller, error) {
	c := &Controller{
		client:          client,
		pods:            pods.Lister(),
		podIndex:        pods.Informer().GetIndexer(),
		definitions:     definitions.Lister(),
		attachments:     attachments.Lister(),
		attachmentIndex: attachments.Informer().GetIndexer(),
		synced:          []cache.InformerSynced{pods.Informer().HasSynced, definitions.Informer().HasSynced, attachments.Informer().HasSynced},
		queue:           keyqueue.New(QueueName),
		recorder:        recorder,
	}
	if err := pods.Informer().AddIndexers(cache.Indexers{podsByDefinitionIndex: podDefinitions}); err != nil {
		return nil, fmt.Errorf("adding the pod index: %w", err)
	}
	if err := attachments.Informer().AddIndexers(cache.Indexers{attachmentsByPodIndex: attachmentPod}); err != nil {
		return nil, fmt.Errorf("adding the attachment index: %w", err)
	}
	handlers := []struct {
		informer cache.SharedIndexInformer
		handler  cache.ResourceEventHandler
		what     string
	}{
		{pods.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    c.enqueuePod,
			UpdateFunc: c.podUpdated,
			DeleteFunc: c.enqueuePod,
		}, "pod"},
		{definitions.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    c.enqueueDefinitionPods,
			UpdateFunc: func(_, obj any) { c.enqueueDefinitionPods(obj) },
			DeleteFunc: c.enqueueDefinitionPods,
		}, "NetworkAttachmentDefinition"},
		{attachments.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    c.enqueueAttachmentPod,
			UpdateFunc: func(_, obj any) { c.enqueueAttachmentPod(obj) },
			DeleteFunc: c.enqueueAttachmentPod,
		}, "attachment"},
	}
	for _, h := range handlers {
		if _, err := h.informer.AddEventHandler(h.handler); err != nil {
			return nil, fmt.Errorf("adding the %s event handler: %w", h.what, err)
		}
	}
	return c, nil
}

// podDefinitions indexes a pod by the definitions its annotation names; a
// malformed annotation names none.
func podDefinitions(obj any) ([]string, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, nil
	}
	nets, err := ParseNetworks(pod.Annotations[NetworksAnnotation], pod.Namespace)
	if err != nil {
		return nil, nil
	}
	var keys []string
	for _, n := range nets {
		keys = append(keys, n.Namespace+"/"+n.Name)
	}
	slices.Sort(keys)
	return slices.Compact(keys), nil
}

// attachmentPod indexes one of the controller's attachments by its pod.
func attachmentPod(obj any) ([]string, error) {
	a, ok := obj.(*v1alpha1.NetworkAttachment)
	if !ok {
		return nil, nil
	}
	if ref := podOwner(a); ref != nil {
		return []string{a.Namespace + "/" + ref.Name}, nil
	}
	return nil, nil
}

// podOwner returns the controller owner reference of one of the
// controller's attachments to its pod, or nil for an attachment that is not
// the controller's.
func podOwner(a *v1alpha1.NetworkAttachment) *metav1.OwnerReference {
	if _, ok := a.Labels[v1alpha1.PodUIDLabel]; !ok {
		return nil
	}
	ref := metav1.GetControllerOfNoCopy(a)
	if ref == nil || ref.APIVersion != "v1" || ref.Kind != "Pod" {
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

func (c *Controller) enqueuePod(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	c.queue.Add(key)
}

// podUpdated adds a pod whose annotation, node, phase or deletion changed,
// and every pod on a resync; the kubelet's status updates change none of
// them.
func (c *Controller) podUpdated(oldObj, newObj any) {
	old, ok1 := oldObj.(*corev1.Pod)
	pod, ok2 := newObj.(*corev1.Pod)
	if ok1 && ok2 && old.ResourceVersion != pod.ResourceVersion &&
		old.UID == pod.UID &&
		old.Annotations[NetworksAnnotation] == pod.Annotations[NetworksAnnotation] &&
		old.Spec.NodeName == pod.Spec.NodeName &&
		old.Spec.HostNetwork == pod.Spec.HostNetwork &&
		old.Status.Phase == pod.Status.Phase &&
		apiequality.Semantic.DeepEqual(old.DeletionTimestamp, pod.DeletionTimestamp) {
		return
	}
	c.enqueuePod(newObj)
}

// enqueueDefinitionPods adds the pods whose annotation names a definition.
func (c *Controller) enqueueDefinitionPods(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	pods, err := c.podIndex.ByIndex(podsByDefinitionIndex, key)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	for _, p := range pods {
		c.enqueuePod(p)
	}
}

// enqueueAttachmentPod adds the pod of one of the controller's attachments.
func (c *Controller) enqueueAttachmentPod(obj any) {
	a, ok := tombstoneObject(obj).(*v1alpha1.NetworkAttachment)
	if !ok {
		return
	}
	if ref := podOwner(a); ref != nil {
		c.queue.Add(a.Namespace + "/" + ref.Name)
	}
}

// definition returns the NetworkAttachmentDefinition of namespace/name from
// the cache.
func (c *Controller) definition(namespace, name string) (*unstructured.Unstructured, error) {
	obj, err := c.definitions.ByNamespace(namespace).Get(name)
	if err != nil {
		return nil, err
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("NetworkAttachmentDefinition %s/%s is cached as a %T", namespace, name, obj)
	}
	return u, nil
}

// Run waits for the informers' caches, then runs workers goroutines that
// give pods their attachments until ctx ends. It returns once they all
// stopped.
func (c *Controller) Run(ctx context.Context, workers int) error {
	logger := klog.FromContext(ctx)
	logger.Info("Starting the pod-network controller", "workers", workers)
	if err := c.queue.Run(ctx, workers, c.sync, c.synced...); err != nil {
		return err
	}
	logger.Info("Stopped the pod-network controller")
	return nil
}
