package kubectlkos

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
)

// clusterScoped are the KOS kinds a namespace's bundle has no place for.
var clusterScoped = []string{"NetworkConfig"}

// TestBundleResourcesAreEveryNamespacedKind keeps kosResources, what the
// bundle lists when discovery fails, in step with the API: a kind added to
// the group and left out here would be missing from bundles and, through
// TestTroubleshooterRoleReadsTheBundle, from the documented role.
func TestBundleResourcesAreEveryNamespacedKind(t *testing.T) {
	t.Parallel()
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	types := scheme.KnownTypes(v1alpha1.SchemeGroupVersion)
	var want []string
	for kind := range types {
		if _, listed := types[kind+"List"]; !listed || slices.Contains(clusterScoped, kind) {
			continue
		}
		plural, _ := meta.UnsafeGuessKindToResource(v1alpha1.SchemeGroupVersion.WithKind(kind))
		want = append(want, plural.Resource)
	}
	slices.Sort(want)
	got := slices.Sorted(slices.Values(kosResources))
	if !slices.Equal(got, want) {
		t.Errorf("kosResources = %v, the API's namespaced resources are %v", got, want)
	}
}

// TestTroubleshooterRoleReadsTheBundle checks that the ClusterRole of
// docs/kubectl-kos-rbac.yaml lets its group list every KOS resource a
// support bundle holds; the end-to-end test proves the same on a cluster,
// this one says so in a second.
func TestTroubleshooterRoleReadsTheBundle(t *testing.T) {
	t.Parallel()
	role := docRole(t, "ClusterRole", "")
	for _, resource := range kosResources {
		if !grants(role.Rules, v1alpha1.GroupName, resource, "list") {
			t.Errorf("ClusterRole kos-troubleshooter does not grant list on %s.%s, which support-bundle -A lists", resource, v1alpha1.GroupName)
		}
	}
}

// grants reports whether a rule allows verb on group's resource.
func grants(rules []rbacv1.PolicyRule, group, resource, verb string) bool {
	for _, r := range rules {
		if (slices.Contains(r.APIGroups, group) || slices.Contains(r.APIGroups, "*")) &&
			(slices.Contains(r.Resources, resource) || slices.Contains(r.Resources, "*")) &&
			(slices.Contains(r.Verbs, verb) || slices.Contains(r.Verbs, "*")) && len(r.ResourceNames) == 0 {
			return true
		}
	}
	return false
}

// TestTroubleshooterRoleRunsTheDatapathCheck checks that the roles of
// docs/kubectl-kos-rbac.yaml give their group what `kubectl kos check -n
// kos-check` does: find a free VNI, make and delete the scratch network in
// kos-check, wait for its attachments and reach the agents' probes.
func TestTroubleshooterRoleRunsTheDatapathCheck(t *testing.T) {
	t.Parallel()
	cluster := docRole(t, "ClusterRole", "").Rules
	scratch := docRole(t, "Role", "kos-check").Rules
	agents := docRole(t, "Role", DefaultAgentNamespace).Rules
	for _, want := range []struct {
		rules                 []rbacv1.PolicyRule
		group, resource, verb string
	}{
		{cluster, v1alpha1.GroupName, "subnets", "list"},
		{cluster, v1alpha1.GroupName, "networkattachments", "get"},
		{cluster, "", "nodes/kos-debug", "create"},
		{cluster, "", "nodes/kos-debug", "get"},
		{scratch, v1alpha1.GroupName, "subnets", "create"},
		{scratch, v1alpha1.GroupName, "subnets", "delete"},
		{scratch, v1alpha1.GroupName, "networkattachments", "create"},
		{scratch, v1alpha1.GroupName, "networkattachments", "delete"},
		{agents, "", "pods", "list"},
		{agents, "", "pods/portforward", "create"},
	} {
		if !grants(want.rules, want.group, want.resource, want.verb) {
			t.Errorf("docs/kubectl-kos-rbac.yaml does not grant %s on %s.%s, which check's datapath part needs", want.verb, want.resource, want.group)
		}
	}
}

// docRole returns the role named kos-troubleshooter of kind (ClusterRole
// or Role, in namespace) of docs/kubectl-kos-rbac.yaml.
func docRole(t *testing.T, kind, namespace string) *rbacv1.ClusterRole {
	t.Helper()
	data, err := os.ReadFile("../../docs/kubectl-kos-rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		// A Role's fields are a ClusterRole's but its aggregation rule.
		var r rbacv1.ClusterRole
		if err := yaml.Unmarshal(doc, &r); err != nil {
			t.Fatal(err)
		}
		if r.Kind == kind && r.Name == "kos-troubleshooter" && r.Namespace == namespace {
			return &r
		}
	}
	t.Fatalf("docs/kubectl-kos-rbac.yaml has no %s kos-troubleshooter in namespace %q", kind, namespace)
	return nil
}
