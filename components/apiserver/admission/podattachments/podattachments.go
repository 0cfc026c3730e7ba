// Package podattachments is kos-apiserver's admission plugin
// PodAttachmentProtection: it keeps a pod's NetworkAttachments, which
// kos-controller-manager makes for the interfaces of the pod's sandbox, from
// being deleted by anyone else while the pod runs. Deleting one would take
// the running pod's interface away for good: nothing plugs a sandbox again.
//
// A pod's attachment is one whose controller owner reference names a Pod
// (v1). Only the deleters (by default kos-controller-manager's
// ServiceAccount and the identities of Kubernetes's garbage collector) may
// delete it, or change or remove that owner reference (which would let
// anyone delete it next). Everyone may in a namespace being deleted, so
// that the namespace's deletion is never held up. Deleting the pod deletes
// its attachments: kos-controller-manager deletes those of gone pods, and
// the garbage collector those whose owner is gone.
//
// Other attachments are left to RBAC alone.
package podattachments

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/initializer"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"

	"github.com/kos-sdn/kos/components/apis/network"
)

// PluginName is the name of the plugin in --enable-admission-plugins and
// --disable-admission-plugins.
const PluginName = "PodAttachmentProtection"

// DefaultDeleters are the users who may delete a pod's attachment when none
// are configured: kos-controller-manager's ServiceAccount (in example-com,
// as the kos-controller-manager addon creates it), and Kubernetes's garbage
// collector, which runs as its own ServiceAccount when kube-controller-manager
// uses service-account credentials (kubeadm, kind) and as
// system:kube-controller-manager when it does not.
var DefaultDeleters = []string{
	serviceaccount.MakeUsername("example-com", "kos-controller-manager"),
	serviceaccount.MakeUsername(metav1.NamespaceSystem, "generic-garbage-collector"),
	"system:kube-controller-manager",
}

// Plugin is the PodAttachmentProtection admission plugin.
type Plugin struct {
	*admission.Handler
	deleters   sets.Set[string]
	namespaces corelisters.NamespaceLister
}

var (
	_ admission.ValidationInterface                = (*Plugin)(nil)
	_ admission.InitializationValidator            = (*Plugin)(nil)
	_ initializer.WantsExternalKubeInformerFactory = (*Plugin)(nil)
)

// New returns the plugin for the given deleters.
func New(deleters []string) *Plugin {
	return &Plugin{Handler: admission.NewHandler(admission.Delete, admission.Update), deleters: sets.New(deleters...)}
}

// Register registers the plugin in plugins; deleters is called when the
// plugin is made, after the command line is parsed.
func Register(plugins *admission.Plugins, deleters func() []string) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) {
		return New(deleters()), nil
	})
}

// SetExternalKubeInformerFactory takes the namespace lister of the main
// cluster, to tell a namespace being deleted.
func (p *Plugin) SetExternalKubeInformerFactory(f informers.SharedInformerFactory) {
	namespaces := f.Core().V1().Namespaces()
	p.namespaces = namespaces.Lister()
	p.SetReadyFunc(namespaces.Informer().HasSynced)
}

// ValidateInitialization checks that the plugin got its namespace lister.
func (p *Plugin) ValidateInitialization() error {
	if p.namespaces == nil {
		return errors.New("missing the namespace lister of the main cluster")
	}
	return nil
}

// Validate refuses a delete of a pod's attachment, or an update that changes
// its pod owner reference, by a user who is not a deleter, outside a
// namespace being deleted.
func (p *Plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetResource().GroupResource() != network.Resource("networkattachments") || a.GetSubresource() != "" {
		return nil
	}
	old, ok := a.GetOldObject().(*network.NetworkAttachment)
	if !ok {
		// The delete of a whole collection is asked once without an
		// object, then once per attachment.
		return nil
	}
	pod := PodOwner(old)
	if pod == nil {
		return nil
	}
	if a.GetOperation() == admission.Update {
		att, ok := a.GetObject().(*network.NetworkAttachment)
		if !ok {
			return admission.NewForbidden(a, fmt.Errorf("unexpected object %T", a.GetObject()))
		}
		if apiequality.Semantic.DeepEqual(PodOwner(att), pod) {
			return nil
		}
	}
	u := a.GetUserInfo()
	if u != nil && p.deleters.Has(u.GetName()) {
		return nil
	}
	terminating, err := p.namespaceTerminating(old.Namespace)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	if terminating {
		return nil
	}
	user := "anonymous"
	if u != nil {
		user = fmt.Sprintf("%q", u.GetName())
	}
	what := "delete it"
	if a.GetOperation() == admission.Update {
		what = "change its owner reference to the pod"
	}
	return admission.NewForbidden(a, fmt.Errorf(
		"NetworkAttachment %s/%s gives pod %s an interface: only kos-controller-manager and Kubernetes's garbage collector (%s) may %s, so that a running pod never loses its interface, and user %s may not; delete the pod, and its attachments go with it",
		old.Namespace, old.Name, pod.Name, strings.Join(sets.List(p.deleters), ", "), what, user))
}

// namespaceTerminating reports whether the namespace is being deleted (or
// gone).
func (p *Plugin) namespaceTerminating(name string) (bool, error) {
	ns, err := p.namespaces.Get(name)
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading namespace %s from the cache: %w", name, err)
	}
	return ns.DeletionTimestamp != nil || ns.Status.Phase == corev1.NamespaceTerminating, nil
}

// PodOwner returns the controller owner reference of att to its pod, or nil
// when att is not a pod's.
func PodOwner(att *network.NetworkAttachment) *metav1.OwnerReference {
	ref := metav1.GetControllerOfNoCopy(att)
	if ref == nil || ref.APIVersion != "v1" || ref.Kind != "Pod" {
		return nil
	}
	return ref
}
