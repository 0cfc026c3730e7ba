package apicheck

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kos-sdn/kos/channels"
)

// access is one request a ServiceAccount may or may not make.
type access struct {
	// sa names the ServiceAccount, in its namespace (saNamespace).
	sa string
	// verb and resource say what is done: resource is
	// "resource[/subresource][.group]", such as
	// "networkattachments/status.network.example.com".
	verb, resource string
	// namespace and name say to what; both may be empty.
	namespace, name string
	// allowed is whether RBAC must allow it; since, when not 0, is the
	// first Kubernetes minor version whose release grants it.
	allowed bool
	since   uint64
}

const (
	apiserverSA = "kos-apiserver"
	etcdSA      = "kos-etcd"
	managerSA   = "kos-controller-manager"
	agentSA     = "kos-agent"
	pkiSA       = "kos-pki"

	kos = ".network.example.com"
)

// saNamespace returns the namespace of a component's ServiceAccount in the
// newest releases: the agent's is kos-node from kos-agent 0.2.0, the
// others' example-com.
func saNamespace(sa string) string {
	if sa == agentSA {
		return "kos-node"
	}
	return namespace
}

// accesses is what each component must and must not be able to do: what
// its code does, and the nearest things it does not.
var accesses = []access{
	// kos-apiserver: delegated authentication and authorization.
	{sa: apiserverSA, verb: "create", resource: "tokenreviews.authentication.k8s.io", allowed: true},
	{sa: apiserverSA, verb: "create", resource: "subjectaccessreviews.authorization.k8s.io", allowed: true},
	{sa: apiserverSA, verb: "get", resource: "configmaps", namespace: "kube-system", name: "extension-apiserver-authentication", allowed: true},
	{sa: apiserverSA, verb: "watch", resource: "configmaps", namespace: "kube-system", name: "extension-apiserver-authentication", allowed: true},
	{sa: apiserverSA, verb: "get", resource: "configmaps", namespace: "kube-system", name: "kube-proxy"},
	{sa: apiserverSA, verb: "update", resource: "configmaps", namespace: "kube-system", name: "extension-apiserver-authentication"},
	// kos-apiserver: admission and API Priority and Fairness.
	{sa: apiserverSA, verb: "list", resource: "namespaces", allowed: true},
	{sa: apiserverSA, verb: "watch", resource: "namespaces", allowed: true},
	{sa: apiserverSA, verb: "create", resource: "namespaces"},
	{sa: apiserverSA, verb: "delete", resource: "namespaces", name: namespace},
	{sa: apiserverSA, verb: "list", resource: "mutatingwebhookconfigurations.admissionregistration.k8s.io", allowed: true},
	{sa: apiserverSA, verb: "watch", resource: "validatingwebhookconfigurations.admissionregistration.k8s.io", allowed: true},
	{sa: apiserverSA, verb: "list", resource: "validatingadmissionpolicies.admissionregistration.k8s.io", allowed: true, since: 30},
	{sa: apiserverSA, verb: "watch", resource: "validatingadmissionpolicybindings.admissionregistration.k8s.io", allowed: true, since: 30},
	{sa: apiserverSA, verb: "create", resource: "validatingwebhookconfigurations.admissionregistration.k8s.io"},
	{sa: apiserverSA, verb: "list", resource: "flowschemas.flowcontrol.apiserver.k8s.io", allowed: true},
	{sa: apiserverSA, verb: "watch", resource: "prioritylevelconfigurations.flowcontrol.apiserver.k8s.io", allowed: true},
	{sa: apiserverSA, verb: "patch", resource: "flowschemas/status.flowcontrol.apiserver.k8s.io", name: "global-default"},
	{sa: apiserverSA, verb: "delete", resource: "prioritylevelconfigurations.flowcontrol.apiserver.k8s.io", name: "global-default"},
	// kos-apiserver: the kubelet mounts its certificates; the signer
	// kos-pki makes them and sets the APIService's CA bundle.
	{sa: apiserverSA, verb: "get", resource: "apiservices.apiregistration.k8s.io", name: "v1alpha1.network.example.com"},
	{sa: apiserverSA, verb: "patch", resource: "apiservices.apiregistration.k8s.io", name: "v1alpha1.network.example.com"},
	{sa: apiserverSA, verb: "create", resource: "secrets", namespace: namespace},
	{sa: apiserverSA, verb: "get", resource: "secrets", namespace: namespace, name: "kos-ca"},
	{sa: apiserverSA, verb: "get", resource: "secrets", namespace: namespace, name: "kos-etcd-client"},
	{sa: apiserverSA, verb: "get", resource: "secrets", namespace: namespace, name: "kos-apiserver-serving"},
	{sa: apiserverSA, verb: "update", resource: "secrets", namespace: namespace, name: "kos-apiserver-serving"},
	{sa: apiserverSA, verb: "list", resource: "secrets", namespace: namespace},
	{sa: apiserverSA, verb: "get", resource: "secrets", namespace: "kube-system", name: "kos-ca"},
	// kos-apiserver serves the KOS API; it does not use it.
	{sa: apiserverSA, verb: "list", resource: "subnets" + kos},
	{sa: apiserverSA, verb: "create", resource: "pods", namespace: namespace},

	// kos-etcd: nothing; the kubelet mounts its certificates.
	{sa: etcdSA, verb: "create", resource: "secrets", namespace: namespace},
	{sa: etcdSA, verb: "get", resource: "secrets", namespace: namespace, name: "kos-ca"},
	{sa: etcdSA, verb: "get", resource: "secrets", namespace: namespace, name: "kos-etcd-server"},
	{sa: etcdSA, verb: "update", resource: "secrets", namespace: namespace, name: "kos-etcd-peer"},
	{sa: etcdSA, verb: "list", resource: "secrets", namespace: namespace},
	{sa: etcdSA, verb: "patch", resource: "apiservices.apiregistration.k8s.io", name: "v1alpha1.network.example.com"},
	{sa: etcdSA, verb: "create", resource: "tokenreviews.authentication.k8s.io"},

	// kos-pki, the signer: the only reader of the CA's key.
	{sa: pkiSA, verb: "create", resource: "secrets", namespace: namespace, allowed: true},
	{sa: pkiSA, verb: "get", resource: "secrets", namespace: namespace, name: "kos-ca", allowed: true},
	{sa: pkiSA, verb: "get", resource: "secrets", namespace: namespace, name: "kos-etcd-server", allowed: true},
	{sa: pkiSA, verb: "get", resource: "secrets", namespace: namespace, name: "kos-etcd-peer", allowed: true},
	{sa: pkiSA, verb: "get", resource: "secrets", namespace: namespace, name: "kos-etcd-client", allowed: true},
	{sa: pkiSA, verb: "get", resource: "secrets", namespace: namespace, name: "kos-apiserver-serving", allowed: true},
	{sa: pkiSA, verb: "update", resource: "secrets", namespace: namespace, name: "kos-etcd-server", allowed: true},
	{sa: pkiSA, verb: "update", resource: "secrets", namespace: namespace, name: "kos-etcd-peer", allowed: true},
	{sa: pkiSA, verb: "update", resource: "secrets", namespace: namespace, name: "kos-etcd-client", allowed: true},
	{sa: pkiSA, verb: "update", resource: "secrets", namespace: namespace, name: "kos-apiserver-serving", allowed: true},
	{sa: pkiSA, verb: "get", resource: "apiservices.apiregistration.k8s.io", name: "v1alpha1.network.example.com", allowed: true},
	{sa: pkiSA, verb: "patch", resource: "apiservices.apiregistration.k8s.io", name: "v1alpha1.network.example.com", allowed: true},
	{sa: pkiSA, verb: "update", resource: "secrets", namespace: namespace, name: "kos-ca"},
	{sa: pkiSA, verb: "delete", resource: "secrets", namespace: namespace, name: "kos-ca"},
	{sa: pkiSA, verb: "get", resource: "secrets", namespace: namespace, name: "default-token"},
	{sa: pkiSA, verb: "list", resource: "secrets", namespace: namespace},
	{sa: pkiSA, verb: "watch", resource: "secrets", namespace: namespace},
	{sa: pkiSA, verb: "get", resource: "secrets", namespace: "kube-system", name: "kos-ca"},
	{sa: pkiSA, verb: "delete", resource: "apiservices.apiregistration.k8s.io", name: "v1alpha1.network.example.com"},
	{sa: pkiSA, verb: "patch", resource: "apiservices.apiregistration.k8s.io", name: "v1.apps"},
	{sa: pkiSA, verb: "list", resource: "subnets" + kos},
	// kos-pki (0.4.0): the backup CronJob's state, read only, in its
	// namespace (--etcd-backup-cronjob).
	{sa: pkiSA, verb: "get", resource: "cronjobs.batch", namespace: namespace, name: "kos-etcd-backup", allowed: true},
	{sa: pkiSA, verb: "list", resource: "cronjobs.batch", namespace: namespace, allowed: true},
	{sa: pkiSA, verb: "watch", resource: "jobs.batch", namespace: namespace, allowed: true},
	{sa: pkiSA, verb: "list", resource: "jobs.batch"},
	{sa: pkiSA, verb: "create", resource: "jobs.batch", namespace: namespace},
	{sa: pkiSA, verb: "update", resource: "cronjobs.batch", namespace: namespace, name: "kos-etcd-backup"},
	{sa: pkiSA, verb: "list", resource: "pods", namespace: namespace},

	// kos-controller-manager: the subnet validator.
	{sa: managerSA, verb: "list", resource: "subnets" + kos, allowed: true},
	{sa: managerSA, verb: "watch", resource: "subnets" + kos, allowed: true},
	{sa: managerSA, verb: "update", resource: "subnets/status" + kos, namespace: "tenant-a", name: "net1", allowed: true},
	{sa: managerSA, verb: "update", resource: "subnets" + kos, namespace: "tenant-a", name: "net1"},
	{sa: managerSA, verb: "delete", resource: "subnets" + kos, namespace: "tenant-a", name: "net1"},
	{sa: managerSA, verb: "create", resource: "subnets" + kos, namespace: "tenant-a"},
	// kos-controller-manager: IPAM.
	{sa: managerSA, verb: "get", resource: "networkattachments" + kos, namespace: "tenant-a", name: "a1", allowed: true},
	{sa: managerSA, verb: "list", resource: "networkattachments" + kos, allowed: true},
	{sa: managerSA, verb: "watch", resource: "networkattachments" + kos, allowed: true},
	{sa: managerSA, verb: "update", resource: "networkattachments/status" + kos, namespace: "tenant-a", name: "a1", allowed: true},
	{sa: managerSA, verb: "patch", resource: "networkattachments/status" + kos, namespace: "tenant-a", name: "a1"},
	{sa: managerSA, verb: "update", resource: "networkattachments" + kos, namespace: "tenant-a", name: "a1"},
	// kos-controller-manager: the pod-network controller (0.3.0) makes
	// and removes the attachments of pods' interfaces, reading pods and
	// NetworkAttachmentDefinitions.
	{sa: managerSA, verb: "create", resource: "networkattachments" + kos, namespace: "tenant-a", allowed: true},
	{sa: managerSA, verb: "delete", resource: "networkattachments" + kos, namespace: "tenant-a", name: "a1", allowed: true},
	{sa: managerSA, verb: "list", resource: "pods", allowed: true},
	{sa: managerSA, verb: "watch", resource: "pods", allowed: true},
	{sa: managerSA, verb: "get", resource: "pods", namespace: "tenant-a", name: "web-0", allowed: true},
	{sa: managerSA, verb: "update", resource: "pods", namespace: "tenant-a", name: "web-0"},
	{sa: managerSA, verb: "list", resource: "network-attachment-definitions.k8s.cni.cncf.io", allowed: true},
	{sa: managerSA, verb: "watch", resource: "network-attachment-definitions.k8s.cni.cncf.io", allowed: true},
	{sa: managerSA, verb: "create", resource: "network-attachment-definitions.k8s.cni.cncf.io", namespace: "tenant-a"},
	{sa: managerSA, verb: "get", resource: "iplocks" + kos, namespace: "tenant-a", name: "v1-1-10-0-0-5", allowed: true},
	{sa: managerSA, verb: "list", resource: "iplocks" + kos, allowed: true},
	{sa: managerSA, verb: "watch", resource: "iplocks" + kos, allowed: true},
	{sa: managerSA, verb: "create", resource: "iplocks" + kos, namespace: "tenant-a", allowed: true},
	{sa: managerSA, verb: "delete", resource: "iplocks" + kos, namespace: "tenant-a", name: "v1-1-10-0-0-5", allowed: true},
	{sa: managerSA, verb: "update", resource: "iplocks" + kos, namespace: "tenant-a", name: "v1-1-10-0-0-5"},
	// kos-controller-manager: Events and leader election.
	{sa: managerSA, verb: "create", resource: "events", namespace: "tenant-a", allowed: true},
	{sa: managerSA, verb: "patch", resource: "events", namespace: "tenant-a", name: "a1.17f", allowed: true},
	{sa: managerSA, verb: "delete", resource: "events", namespace: "tenant-a", name: "a1.17f"},
	{sa: managerSA, verb: "create", resource: "leases.coordination.k8s.io", namespace: namespace, allowed: true},
	{sa: managerSA, verb: "get", resource: "leases.coordination.k8s.io", namespace: namespace, name: "kos-controller-manager", allowed: true},
	{sa: managerSA, verb: "update", resource: "leases.coordination.k8s.io", namespace: namespace, name: "kos-controller-manager", allowed: true},
	{sa: managerSA, verb: "update", resource: "leases.coordination.k8s.io", namespace: namespace, name: "channels"},
	{sa: managerSA, verb: "get", resource: "leases.coordination.k8s.io", namespace: "kube-system", name: "kos-controller-manager"},
	{sa: managerSA, verb: "delete", resource: "leases.coordination.k8s.io", namespace: namespace, name: "kos-controller-manager"},
	{sa: managerSA, verb: "get", resource: "secrets", namespace: namespace, name: "kos-ca"},
	{sa: managerSA, verb: "list", resource: "secrets"},
	{sa: managerSA, verb: "create", resource: "pods", namespace: namespace},

	// kos-agent: its node's attachments and their status, Events.
	{sa: agentSA, verb: "get", resource: "networkattachments" + kos, namespace: "tenant-a", name: "a1", allowed: true},
	{sa: agentSA, verb: "list", resource: "networkattachments" + kos, allowed: true},
	{sa: agentSA, verb: "watch", resource: "networkattachments" + kos, namespace: "tenant-a", allowed: true},
	{sa: agentSA, verb: "update", resource: "networkattachments/status" + kos, namespace: "tenant-a", name: "a1", allowed: true},
	{sa: agentSA, verb: "update", resource: "networkattachments" + kos, namespace: "tenant-a", name: "a1"},
	{sa: agentSA, verb: "delete", resource: "networkattachments" + kos, namespace: "tenant-a", name: "a1"},
	// kos-agent: the subnet of a pod's interface (0.3.0), by name.
	{sa: agentSA, verb: "get", resource: "subnets" + kos, namespace: "tenant-a", name: "net1", allowed: true},
	{sa: agentSA, verb: "list", resource: "subnets" + kos},
	{sa: agentSA, verb: "create", resource: "networkattachments" + kos, namespace: "tenant-a"},
	{sa: agentSA, verb: "list", resource: "pods"},
	{sa: agentSA, verb: "update", resource: "subnets/status" + kos, namespace: "tenant-a", name: "net1"},
	{sa: agentSA, verb: "create", resource: "iplocks" + kos, namespace: "tenant-a"},
	{sa: agentSA, verb: "create", resource: "events", namespace: "tenant-a", allowed: true},
	{sa: agentSA, verb: "patch", resource: "events", namespace: "tenant-a", name: "a1.17f", allowed: true},
	{sa: agentSA, verb: "get", resource: "secrets", namespace: namespace, name: "kos-ca"},
	{sa: agentSA, verb: "list", resource: "secrets"},
	{sa: agentSA, verb: "update", resource: "nodes", name: "node-1"},
	{sa: agentSA, verb: "create", resource: "leases.coordination.k8s.io", namespace: namespace},
}

// TestIntegrationRBAC applies the ServiceAccounts and RBAC of the releases
// channels picks from the bootstrap channel on each server, for real, and
// asks the server's authorizer (SubjectAccessReview) about every access of
// the table, as the ServiceAccount with its groups.
func TestIntegrationRBAC(t *testing.T) {
	servers := testServers(t)
	ctx := context.Background()
	releases, err := channels.Load(ctx, channels.NewFetcher(), filepath.Join(repoRoot, "bootstrap-channel.yaml"))
	if err != nil {
		t.Fatalf("loading the bootstrap channel: %v", err)
	}
	for _, s := range servers {
		t.Run(s.String(), func(t *testing.T) {
			applyIdentity(t, s, releases)
			for _, a := range accesses {
				want := a.allowed && s.version.Minor >= a.since
				got, reason := authorize(t, s, a)
				if got != want {
					t.Errorf("%s: allowed %t, want %t (%s)", a, got, want, reason)
				}
			}
		})
	}
}

// applyIdentity applies, for real, the namespaces, ServiceAccounts and RBAC
// objects of the releases channels picks for s.
func applyIdentity(t *testing.T, s *server, releases []*channels.Addon) {
	t.Helper()
	ctx := context.Background()
	client, err := channels.NewClient(s.env.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	fetcher := channels.NewFetcher()
	for _, a := range channels.Select(releases, s.version) {
		data, err := fetcher.FetchManifest(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := channels.DecodeObjects(data)
		if err != nil {
			t.Fatalf("decoding %s: %v", a.Manifest, err)
		}
		channels.StampLabels(objs, a.Selector)
		for _, u := range objs {
			if channels.PhaseOf(u.GroupVersionKind().GroupKind()) > channels.PhaseIdentity {
				continue
			}
			if err := apply(ctx, client, u, false); err != nil {
				t.Fatalf("applying %s of %s: %v", describeObject(u), a.Manifest, err)
			}
		}
	}
}

// authorize asks s whether the access is allowed, and why.
func authorize(t *testing.T, s *server, a access) (bool, string) {
	t.Helper()
	resource, group, _ := strings.Cut(a.resource, ".")
	resource, subresource, _ := strings.Cut(resource, "/")
	review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   "system:serviceaccount:" + saNamespace(a.sa) + ":" + a.sa,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + saNamespace(a.sa), "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace:   a.namespace,
			Verb:        a.verb,
			Group:       group,
			Resource:    resource,
			Subresource: subresource,
			Name:        a.name,
		},
	}}
	got, err := s.kube.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), review, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SubjectAccessReview for %s: %v", a, err)
	}
	reason := got.Status.Reason
	if got.Status.EvaluationError != "" {
		reason += "; evaluation error: " + got.Status.EvaluationError
	}
	if reason == "" {
		reason = "no rule allows it"
	}
	return got.Status.Allowed, reason
}

func (a access) String() string {
	target := a.resource
	if a.name != "" {
		target += " " + a.name
	}
	if a.namespace != "" {
		target += " in " + a.namespace
	}
	return fmt.Sprintf("%s %s %s", a.sa, a.verb, target)
}
