package kubectlkos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes"

	"github.com/kos-sdn/kos/components/agent/api"
)

// agentContainer and agentPortName are the container of an agent pod that
// serves the debug endpoints, and the name of its metrics port, where
// agents before 0.4.0 serve them.
const (
	agentContainer = "kos-agent"
	agentPortName  = "metrics"
)

// proxy reaches an HTTP endpoint of a pod. The real one is the
// kube-apiserver's pod proxy (podProxy); tests use one in memory.
type proxy interface {
	// Do sends method to path on port of pod namespace/name, with body if
	// not nil, and returns the answer; an answer other than 200 is an
	// error that holds what the pod said.
	Do(ctx context.Context, namespace, name string, port int, method, path string, body []byte) ([]byte, error)
}

// errNotServed is the error of a path the agent does not serve there.
var errNotServed = errors.New("the agent does not serve it (a release older than this plugin?)")

// podProxy is the kube-apiserver's pod proxy: the request goes to the
// apiserver with the user's credentials, which RBAC checks (pods/proxy,
// get for GET and create for POST), and on to the pod.
type podProxy struct{ kube kubernetes.Interface }

// Do implements proxy.
func (p podProxy) Do(ctx context.Context, namespace, name string, port int, method, path string, body []byte) ([]byte, error) {
	req := p.kube.CoreV1().RESTClient().Verb(method).
		Namespace(namespace).Resource("pods").SubResource("proxy").
		Name(utilnet.JoinSchemeNamePort("http", name, strconv.Itoa(port))).
		Suffix(path)
	if body != nil {
		req = req.SetHeader("Content-Type", "application/json").Body(bytes.NewReader(body))
	}
	raw, err := req.DoRaw(ctx)
	if err != nil {
		var status apierrors.APIStatus
		code := 0
		if errors.As(err, &status) {
			code = int(status.Status().Code)
		}
		switch {
		case code == http.StatusNotFound && bytes.HasPrefix(raw, []byte("404 page not found")):
			return nil, fmt.Errorf("%s %s: %w", method, path, errNotServed)
		case code != 0 && len(raw) > 0 && !bytes.HasPrefix(bytes.TrimSpace(raw), []byte("{")):
			// The agent's own answer, passed on by the proxy: say it as
			// it is. A JSON answer is the apiserver's Status, whose
			// error says it better.
			return nil, fmt.Errorf("%s %s: %d: %s", method, path, code, strings.TrimSpace(string(raw)))
		}
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	return raw, nil
}

// agents finds the agent pods and asks them: through tunnel those that
// serve a debug port (0.4.0 and later), with the user's credentials,
// through proxy the older ones, which serve the endpoints on their
// metrics port to anyone. A nil tunnel asks every one through proxy.
type agents struct {
	kube      kubernetes.Interface
	namespace string
	selector  string
	proxy     proxy
	tunnel    proxy
}

// list returns the agent pods, of node only when node is not empty, sorted
// by node.
func (a *agents) list(ctx context.Context, node string) ([]corev1.Pod, error) {
	opts := metav1.ListOptions{LabelSelector: a.selector}
	if node != "" {
		opts.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String()
	}
	pods, err := a.kube.CoreV1().Pods(a.namespace).List(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("listing the agent pods in namespace %s: %w", a.namespace, err)
	}
	// Only node's, even from a server that ignored the field selector.
	out := slices.DeleteFunc(slices.Clone(pods.Items), func(p corev1.Pod) bool { return node != "" && p.Spec.NodeName != node })
	slices.SortFunc(out, func(x, y corev1.Pod) int {
		if c := strings.Compare(x.Spec.NodeName, y.Spec.NodeName); c != 0 {
			return c
		}
		return strings.Compare(x.Name, y.Name)
	})
	return out, nil
}

// onNode returns the running agent pod of node.
func (a *agents) onNode(ctx context.Context, node string) (*corev1.Pod, error) {
	pods, err := a.list(ctx, node)
	if err != nil {
		return nil, err
	}
	for i := range pods {
		if pods[i].Status.Phase == corev1.PodRunning && pods[i].DeletionTimestamp == nil {
			return &pods[i], nil
		}
	}
	if len(pods) == 0 {
		return nil, fmt.Errorf("no agent pod (%s in namespace %s) on node %s", a.selector, a.namespace, node)
	}
	return nil, fmt.Errorf("the agent pod %s on node %s is %s, not running", pods[0].Name, node, pods[0].Status.Phase)
}

// get asks an agent pod's debug endpoint path.
func (a *agents) get(ctx context.Context, pod *corev1.Pod, path string) ([]byte, error) {
	return a.do(ctx, pod, http.MethodGet, path, nil)
}

// post sends body to an agent pod's debug endpoint path.
func (a *agents) post(ctx context.Context, pod *corev1.Pod, path string, body []byte) ([]byte, error) {
	return a.do(ctx, pod, http.MethodPost, path, body)
}

func (a *agents) do(ctx context.Context, pod *corev1.Pod, method, path string, body []byte) ([]byte, error) {
	if a.tunnel == nil {
		return a.proxy.Do(ctx, pod.Namespace, pod.Name, agentPort(pod), method, path, body)
	}
	if port, ok := containerPort(pod, api.DebugPortName); ok {
		return a.tunnel.Do(ctx, pod.Namespace, pod.Name, port, method, path, body)
	}
	raw, err := a.proxy.Do(ctx, pod.Namespace, pod.Name, agentPort(pod), method, path, body)
	if errors.Is(err, errNotServed) {
		// An agent since 0.4.0 in a manifest that names no debug port
		// serves the endpoints on the releases' debug port.
		return a.tunnel.Do(ctx, pod.Namespace, pod.Name, api.DebugPort, method, path, body)
	}
	return raw, err
}

// agentPort returns the port where agents before 0.4.0 serve the debug
// endpoints: the metrics port of its container, as the manifests name it,
// else the releases'.
func agentPort(pod *corev1.Pod) int {
	if port, ok := containerPort(pod, agentPortName); ok {
		return port
	}
	return api.Port
}

// containerPort returns the port named name of the agent's container.
func containerPort(pod *corev1.Pod, name string) (int, bool) {
	for _, c := range pod.Spec.Containers {
		if c.Name != agentContainer {
			continue
		}
		for _, p := range c.Ports {
			if p.Name == name && p.ContainerPort > 0 {
				return int(p.ContainerPort), true
			}
		}
	}
	return 0, false
}

// agentImage returns the image of the agent's container, and its tag or
// digest alone as the agent's version.
func agentImage(pod *corev1.Pod) (image, version string) {
	for _, c := range pod.Spec.Containers {
		if c.Name == agentContainer {
			return c.Image, imageVersion(c.Image)
		}
	}
	return "", ""
}

// imageVersion returns an image reference's tag, or its digest shortened
// when it has no tag ("sha256:0123456789ab"), or "" when it has neither.
func imageVersion(ref string) string {
	name, digest, hasDigest := strings.Cut(ref, "@")
	// A tag follows the last colon after the last slash (a colon before
	// it is a registry's port).
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		return name[i+1:]
	}
	if hasDigest {
		if len(digest) > len("sha256:")+12 {
			digest = digest[:len("sha256:")+12]
		}
		return digest
	}
	return ""
}
