package agent_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kos-sdn/kos/tools/testenv"
)

// The namespaces and ServiceAccounts of the shipped kos-agent and
// kos-controller-manager (release 0.3.0).
const (
	agentNamespace, agentServiceAccount     = "kos-node", "kos-agent"
	managerNamespace, managerServiceAccount = "example-com", "kos-controller-manager"
)

// benchIdentities gives the benchmark's agents and controller manager the
// identities the shipped ones have. It creates, in the main cluster, the
// Namespaces, ServiceAccounts and RBAC objects of the 0.3.0 manifests of
// kos-agent and kos-controller-manager; a Node per node of nodes and a pod
// of the agent on each (which never runs: nothing schedules or starts it);
// and returns a token per node bound to that node's pod, as the kubelet
// gives a kos-agent pod (its user extra names the node, which kos-apiserver's
// NodeRestriction reads), and a token of the controller manager's
// ServiceAccount (not bound to a pod: no pod of it runs here).
func benchIdentities(b *testing.B, nodes []string) (agentTokens map[string]string, managerToken string) {
	b.Helper()
	ctx := context.Background()
	kube, err := kubernetes.NewForConfig(testenv.Shared(b).RESTConfig)
	if err != nil {
		b.Fatal(err)
	}
	for _, addon := range []string{"kos-agent", "kos-controller-manager"} {
		applyAccess(b, kube, addon)
	}
	// An hour: longer than the benchmark runs.
	expiry := int64(3600)
	var mu sync.Mutex
	agentTokens = map[string]string{}
	work := make(chan string)
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for w := range errs {
		wg.Go(func() {
			for node := range work {
				token, err := agentToken(ctx, kube, node, expiry)
				if err != nil {
					errs[w] = errors.Join(errs[w], err)
					continue
				}
				mu.Lock()
				agentTokens[node] = token
				mu.Unlock()
			}
		})
	}
	for _, n := range nodes {
		work <- n
	}
	close(work)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		b.Fatal(err)
	}
	tr, err := kube.CoreV1().ServiceAccounts(managerNamespace).CreateToken(ctx, managerServiceAccount, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry},
	}, metav1.CreateOptions{})
	if err != nil {
		b.Fatalf("requesting a token of the controller manager: %v", err)
	}
	return agentTokens, tr.Status.Token
}

// agentToken creates node and a pod of kos-agent on it, and returns a
// token of the agent's ServiceAccount bound to that pod.
func agentToken(ctx context.Context, kube kubernetes.Interface, node string, expiry int64) (string, error) {
	_, err := kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("creating node %s: %w", node, err)
	}
	pod, err := kube.CoreV1().Pods(agentNamespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "kos-agent-" + node},
		Spec: corev1.PodSpec{
			NodeName:           node,
			ServiceAccountName: agentServiceAccount,
			Containers:         []corev1.Container{{Name: "kos-agent", Image: "kos.example.com/kos-agent:never-runs"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("creating the agent pod of node %s: %w", node, err)
	}
	tr, err := kube.CoreV1().ServiceAccounts(agentNamespace).CreateToken(ctx, agentServiceAccount, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: &expiry,
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("requesting a token of the agent of node %s: %w", node, err)
	}
	return tr.Status.Token, nil
}

// applyAccess creates the Namespaces, ServiceAccounts, ClusterRoles,
// ClusterRoleBindings, Roles and RoleBindings of the 0.3.0 manifest of
// addon, as shipped; the rest of the manifest is left out.
func applyAccess(b *testing.B, kube kubernetes.Interface, addon string) {
	b.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		b.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "addons", addon, "0.3.0.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	decode := scheme.Codecs.UniversalDeserializer().Decode
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			b.Fatalf("reading the manifest of %s: %v", addon, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj, _, err := decode(doc, nil, nil)
		if err != nil {
			// Kinds client-go does not know (none of them RBAC).
			continue
		}
		if err := createAccess(ctx, kube, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			b.Fatalf("creating an object of the manifest of %s: %v", addon, err)
		}
	}
}

// createAccess creates obj when it is an object of identity or access.
func createAccess(ctx context.Context, kube kubernetes.Interface, obj any) error {
	var err error
	switch o := obj.(type) {
	case *corev1.Namespace:
		_, err = kube.CoreV1().Namespaces().Create(ctx, o, metav1.CreateOptions{})
	case *corev1.ServiceAccount:
		_, err = kube.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	case *rbacv1.ClusterRole:
		_, err = kube.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
	case *rbacv1.ClusterRoleBinding:
		_, err = kube.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
	case *rbacv1.Role:
		_, err = kube.RbacV1().Roles(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	case *rbacv1.RoleBinding:
		_, err = kube.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	}
	return err
}

// withToken returns cfg authenticating with token instead of its own
// credentials.
func withToken(cfg *rest.Config, token string) *rest.Config {
	c := rest.AnonymousClientConfig(cfg)
	c.BearerToken = token
	return c
}

// tokenKubeconfig writes a kubeconfig of the main cluster that
// authenticates with token, and returns its path.
func tokenKubeconfig(b *testing.B, token string) string {
	b.Helper()
	env := testenv.Shared(b)
	ca, err := os.ReadFile(env.CACertFile)
	if err != nil {
		b.Fatal(err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["main"] = &clientcmdapi.Cluster{Server: env.RESTConfig.Host, CertificateAuthorityData: ca}
	cfg.AuthInfos["token"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["main"] = &clientcmdapi.Context{Cluster: "main", AuthInfo: "token"}
	cfg.CurrentContext = "main"
	path := filepath.Join(b.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		b.Fatal(err)
	}
	return path
}
