package apicheck

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kos-sdn/kos/channels"
	"github.com/kos-sdn/kos/tools/poll"
)

// The tenants of TestIntegrationTenantRBAC: each is bound, in namespace
// tenantA only, to one of the main cluster's user-facing ClusterRoles.
const (
	tenantA = "tenant-a"
	tenantB = "tenant-b"
	editor  = "alice" // edit
	viewer  = "bob"   // view
	admin   = "carol" // admin
)

// tenantAccess is one request a tenant may or may not make.
type tenantAccess struct {
	user, verb, resource, namespace string
	allowed                         bool
}

// tenantAccesses: edit and admin work with subnets and attachments in their
// namespace and read their status; view only reads; nobody writes status,
// touches IP locks, or acts in another namespace or cluster-wide.
var tenantAccesses = func() []tenantAccess {
	var out []tenantAccess
	for _, user := range []string{editor, admin} {
		for _, r := range []string{"subnets", "networkattachments"} {
			for _, verb := range []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"} {
				out = append(out, tenantAccess{user, verb, r + kos, tenantA, true})
			}
			out = append(out,
				tenantAccess{user, "get", r + "/status" + kos, tenantA, true},
				tenantAccess{user, "update", r + "/status" + kos, tenantA, false},
				tenantAccess{user, "patch", r + "/status" + kos, tenantA, false},
				tenantAccess{user, "create", r + kos, tenantB, false},
				tenantAccess{user, "get", r + kos, tenantB, false},
				tenantAccess{user, "list", r + kos, "", false},
			)
		}
		for _, verb := range []string{"get", "list", "watch", "create", "update", "delete"} {
			out = append(out, tenantAccess{user, verb, "iplocks" + kos, tenantA, false})
		}
	}
	for _, r := range []string{"subnets", "networkattachments"} {
		for _, verb := range []string{"get", "list", "watch"} {
			out = append(out, tenantAccess{viewer, verb, r + kos, tenantA, true})
		}
		out = append(out, tenantAccess{viewer, "get", r + "/status" + kos, tenantA, true})
		for _, verb := range []string{"create", "update", "patch", "delete", "deletecollection"} {
			out = append(out, tenantAccess{viewer, verb, r + kos, tenantA, false})
		}
		out = append(out,
			tenantAccess{viewer, "update", r + "/status" + kos, tenantA, false},
			tenantAccess{viewer, "get", r + kos, tenantB, false},
		)
	}
	out = append(out, tenantAccess{viewer, "list", "iplocks" + kos, tenantA, false})
	return out
}()

// TestIntegrationTenantRBAC applies the ServiceAccounts and RBAC of the
// releases the bootstrap channel picks, binds three users in tenant-a to the
// cluster's edit, view and admin roles, waits for kube-controller-manager
// to aggregate the KOS ClusterRoles into those, and asks the authorizer about
// every access of the table. Only servers running the controller manager
// aggregate (Kubernetes 1.29 is built without one here; aggregation has not
// changed since 1.9).
func TestIntegrationTenantRBAC(t *testing.T) {
	servers := testServers(t)
	ctx := context.Background()
	releases, err := channels.Load(ctx, channels.NewFetcher(), filepath.Join(repoRoot, "bootstrap-channel.yaml"))
	if err != nil {
		t.Fatalf("loading the bootstrap channel: %v", err)
	}
	checked := 0
	for _, s := range servers {
		if !s.aggregates {
			continue
		}
		checked++
		t.Run(s.String(), func(t *testing.T) {
			applyIdentity(t, s, releases)
			for _, ns := range []string{tenantA, tenantB} {
				_, err := s.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
				if err != nil && !apierrors.IsAlreadyExists(err) {
					t.Fatal(err)
				}
			}
			for user, role := range map[string]string{editor: "edit", viewer: "view", admin: "admin"} {
				rb := &rbacv1.RoleBinding{
					ObjectMeta: metav1.ObjectMeta{Namespace: tenantA, Name: user + "-" + role},
					RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
					Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
				}
				_, err := s.kube.RbacV1().RoleBindings(tenantA).Create(ctx, rb, metav1.CreateOptions{})
				if err != nil && !apierrors.IsAlreadyExists(err) {
					t.Fatal(err)
				}
			}
			// Aggregation is a controller's work: wait for its outcome in
			// each role.
			began := time.Now()
			poll.Until(t, time.Minute, "the KOS rules aggregated into edit, view and admin", func(ctx context.Context) error {
				for _, a := range []tenantAccess{{editor, "create", "subnets" + kos, tenantA, true}, {viewer, "list", "networkattachments" + kos, tenantA, true}, {admin, "create", "networkattachments" + kos, tenantA, true}} {
					if ok, reason := authorizeUser(t, s, a); !ok {
						return fmt.Errorf("%s: not allowed yet (%s)", a, reason)
					}
				}
				return nil
			})
			t.Logf("aggregated in %s", time.Since(began).Round(10*time.Millisecond))
			for _, a := range tenantAccesses {
				if got, reason := authorizeUser(t, s, a); got != a.allowed {
					t.Errorf("%s: allowed %t, want %t (%s)", a, got, a.allowed, reason)
				}
			}
		})
	}
	if checked == 0 {
		t.Fatal("no test server runs kube-controller-manager, which aggregates ClusterRoles")
	}
}

// authorizeUser asks s whether the tenant's access is allowed, and why.
func authorizeUser(t *testing.T, s *server, a tenantAccess) (bool, string) {
	t.Helper()
	resource, group, _ := strings.Cut(a.resource, ".")
	resource, subresource, _ := strings.Cut(resource, "/")
	review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   a.user,
		Groups: []string{"system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace:   a.namespace,
			Verb:        a.verb,
			Group:       group,
			Resource:    resource,
			Subresource: subresource,
		},
	}}
	got, err := s.kube.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), review, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SubjectAccessReview for %s: %v", a, err)
	}
	reason := got.Status.Reason
	if reason == "" {
		reason = "no rule allows it"
	}
	return got.Status.Allowed, reason
}

func (a tenantAccess) String() string {
	where := "cluster-wide"
	if a.namespace != "" {
		where = "in " + a.namespace
	}
	return fmt.Sprintf("%s %s %s %s", a.user, a.verb, a.resource, where)
}
