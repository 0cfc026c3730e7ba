package apiserver_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/kos-sdn/kos/tools/poll"
	"github.com/kos-sdn/kos/tools/testenv"
)

// tenantPolicyFile is the ValidatingAdmissionPolicy example of
// docs/security.md, relative to this package.
const tenantPolicyFile = "../../docs/examples/tenant-networks-policy.yaml"

// TestIntegrationTenantPolicy creates the documented ValidatingAdmissionPolicy,
// its binding and its example tenant namespace in the main cluster, and
// checks that kos-apiserver applies the policy: a Subnet outside the
// tenant's VNIs and an attachment on a node not the tenant's are refused
// with the policy's messages, good ones are created, and a namespace that
// is no tenant is not restricted.
func TestIntegrationTenantPolicy(t *testing.T) {
	env := testenv.Shared(t)
	ctx := context.Background()
	kos := startKOS(t, testenv.KOSOptions{Name: "policy"})
	kube, err := kubernetes.NewForConfig(env.RESTConfig)
	if err != nil {
		t.Fatalf("creating a client: %v", err)
	}
	objs := readManifest(t, tenantPolicyFile)
	if len(objs) != 3 {
		t.Fatalf("%s holds %d objects, want a policy, a binding and a namespace", tenantPolicyFile, len(objs))
	}
	policy, ok1 := objs[0].(*admissionregistrationv1.ValidatingAdmissionPolicy)
	binding, ok2 := objs[1].(*admissionregistrationv1.ValidatingAdmissionPolicyBinding)
	tenantNS, ok3 := objs[2].(*corev1.Namespace)
	if !ok1 || !ok2 || !ok3 {
		t.Fatalf("%s holds %T, %T, %T; want a policy, a binding and a namespace", tenantPolicyFile, objs[0], objs[1], objs[2])
	}
	// The policy and binding are the cluster's, shared by -count runs; the
	// namespace is made anew each time.
	policies := kube.AdmissionregistrationV1().ValidatingAdmissionPolicies()
	if _, err := policies.Create(ctx, policy, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating the policy: %v", err)
	}
	bindings := kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings()
	if _, err := bindings.Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating the binding: %v", err)
	}
	t.Cleanup(func() {
		_ = bindings.Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
		_ = policies.Delete(context.Background(), policy.Name, metav1.DeleteOptions{})
	})
	tenantNS.GenerateName, tenantNS.Name = tenantNS.Name+"-", ""
	created, err := kube.CoreV1().Namespaces().Create(ctx, tenantNS, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating the tenant namespace: %v", err)
	}
	tenant := created.Name
	other := newNamespace(t)
	aggregated, direct := kosClient(t, env.RESTConfig), kosClient(t, kos.DirectConfig)

	// kos-apiserver's informers see the policy and binding within moments.
	vniRefusal := fmt.Sprintf("VNI 300 is outside the VNIs 100-199 of namespace %s", tenant)
	poll.Until(t, 30*time.Second, "kos-apiserver applying the policy", func(ctx context.Context) error {
		_, err := aggregated.NetworkV1alpha1().Subnets(tenant).Create(ctx, newSubnet(tenant, "far", "10.93.0.0/24", 300), metav1.CreateOptions{})
		if err == nil {
			return errors.New("a Subnet with VNI 300 was created in the tenant namespace")
		}
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), vniRefusal) {
			return err
		}
		return nil
	})
	_, err = direct.NetworkV1alpha1().Subnets(tenant).Create(ctx, newSubnet(tenant, "far", "10.93.0.0/24", 300), metav1.CreateOptions{})
	wantPolicyRefusal(t, err, `subnets.network.example.com "far" is forbidden: ValidatingAdmissionPolicy 'kos-tenant-networks' with binding 'kos-tenant-networks' denied request: `+vniRefusal)

	mustCreateSubnet(t, aggregated, newSubnet(tenant, "near", "10.94.0.0/24", 150))
	mustCreateAttachment(t, aggregated, newAttachment(tenant, "on-a", "node-a", "near"))
	mustCreateAttachment(t, direct, newAttachment(tenant, "on-b", "node-b", "near"))
	for path, c := range map[string]creator{"aggregated": {aggregated, tenant}, "direct": {direct, tenant}} {
		_, err := c.c.NetworkV1alpha1().NetworkAttachments(tenant).Create(ctx, newAttachment(tenant, "on-c-"+path, "node-c", "near"), metav1.CreateOptions{})
		wantPolicyRefusal(t, err, fmt.Sprintf("node node-c is not among the nodes of namespace %s (annotation kos.example.com/nodes: node-a,node-b)", tenant))
	}

	// A namespace that is no tenant is not restricted.
	mustCreateSubnet(t, aggregated, newSubnet(other, "far", "10.95.0.0/24", 301))
	mustCreateAttachment(t, aggregated, newAttachment(other, "on-c", "node-c", "far"))
}

// wantPolicyRefusal fails the test unless err is a Forbidden that says want.
func wantPolicyRefusal(t *testing.T, err error, want string) {
	t.Helper()
	if !apierrors.IsForbidden(err) {
		t.Fatalf("got %v, want Forbidden", err)
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("refusal %q does not say %q", err, want)
	}
}

// readManifest decodes the objects of a YAML file of the tree, in order.
func readManifest(t *testing.T, path string) []runtime.Object {
	t.Helper()
	data, err := os.ReadFile(filepath.FromSlash(path))
	if err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var objs []runtime.Object
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatalf("reading %s: %v", path, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("decoding an object of %s: %v", path, err)
		}
		objs = append(objs, obj)
	}
}
