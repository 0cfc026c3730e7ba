package controllermanager_test

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

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/tools/poll"
	"github.com/kos-sdn/kos/tools/testenv"
)

// underlayReportFile is the RBAC and policy example of docs/install.md's
// network configuration, relative to this package.
const underlayReportFile = "../../docs/examples/kos-agent-underlay-report.yaml"

// TestIntegrationUnderlayReportPolicy applies the documented RBAC and
// ValidatingAdmissionPolicy to the shared kube-apiserver and checks, with
// the token of a kos-agent pod on one node, that the agent may write its
// own node's underlay annotation and nothing else of any Node.
func TestIntegrationUnderlayReportPolicy(t *testing.T) {
	env := testenv.Shared(t)
	ctx := context.Background()
	kube, err := kubernetes.NewForConfig(env.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	create := func(what string, err error) {
		t.Helper()
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("creating %s: %v", what, err)
		}
	}
	for _, obj := range readObjects(t, underlayReportFile) {
		switch o := obj.(type) {
		case *rbacv1.ClusterRole:
			_, err = kube.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRoleBinding:
			_, err = kube.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
		case *admissionregistrationv1.ValidatingAdmissionPolicy:
			_, err = kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, o, metav1.CreateOptions{})
		case *admissionregistrationv1.ValidatingAdmissionPolicyBinding:
			_, err = kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, o, metav1.CreateOptions{})
		default:
			t.Fatalf("%s holds a %T", underlayReportFile, obj)
		}
		create(fmt.Sprintf("%T", obj), err)
	}

	const agentNS, agentSA = "kos-node", "kos-agent"
	_, err = kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agentNS}}, metav1.CreateOptions{})
	create("namespace "+agentNS, err)
	_, err = kube.CoreV1().ServiceAccounts(agentNS).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: agentSA}}, metav1.CreateOptions{})
	create("the agent's service account", err)
	suffix := fmt.Sprint(time.Now().UnixNano())
	own, other := "ur-own-"+suffix, "ur-other-"+suffix
	for _, n := range []string{own, other} {
		_, err := kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{})
		create("node "+n, err)
		t.Cleanup(func() { _ = kube.CoreV1().Nodes().Delete(context.Background(), n, metav1.DeleteOptions{}) })
	}
	pod, err := kube.CoreV1().Pods(agentNS).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "kos-agent-"},
		Spec: corev1.PodSpec{
			NodeName:           own,
			ServiceAccountName: agentSA,
			Containers:         []corev1.Container{{Name: "kos-agent", Image: "kos.example.com/kos-agent:never-runs"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating the agent's pod: %v", err)
	}
	t.Cleanup(func() {
		zero := int64(0)
		_ = kube.CoreV1().Pods(agentNS).Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	})
	client := func(bound *authenticationv1.BoundObjectReference) kubernetes.Interface {
		t.Helper()
		expiry := int64(600)
		tr, err := kube.CoreV1().ServiceAccounts(agentNS).CreateToken(ctx, agentSA, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry, BoundObjectRef: bound},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("requesting a token: %v", err)
		}
		cfg := rest.AnonymousClientConfig(env.RESTConfig)
		cfg.BearerToken = tr.Status.Token
		c, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	agent := client(&authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID})
	unbound := client(nil)
	patch := func(c kubernetes.Interface, node, p string) error {
		_, err := c.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(p), metav1.PatchOptions{})
		return err
	}
	report := func(mtu string) string {
		return fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, v1alpha1.UnderlayMTUAnnotation, mtu)
	}

	// The policy takes effect once kube-apiserver's informers have it. Each
	// probe sets another value: a patch that changes nothing passes.
	probe := 0
	poll.Until(t, time.Minute, "the policy refuses a label", func(context.Context) error {
		probe++
		if err := patch(agent, own, fmt.Sprintf(`{"metadata":{"labels":{"probe":"%d"}}}`, probe)); err == nil {
			return errors.New("a label was let through")
		}
		return nil
	})

	const notOwn = "kos-agent may change only the Node its pod runs on"
	const onlyReport = "kos-agent may change only its Node's annotation network.example.com/underlay-mtu"
	tests := []struct {
		name  string
		c     kubernetes.Interface
		node  string
		patch string
		want  string // a part of the refusal; "" for success
	}{
		{"own node's report", agent, own, report("1500"), ""},
		{"own node's report again", agent, own, report("9000"), ""},
		{"another node's report", agent, other, report("1500"), notOwn},
		{"own node's label", agent, own, `{"metadata":{"labels":{"role":"db"}}}`, onlyReport},
		{"own node's taint", agent, own, `{"spec":{"taints":[{"key":"k","effect":"NoSchedule"}]}}`, onlyReport},
		{"own node's other annotation", agent, own, `{"metadata":{"annotations":{"other":"x"}}}`, onlyReport},
		{"removing the report", agent, own, fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, v1alpha1.UnderlayMTUAnnotation), ""},
		{"a token bound to no pod", unbound, own, report("1500"), notOwn},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := patch(tc.c, tc.node, tc.patch)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("patch: %v, want success", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("patch: got %v, want a refusal saying %q", err, tc.want)
			}
		})
	}
}

// readObjects decodes the Kubernetes objects of a multi-document YAML file.
func readObjects(t *testing.T, path string) []runtime.Object {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
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
