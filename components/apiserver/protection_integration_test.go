package apiserver_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	kosclient "github.com/kos-sdn/kos/components/generated/clientset/versioned"
	"github.com/kos-sdn/kos/tools/poll"
	"github.com/kos-sdn/kos/tools/testenv"
)

// releasedAPIServer is the newest release of the kos-apiserver addon,
// relative to this package: it holds the ClusterRole kos-network-edit that
// tenants get.
const releasedAPIServer = "../../addons/kos-apiserver/0.3.0-k8s-1.30.yaml"

// TestIntegrationProtection checks, with real service-account tokens of
// the main cluster, that a pod's NetworkAttachment and a Subnet in use are
// kept: a tenant with the released ClusterRole kos-network-edit is refused
// the delete of a pod's attachment and the removal of its owner reference,
// with a message naming who may; kos-controller-manager's ServiceAccount
// (example-com/kos-controller-manager, with the same role) may delete it;
// anyone may in a namespace being deleted; a Subnet is refused deletion
// while attachments use it, naming them, and deleted once they are gone.
func TestIntegrationProtection(t *testing.T) {
	env := testenv.Shared(t)
	ctx := context.Background()
	kos := startKOS(t, testenv.KOSOptions{Name: "protect", DirectOnly: true})
	kube, err := kubernetes.NewForConfig(env.RESTConfig)
	if err != nil {
		t.Fatalf("creating a client: %v", err)
	}
	admin := kosClient(t, kos.DirectConfig)
	ns, leaving := newNamespace(t), newNamespace(t)

	edit := releasedClusterRole(t, releasedAPIServer, "kos-network-edit")
	if _, err := kube.RbacV1().ClusterRoles().Create(ctx, edit, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		_, err = kube.RbacV1().ClusterRoles().Update(ctx, edit, metav1.UpdateOptions{})
		if err != nil {
			t.Fatalf("updating cluster role %s: %v", edit.Name, err)
		}
	} else if err != nil {
		t.Fatalf("creating cluster role %s: %v", edit.Name, err)
	}
	tenant := serviceAccountClient(t, kube, kos, ns, "tenant", edit.Name, ns, leaving)
	controller := serviceAccountClient(t, kube, kos, "example-com", "kos-controller-manager", edit.Name, ns)

	mustCreateSubnet(t, admin, newSubnet(ns, "blue", "10.140.0.0/24", 140))
	podsAttachment := func(ns string) *v1alpha1.NetworkAttachment {
		a := newAttachment(ns, "web-0-net1", "node-1", "blue")
		a.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "Pod", Name: "web-0", UID: types.UID("web-0-uid-" + ns),
			Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(false),
		}}
		return mustCreateAttachment(t, admin, a)
	}
	web := podsAttachment(ns)
	mustCreateAttachment(t, admin, newAttachment(ns, "by-hand", "node-1", "blue"))

	// A tenant may not delete the pod's attachment, nor free it first.
	err = tenant.NetworkV1alpha1().NetworkAttachments(ns).Delete(ctx, web.Name, metav1.DeleteOptions{})
	wantRefusal(t, "the tenant's delete of the pod's attachment", err, apierrors.IsForbidden,
		fmt.Sprintf(`networkattachments.network.example.com "web-0-net1" is forbidden: NetworkAttachment %s/web-0-net1 gives pod web-0 an interface: only kos-controller-manager and Kubernetes's garbage collector (`, ns),
		`) may delete it, so that a running pod never loses its interface, and user "system:serviceaccount:`+ns+`:tenant" may not; delete the pod, and its attachments go with it`)
	_, err = tenant.NetworkV1alpha1().NetworkAttachments(ns).Patch(ctx, web.Name, types.MergePatchType, []byte(`{"metadata":{"ownerReferences":null}}`), metav1.PatchOptions{})
	wantRefusal(t, "the tenant's removal of the pod owner", err, apierrors.IsForbidden, "may change its owner reference to the pod, so that a running pod never loses its interface")
	// Labels are the tenant's to change.
	if _, err := tenant.NetworkV1alpha1().NetworkAttachments(ns).Patch(ctx, web.Name, types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"web"}}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("the tenant's label on the pod's attachment: %v", err)
	}

	// The subnet is in use.
	err = tenant.NetworkV1alpha1().Subnets(ns).Delete(ctx, "blue", metav1.DeleteOptions{})
	wantRefusal(t, "the delete of the subnet in use", err, apierrors.IsConflict,
		`Operation cannot be fulfilled on subnets.network.example.com "blue": subnet in use: 2 NetworkAttachments use it (by-hand, web-0-net1); a pod's attachment goes with its pod, delete the others first`)
	err = admin.NetworkV1alpha1().Subnets(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	wantRefusal(t, "the admin's delete of every subnet of the namespace", err, apierrors.IsConflict, "subnet in use: 2 NetworkAttachments use it")
	if _, err := admin.NetworkV1alpha1().Subnets(ns).Get(ctx, "blue", metav1.GetOptions{}); err != nil {
		t.Errorf("the subnet after refused deletes: %v", err)
	}

	// The tenant's own attachment is theirs; the pod's is the controller's.
	if err := tenant.NetworkV1alpha1().NetworkAttachments(ns).Delete(ctx, "by-hand", metav1.DeleteOptions{}); err != nil {
		t.Errorf("the tenant's delete of their own attachment: %v", err)
	}
	err = tenant.NetworkV1alpha1().Subnets(ns).Delete(ctx, "blue", metav1.DeleteOptions{})
	wantRefusal(t, "the delete of the subnet one attachment uses", err, apierrors.IsConflict, "subnet in use: 1 NetworkAttachment uses it (web-0-net1)")
	if err := controller.NetworkV1alpha1().NetworkAttachments(ns).Delete(ctx, web.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &web.UID}}); err != nil {
		t.Errorf("kos-controller-manager's delete of the pod's attachment: %v", err)
	}
	if err := tenant.NetworkV1alpha1().Subnets(ns).Delete(ctx, "blue", metav1.DeleteOptions{}); err != nil {
		t.Errorf("the delete of the subnet no attachment uses: %v", err)
	}

	// In a namespace being deleted (no kube-controller-manager finishes
	// it here), everyone may delete the pod's attachment.
	mustCreateSubnet(t, admin, newSubnet(leaving, "blue", "10.141.0.0/24", 141))
	podsAttachment(leaving)
	if err := kube.CoreV1().Namespaces().Delete(ctx, leaving, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 30*time.Second, "the tenant deletes the pod's attachment in the namespace being deleted", func(ctx context.Context) error {
		return tenant.NetworkV1alpha1().NetworkAttachments(leaving).Delete(ctx, "web-0-net1", metav1.DeleteOptions{})
	})
	if err := tenant.NetworkV1alpha1().Subnets(leaving).Delete(ctx, "blue", metav1.DeleteOptions{}); err != nil {
		t.Errorf("the delete of the subnet in the namespace being deleted: %v", err)
	}
}

// wantRefusal fails the test unless err is of the kind is and its message
// holds each of parts.
func wantRefusal(t *testing.T, what string, err error, is func(error) bool, parts ...string) {
	t.Helper()
	if err == nil || !is(err) {
		t.Errorf("%s: got %v, want a refusal", what, err)
		return
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("%s: got %q, want it to contain %q", what, err, p)
		}
	}
}

// releasedClusterRole returns the ClusterRole name of a released manifest.
func releasedClusterRole(t *testing.T, path, name string) *rbacv1.ClusterRole {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	docs := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := docs.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("reading %s: %v", path, err)
		}
		var role rbacv1.ClusterRole
		if err := yaml.Unmarshal(doc, &role); err != nil {
			continue // another kind
		}
		if role.Kind == "ClusterRole" && role.Name == name {
			return &role
		}
	}
	t.Fatalf("%s holds no ClusterRole %s", path, name)
	return nil
}

// serviceAccountClient makes the ServiceAccount ns/name (and ns) unless
// they exist,
// binds it to the ClusterRole role in each of the namespaces in, and
// returns a client of kos with a token of it, once kos-apiserver's
// delegated authorization lets it delete attachments there.
func serviceAccountClient(t *testing.T, kube kubernetes.Interface, kos *testenv.KOS, ns, name, role string, in ...string) *kosclient.Clientset {
	t.Helper()
	ctx := context.Background()
	_, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating namespace %s: %v", ns, err)
	}
	_, err = kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating service account %s/%s: %v", ns, name, err)
	}
	for _, where := range in {
		_, err := kube.RbacV1().RoleBindings(where).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: role + "-" + name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("binding %s/%s to %s in %s: %v", ns, name, role, where, err)
		}
	}
	tr, err := kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("requesting a token of %s/%s: %v", ns, name, err)
	}
	cfg := rest.AnonymousClientConfig(kos.DirectConfig)
	cfg.BearerToken = tr.Status.Token
	c := kosClient(t, cfg)
	// RBAC takes the bindings in a moment after they are made, and
	// kos-apiserver remembers a denial for 10 s.
	for _, where := range in {
		poll.Until(t, time.Minute, fmt.Sprintf("%s/%s may delete attachments in %s", ns, name, where), func(ctx context.Context) error {
			err := c.NetworkV1alpha1().NetworkAttachments(where).Delete(ctx, "none", metav1.DeleteOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("deleting a missing attachment: %v", err)
		})
	}
	return c
}
