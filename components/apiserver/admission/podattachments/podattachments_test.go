package podattachments

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/informers"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/kos-sdn/kos/components/apis/network"
	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
)

const controller = "system:serviceaccount:example-com:kos-controller-manager"

// podAttachment returns the attachment kos-controller-manager makes for
// interface net1 of pod web-0 in namespace ns.
func podAttachment(ns string) *network.NetworkAttachment {
	return &network.NetworkAttachment{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: "web-0-net1",
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Pod", Name: "web-0", UID: "web-0-uid",
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(false),
			}},
		},
		Spec: network.NetworkAttachmentSpec{Node: "n1", Subnet: "s1"},
	}
}

// newPlugin returns the plugin with the default deleters, whose cache holds
// namespaces.
func newPlugin(t *testing.T, namespaces ...*corev1.Namespace) *Plugin {
	t.Helper()
	p := New(DefaultDeleters)
	f := informers.NewSharedInformerFactory(kubefake.NewClientset(), 0)
	p.SetExternalKubeInformerFactory(f)
	for _, ns := range namespaces {
		if err := f.Core().V1().Namespaces().Informer().GetStore().Add(ns); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.ValidateInitialization(); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestValidate(t *testing.T) {
	active := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns"}, Status: corev1.NamespaceStatus{Phase: corev1.NamespaceActive}}
	leaving := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "leaving", DeletionTimestamp: &metav1.Time{}}, Status: corev1.NamespaceStatus{Phase: corev1.NamespaceTerminating}}
	tenant := &user.DefaultInfo{Name: "alice", Groups: []string{"system:authenticated"}}
	admin := &user.DefaultInfo{Name: "admin", Groups: []string{"system:masters"}}
	mine := podAttachment("ns")
	mine.OwnerReferences = nil
	notController := podAttachment("ns")
	notController.OwnerReferences[0].Controller = nil
	relabelled := podAttachment("ns")
	relabelled.Labels = map[string]string{"x": "y"}
	orphaned := podAttachment("ns")
	orphaned.OwnerReferences = nil
	otherPod := podAttachment("ns")
	otherPod.OwnerReferences[0].UID = "web-0-other"

	refusal := `networkattachments.network.example.com "web-0-net1" is forbidden: NetworkAttachment ns/web-0-net1 gives pod web-0 an interface: ` +
		`only kos-controller-manager and Kubernetes's garbage collector (system:kube-controller-manager, system:serviceaccount:example-com:kos-controller-manager, system:serviceaccount:kube-system:generic-garbage-collector) ` +
		`may delete it, so that a running pod never loses its interface, and user "alice" may not; delete the pod, and its attachments go with it`
	tests := []struct {
		name        string
		op          admission.Operation
		subresource string
		old, att    *network.NetworkAttachment
		user        user.Info
		want        string // "" means admitted; else a part of the refusal
	}{
		{"a tenant deletes a pod's attachment", admission.Delete, "", podAttachment("ns"), nil, tenant, refusal},
		{"an admin deletes a pod's attachment", admission.Delete, "", podAttachment("ns"), nil, admin, `user "admin" may not`},
		{"anonymous deletes a pod's attachment", admission.Delete, "", podAttachment("ns"), nil, nil, `user anonymous may not`},
		{"the controller deletes a pod's attachment", admission.Delete, "", podAttachment("ns"), nil, &user.DefaultInfo{Name: controller}, ""},
		{"the garbage collector deletes a pod's attachment", admission.Delete, "", podAttachment("ns"), nil,
			&user.DefaultInfo{Name: "system:serviceaccount:kube-system:generic-garbage-collector"}, ""},
		{"kube-controller-manager deletes a pod's attachment", admission.Delete, "", podAttachment("ns"), nil,
			&user.DefaultInfo{Name: "system:kube-controller-manager"}, ""},
		{"a tenant deletes a pod's attachment in a namespace being deleted", admission.Delete, "", podAttachment("leaving"), nil, tenant, ""},
		{"a tenant deletes a pod's attachment in a namespace gone", admission.Delete, "", podAttachment("gone"), nil, tenant, ""},
		{"a tenant deletes their own attachment", admission.Delete, "", mine, nil, tenant, ""},
		{"a pod owner that is not the controller", admission.Delete, "", notController, nil, tenant, ""},
		{"the delete of a collection, before its items", admission.Delete, "", nil, nil, tenant, ""},
		{"a tenant labels a pod's attachment", admission.Update, "", podAttachment("ns"), relabelled, tenant, ""},
		{"a tenant removes the pod owner", admission.Update, "", podAttachment("ns"), orphaned, tenant, "may change its owner reference to the pod, so that"},
		{"a tenant points the owner at another pod", admission.Update, "", podAttachment("ns"), otherPod, tenant, "may change its owner reference to the pod"},
		{"the garbage collector orphans a pod's attachment", admission.Update, "", podAttachment("ns"), orphaned,
			&user.DefaultInfo{Name: "system:serviceaccount:kube-system:generic-garbage-collector"}, ""},
		{"a status write is not this plugin's", admission.Update, "status", podAttachment("ns"), orphaned, tenant, ""},
	}
	p := newPlugin(t, active, leaving)
	if !p.Handles(admission.Delete) || !p.Handles(admission.Update) || p.Handles(admission.Create) {
		t.Errorf("Handles: want deletes and updates only")
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ns := "ns"
			if tc.old != nil {
				ns = tc.old.Namespace
			}
			attrs := admission.NewAttributesRecord(object(tc.att), object(tc.old), v1alpha1.SchemeGroupVersion.WithKind("NetworkAttachment"), ns, "web-0-net1",
				v1alpha1.SchemeGroupVersion.WithResource("networkattachments"), tc.subresource, tc.op, nil, false, tc.user)
			err := p.Validate(context.Background(), attrs, nil)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Validate: got %v, want admitted", err)
			case tc.want != "" && err == nil:
				t.Errorf("Validate: admitted, want a refusal with %q", tc.want)
			case tc.want != "" && !apierrors.IsForbidden(err):
				t.Errorf("Validate: got %v, want Forbidden", err)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Errorf("Validate: got %q, want it to contain %q", err, tc.want)
			}
		})
	}
}

// object returns att as an object, nil when att is.
func object(att *network.NetworkAttachment) runtime.Object {
	if att == nil {
		return nil
	}
	return att
}

func TestValidateInitialization(t *testing.T) {
	if err := New(DefaultDeleters).ValidateInitialization(); err == nil {
		t.Error("ValidateInitialization without a namespace lister: got no error")
	}
}
