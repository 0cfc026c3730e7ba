package apiserver_test

// This file checks that kos-apiserver delegates authorization to
// kube-apiserver's RBAC.

import (
	"context"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/tools/testenv"
)

func testDelegatedAuthorization(t *testing.T, kos *testenv.KOS) {
	env := testenv.Shared(t)
	ctx := context.Background()
	denied, allowed := newNamespace(t), newNamespace(t)
	_, aliceAggregated, err := env.NewUserKubeconfig("alice")
	if err != nil {
		t.Fatalf("creating a user: %v", err)
	}
	aliceDirect := rest.CopyConfig(kos.DirectConfig)
	aliceDirect.TLSClientConfig.CertData = aliceAggregated.TLSClientConfig.CertData
	aliceDirect.TLSClientConfig.KeyData = aliceAggregated.TLSClientConfig.KeyData
	clients := apiClients{direct: kosClient(t, aliceDirect), aggregated: kosClient(t, aliceAggregated)}

	// Without any grant, both paths refuse; directly, kos-apiserver refuses
	// after asking the main cluster.
	for name, c := range clients.each() {
		_, err := c.NetworkV1alpha1().Subnets(denied).List(ctx, metav1.ListOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("listing %s without rights: got %v, want Forbidden", name, err)
		} else if !strings.Contains(err.Error(), `User "alice" cannot list resource "subnets" in API group "network.example.com"`) {
			t.Errorf("listing %s without rights: error %q does not say who may not do what", name, err)
		}
	}

	kube, err := kubernetes.NewForConfig(env.RESTConfig)
	if err != nil {
		t.Fatalf("creating a client: %v", err)
	}
	_, err = kube.RbacV1().Roles(allowed).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "subnet-reader"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{v1alpha1.GroupName}, Resources: []string{"subnets"}, Verbs: []string{"get", "list"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating a role: %v", err)
	}
	_, err = kube.RbacV1().RoleBindings(allowed).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "alice-reads-subnets"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "subnet-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "alice"}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("binding the role: %v", err)
	}
	for name, c := range clients.each() {
		// RBAC in the main cluster takes effect within moments.
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
			_, err := c.NetworkV1alpha1().Subnets(allowed).List(ctx, metav1.ListOptions{})
			return err == nil, nil
		})
		if err != nil {
			t.Errorf("listing %s with a grant: still refused after 20s", name)
		}
		_, err = c.NetworkV1alpha1().Subnets(allowed).Create(ctx, newSubnet(allowed, "s1", "10.70.0.0/24", 70), metav1.CreateOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("creating %s with a read-only grant: got %v, want Forbidden", name, err)
		}
	}
}
