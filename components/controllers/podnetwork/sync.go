package podnetwork

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
)

// Reasons of the Events the controller records on pods.
const (
	// ReasonInvalidNetworks is the reason of the Warning event of a pod
	// whose networks annotation does not parse.
	ReasonInvalidNetworks = "InvalidNetworks"
	// ReasonNetworkNotFound is the reason of the Warning event of a pod whose
	// annotation names a NetworkAttachmentDefinition that does not exist.
	ReasonNetworkNotFound = "NetworkNotFound"
	// ReasonInvalidNetwork is the reason of the Warning event of a pod one
	// of whose networks cannot be given: a malformed CNI configuration, a
	// kos one without a subnet, an address that cannot be honoured.
	ReasonInvalidNetwork = "InvalidNetwork"
	// ReasonAttachmentConflict is the reason of the Warning event of a pod
	// whose attachment's name is taken by an object that is not the pod's.
	ReasonAttachmentConflict = "AttachmentConflict"
	// ReasonAttachmentFailed is the reason of the Warning event of a pod
	// whose attachment could not be created or deleted; it is retried.
	ReasonAttachmentFailed = "AttachmentFailed"
	// ReasonAttachmentCreated is the reason of the Normal event of a pod
	// given an attachment.
	ReasonAttachmentCreated = "AttachmentCreated"
	// ReasonAttachmentDeleted is the reason of the Normal event of a pod
	// one of whose attachments was deleted because it no longer asks for it.
	ReasonAttachmentDeleted = "AttachmentDeleted"
	// ReasonAttachmentKept is the reason of the Normal event of a pod whose
	// definition or annotation changed under an interface it may be using:
	// the interface keeps its attachment, and the change applies to the
	// pod's next incarnation.
	ReasonAttachmentKept = "AttachmentKept"
)

// problem is something wrong with what a pod asks for, told to its owner
// in a Warning event.
type problem struct {
	reason, message string
}

// plan is what a pod's attachments should be.
type plan struct {
	// want holds the attachments the pod should have, by name.
	want map[string]*v1alpha1.NetworkAttachment
	// keep names the attachments of entries that could not be resolved
	// (their definition is missing or wrong): those the pod has stay as
	// they are until it is clear what the entry wants.
	keep sets.Set[string]
	// problems are what keeps entries from being resolved.
	problems []problem
}

// sync brings the attachments of the pod named by ref up to date: it creates
// those the pod asks for and lacks, leaves those that match, and deletes
// those of a pod that is gone, finished or not (or no longer) of this
// incarnation.
//
// A live pod's interface is never taken away: an attachment the pod no
// longer asks for, or that no longer matches its definition or its ips
// (another subnet, another address), stays while a sandbox may be using it
// (inUse), and an AttachmentKept Event says that the change applies to new
// sandboxes, which for KOS means the pod's next incarnation: a sandbox that
// kubelet re-creates for the same pod finds the same attachment. Only an
// attachment no sandbox can have used yet (no address, no interface) is
// deleted, and a later sync makes the one now wanted; that lets a pod that
// waits for an address (a definition naming a missing subnet) take the
// fixed definition.
//
// Problems with what the pod asks for are Events on the pod, not errors:
// the informers bring the changes that may fix them. Only failed writes are
// retried.
func (c *Controller) sync(ctx context.Context, ref cache.ObjectName) error {
	namespace, name := ref.Parts()
	pod, err := c.pods.Pods(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		pod = nil
	} else if err != nil {
		return fmt.Errorf("reading pod %s from the cache: %w", ref, err)
	}
	owned, err := c.attachmentIndex.ByIndex(attachmentsByPodIndex, ref.String())
	if err != nil {
		return fmt.Errorf("reading the attachments of pod %s from the cache: %w", ref, err)
	}
	var attachments []*v1alpha1.NetworkAttachment
	for _, obj := range owned {
		attachments = append(attachments, obj.(*v1alpha1.NetworkAttachment))
	}
	slices.SortFunc(attachments, func(a, b *v1alpha1.NetworkAttachment) int { return cmp.Compare(a.Name, b.Name) })

	if pod == nil || !wantsNetworks(pod) {
		var errs []error
		for _, a := range attachments {
			errs = append(errs, c.delete(ctx, pod, a, "the pod is gone, finished or not on a pod network", false))
		}
		return errors.Join(errs...)
	}
	nets, err := ParseNetworks(pod.Annotations[NetworksAnnotation], pod.Namespace)
	if err != nil {
		// What the pod wants is unknown: its attachments stay as they are.
		c.recorder.Eventf(pod, corev1.EventTypeWarning, ReasonInvalidNetworks, "Annotation %s: %v", NetworksAnnotation, err)
		return nil
	}
	p, err := c.plan(pod, nets)
	if err != nil {
		return err
	}
	for _, pr := range p.problems {
		c.recorder.Event(pod, corev1.EventTypeWarning, pr.reason, pr.message)
	}

	var errs []error
	for _, a := range attachments {
		switch w := p.want[a.Name]; {
		case podOwner(a).UID != pod.UID:
			errs = append(errs, c.delete(ctx, pod, a, "it belongs to an earlier pod of the same name", false))
		case w != nil && matches(a, w):
		case p.keep.Has(a.Name):
		case w != nil && inUse(a):
			c.recorder.Eventf(pod, corev1.EventTypeNormal, ReasonAttachmentKept,
				"Kept NetworkAttachment %s (%s) of the running interface %s, which now asks for %s: a change applies to new sandboxes only; re-create the pod to apply it",
				a.Name, describeAttachment(a), w.Annotations[v1alpha1.InterfaceAnnotation], describeWant(w))
		case w != nil:
			// spec.node, spec.subnet and spec.ipv4 are immutable: the
			// attachment is made again once its deletion is seen.
			errs = append(errs, c.delete(ctx, pod, a, fmt.Sprintf("interface %s now wants %s", w.Annotations[v1alpha1.InterfaceAnnotation], describeWant(w)), true))
		case inUse(a):
			c.recorder.Eventf(pod, corev1.EventTypeNormal, ReasonAttachmentKept,
				"Kept NetworkAttachment %s (%s) of the running interface %s, which the pod no longer asks for: a change applies to new sandboxes only; the attachment goes with the pod",
				a.Name, describeAttachment(a), a.Annotations[v1alpha1.InterfaceAnnotation])
		default:
			errs = append(errs, c.delete(ctx, pod, a, "the pod no longer asks for its interface", true))
		}
	}
	if pod.DeletionTimestamp != nil {
		// A pod being deleted gets no new interface.
		return errors.Join(errs...)
	}
	for _, name := range sets.List(sets.KeySet(p.want)) {
		want := p.want[name]
		existing, err := c.attachments.NetworkAttachments(namespace).Get(name)
		switch {
		case apierrors.IsNotFound(err):
			errs = append(errs, c.create(ctx, pod, want))
		case err != nil:
			errs = append(errs, fmt.Errorf("reading attachment %s/%s from the cache: %w", namespace, name, err))
		case podOwner(existing) != nil && podOwner(existing).Name == pod.Name:
			// This pod's, or an earlier pod's being deleted above.
		default:
			c.recorder.Eventf(pod, corev1.EventTypeWarning, ReasonAttachmentConflict,
				"NetworkAttachment %s for interface %s exists and is not this pod's (%s); the interface gets none", name, want.Annotations[v1alpha1.InterfaceAnnotation], describeOwner(existing))
		}
	}
	return errors.Join(errs...)
}

// wantsNetworks reports whether a pod may have attachments: bound to a
// node, not finished, not on the host's network.
func wantsNetworks(pod *corev1.Pod) bool {
	return pod.Spec.NodeName != "" && !pod.Spec.HostNetwork &&
		pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed
}

// plan resolves the entries of a pod's annotation against the cached
// NetworkAttachmentDefinitions. Entries of other plugins are left to them.
func (c *Controller) plan(pod *corev1.Pod, nets []Network) (plan, error) {
	p := plan{want: map[string]*v1alpha1.NetworkAttachment{}, keep: sets.New[string]()}
	for _, n := range nets {
		name := v1alpha1.AttachmentName(pod.Name, n.Interface)
		nad, err := c.definition(n.Namespace, n.Name)
		if apierrors.IsNotFound(err) {
			p.keep.Insert(name)
			p.problems = append(p.problems, problem{ReasonNetworkNotFound,
				fmt.Sprintf("NetworkAttachmentDefinition %s/%s of interface %s not found", n.Namespace, n.Name, n.Interface)})
			continue
		}
		if err != nil {
			return p, fmt.Errorf("reading NetworkAttachmentDefinition %s/%s from the cache: %w", n.Namespace, n.Name, err)
		}
		config, err := DefinitionConfig(nad)
		var pc PluginConfig
		if err == nil {
			pc, err = ParsePluginConfig(config)
		}
		if err != nil {
			p.keep.Insert(name)
			p.problems = append(p.problems, problem{ReasonInvalidNetwork,
				fmt.Sprintf("NetworkAttachmentDefinition %s/%s of interface %s: %v", n.Namespace, n.Name, n.Interface, err)})
			continue
		}
		if !pc.IsKOS() {
			continue
		}
		ipv4, msg := checkKOSNetwork(pod, n)
		if msg != "" {
			p.keep.Insert(name)
			p.problems = append(p.problems, problem{ReasonInvalidNetwork,
				fmt.Sprintf("Interface %s on NetworkAttachmentDefinition %s/%s: %s", n.Interface, n.Namespace, n.Name, msg)})
			continue
		}
		p.want[name] = newAttachment(pod, name, n.Interface, pc.Subnet, ipv4)
	}
	return p, nil
}

// checkKOSNetwork returns the address that an entry whose definition is of
// type kos asks for ("" for any), or what keeps KOS from giving the pod an
// interface on it. Whether the address lies in the subnet and is free is
// IPAM's to tell, in the attachment's status.
func checkKOSNetwork(pod *corev1.Pod, n Network) (ipv4, problem string) {
	if n.Namespace != pod.Namespace {
		return "", fmt.Sprintf("the definition's subnet is in namespace %s, but a KOS interface of a pod in namespace %s must use a subnet of its own namespace", n.Namespace, pod.Namespace)
	}
	if n.MAC != "" {
		return "", fmt.Sprintf("the entry asks for MAC address %s, but a KOS interface has its attachment's MAC address, which follows from its IPv4 address: remove \"mac\"", n.MAC)
	}
	addr, err := RequestedIPv4(n.IPs)
	if err != nil {
		return "", err.Error()
	}
	if !addr.IsValid() {
		return "", ""
	}
	return addr.String(), ""
}

// newAttachment returns the attachment named name that gives pod its
// interface ifname in subnet, at address ipv4 when that is not empty.
func newAttachment(pod *corev1.Pod, name, ifname, subnet, ipv4 string) *v1alpha1.NetworkAttachment {
	return &v1alpha1.NetworkAttachment{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   pod.Namespace,
			Name:        name,
			Labels:      map[string]string{v1alpha1.PodUIDLabel: string(pod.UID)},
			Annotations: map[string]string{v1alpha1.PodAnnotation: pod.Name, v1alpha1.InterfaceAnnotation: ifname},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1",
				Kind:       "Pod",
				Name:       pod.Name,
				UID:        pod.UID,
				Controller: ptr.To(true),
				// Blocking the pod's deletion would take the right to
				// update pods' finalizers, and nothing needs it.
				BlockOwnerDeletion: ptr.To(false),
			}},
		},
		Spec: v1alpha1.NetworkAttachmentSpec{Node: pod.Spec.NodeName, Subnet: subnet, IPv4: ipv4},
	}
}

// matches reports whether an attachment of the pod is the one wanted.
func matches(a, want *v1alpha1.NetworkAttachment) bool {
	return a.Spec.Node == want.Spec.Node && a.Spec.Subnet == want.Spec.Subnet && a.Spec.IPv4 == want.Spec.IPv4 &&
		a.Annotations[v1alpha1.InterfaceAnnotation] == want.Annotations[v1alpha1.InterfaceAnnotation]
}

// inUse reports whether a sandbox may be using an attachment of the pod: the
// node's agent plugs a sandbox's interface only into an attachment that has
// an address, and reports the interface in the status; an attachment that
// has neither has no sandbox yet.
func inUse(a *v1alpha1.NetworkAttachment) bool {
	st := a.Status
	return st.IPv4 != "" || st.IfcName != "" || st.MACAddress != "" || st.HostIP != ""
}

// describeAttachment says what an attachment holds, for an Event.
func describeAttachment(a *v1alpha1.NetworkAttachment) string {
	s := "subnet " + a.Spec.Subnet
	if a.Status.IPv4 != "" {
		s += ", address " + a.Status.IPv4
	}
	return s
}

// describeWant says what an attachment is wanted for, for an Event.
func describeWant(want *v1alpha1.NetworkAttachment) string {
	s := fmt.Sprintf("subnet %s on node %s", want.Spec.Subnet, want.Spec.Node)
	if want.Spec.IPv4 != "" {
		s += " at address " + want.Spec.IPv4
	}
	return s
}

// describeOwner says whose an attachment is, for an Event.
func describeOwner(a *v1alpha1.NetworkAttachment) string {
	if ref := metav1.GetControllerOfNoCopy(a); ref != nil {
		return fmt.Sprintf("its controller is %s %s", ref.Kind, ref.Name)
	}
	return "it has no controller"
}

// create creates an attachment of pod.
func (c *Controller) create(ctx context.Context, pod *corev1.Pod, want *v1alpha1.NetworkAttachment) error {
	logger := klog.FromContext(ctx)
	ifname := want.Annotations[v1alpha1.InterfaceAnnotation]
	got, err := c.client.NetworkV1alpha1().NetworkAttachments(want.Namespace).Create(ctx, want, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		// The cache is behind; the attachment's event brings the pod back.
		logger.V(4).Info("Attachment exists already", "pod", klog.KObj(pod), "attachment", klog.KObj(want))
		return nil
	}
	if err != nil {
		c.recorder.Eventf(pod, corev1.EventTypeWarning, ReasonAttachmentFailed, "Creating NetworkAttachment %s for interface %s: %v", want.Name, ifname, err)
		return fmt.Errorf("creating attachment %s/%s for pod %s: %w", want.Namespace, want.Name, pod.Name, err)
	}
	logger.V(2).Info("Created an attachment", "pod", klog.KObj(pod), "attachment", klog.KObj(got), "interface", ifname, "subnet", got.Spec.Subnet, "node", got.Spec.Node, "ipv4", got.Spec.IPv4)
	asking := ""
	if got.Spec.IPv4 != "" {
		asking = ", asking for address " + got.Spec.IPv4
	}
	c.recorder.Eventf(pod, corev1.EventTypeNormal, ReasonAttachmentCreated, "Created NetworkAttachment %s for interface %s in subnet %s%s", got.Name, ifname, got.Spec.Subnet, asking)
	return nil
}

// delete deletes an attachment of the pod (nil when gone) for the reason
// given, unless the attachment was already replaced by another of its name;
// unchanged deletes it only as the cache holds it (its resourceVersion), so
// that an attachment judged unused is not deleted once it got an address.
func (c *Controller) delete(ctx context.Context, pod *corev1.Pod, a *v1alpha1.NetworkAttachment, why string, unchanged bool) error {
	logger := klog.FromContext(ctx)
	pre := &metav1.Preconditions{UID: &a.UID}
	if unchanged {
		pre.ResourceVersion = &a.ResourceVersion
	}
	err := c.client.NetworkV1alpha1().NetworkAttachments(a.Namespace).Delete(ctx, a.Name, metav1.DeleteOptions{Preconditions: pre})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		// Gone, replaced by another attachment or changed since: its
		// event brings the pod back.
		return nil
	}
	if err != nil {
		if pod != nil {
			c.recorder.Eventf(pod, corev1.EventTypeWarning, ReasonAttachmentFailed, "Deleting NetworkAttachment %s: %v", a.Name, err)
		}
		return fmt.Errorf("deleting attachment %s/%s: %w", a.Namespace, a.Name, err)
	}
	logger.V(2).Info("Deleted an attachment", "pod", klog.KRef(a.Namespace, podOwner(a).Name), "attachment", klog.KObj(a), "reason", why)
	if pod != nil {
		c.recorder.Eventf(pod, corev1.EventTypeNormal, ReasonAttachmentDeleted, "Deleted NetworkAttachment %s: %s", a.Name, why)
	}
	return nil
}
