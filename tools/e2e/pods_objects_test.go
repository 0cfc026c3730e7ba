package e2e

// This file holds how the pods' tests handle their objects: they create and
// delete pods and NetworkAttachmentDefinitions, wait for them, read the
// pods' addresses and attachments and a node's MTU, and run commands in pods
// as a user does.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	networkv1alpha1 "github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/tools/cluster"
	"github.com/kos-sdn/kos/tools/poll"
)

// deleteAll deletes the pods, then their namespace with its networks and
// attachments, and waits until both are gone.
func (p *podsTest) deleteAll(t *testing.T) {
	t.Helper()
	ctx := t.Context()
	if err := p.kube.CoreV1().Pods(podsNamespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 2*time.Minute, "the pods of "+podsNamespace+" to be gone", func(ctx context.Context) error {
		pods, err := p.kube.CoreV1().Pods(podsNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		var left []string
		for _, pod := range pods.Items {
			left = append(left, fmt.Sprintf("%s (%s, deleted %v)", pod.Name, pod.Status.Phase, pod.DeletionTimestamp != nil))
		}
		if len(left) > 0 {
			return fmt.Errorf("left: %s", strings.Join(left, ", "))
		}
		return nil
	})
	if err := p.kube.CoreV1().Namespaces().Delete(ctx, podsNamespace, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	poll.Until(t, 3*time.Minute, "namespace "+podsNamespace+" to be gone", func(ctx context.Context) error {
		ns, err := p.kube.CoreV1().Namespaces().Get(ctx, podsNamespace, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("still there: %s, %+v", ns.Status.Phase, ns.Status.Conditions)
	})
}

// underlayMTU returns the MTU of the node's interface that holds its
// address.
func (p *podsTest) underlayMTU(t *testing.T, n *cluster.Node) int {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), "ip", "-n", n.Netns, "-o", "-4", "addr", "show", "to", n.IP.String()+"/32").CombinedOutput()
	fields := strings.Fields(string(out))
	if err != nil || len(fields) < 2 {
		t.Fatalf("node %s: the interface holding %s: %v: %s", n.Name, n.IP, err, out)
	}
	ifc := fields[1]
	out, err = exec.CommandContext(t.Context(), "ip", "-n", n.Netns, "-o", "link", "show", ifc).CombinedOutput()
	if err != nil {
		t.Fatalf("node %s: ip link show %s: %v: %s", n.Name, ifc, err, out)
	}
	f := strings.Fields(string(out))
	for i := range f[:len(f)-1] {
		if f[i] == "mtu" {
			v, err := strconv.Atoi(f[i+1])
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Fatalf("node %s: no MTU in %q", n.Name, out)
	return 0
}

// createNAD creates a NetworkAttachmentDefinition of the config.
func (p *podsTest) createNAD(t *testing.T, name string, config map[string]any) {
	t.Helper()
	data, err := json.Marshal(config)
	if err != nil {
		t.Fatal(err)
	}
	nad := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "k8s.cni.cncf.io/v1",
		"kind":       "NetworkAttachmentDefinition",
		"metadata":   map[string]any{"name": name},
		"spec":       map[string]any{"config": string(data)},
	}}
	dyn, err := dynamic.NewForConfig(p.env.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(networkAttachmentDefinitions).Namespace(podsNamespace).Create(t.Context(), nad, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating NetworkAttachmentDefinition %s: %v", name, err)
	}
}

// createPod creates a podnet pod on node with the networks annotation.
func (p *podsTest) createPod(t *testing.T, name, node, networks string) {
	t.Helper()
	// A grace period above 0: with 0 the API drops the pod at once, and
	// only with one does the pod stay until its kubelet has torn the
	// sandbox down (the CNI DEL included), which the tests wait for.
	grace := int64(1)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"k8s.v1.cni.cncf.io/networks": networks}},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			AutomountServiceAccountToken:  new(bool),
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name:            "podnet",
				Image:           p.image,
				ImagePullPolicy: corev1.PullIfNotPresent,
			}},
		},
	}
	if _, err := p.kube.CoreV1().Pods(podsNamespace).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s: %v", name, err)
	}
}

func (p *podsTest) deletePod(t *testing.T, name string) {
	t.Helper()
	if err := p.kube.CoreV1().Pods(podsNamespace).Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("deleting pod %s: %v", name, err)
	}
}

func (p *podsTest) awaitRunning(t *testing.T, name string, timeout time.Duration) {
	t.Helper()
	poll.Until(t, timeout, "pod "+name+" to run", func(ctx context.Context) error {
		pod, err := p.kube.CoreV1().Pods(podsNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("%s: %v", pod.Status.Phase, pod.Status.Conditions)
	})
}

// kosAddress returns the pod's address on its KOS interface, as Multus
// reports it in the pod's network-status annotation.
func (p *podsTest) kosAddress(t *testing.T, pod string) netip.Addr {
	t.Helper()
	got, err := p.kube.CoreV1().Pods(podsNamespace).Get(t.Context(), pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var statuses []struct {
		Name      string   `json:"name"`
		Interface string   `json:"interface"`
		IPs       []string `json:"ips"`
	}
	raw := got.Annotations["k8s.v1.cni.cncf.io/network-status"]
	if err := json.Unmarshal([]byte(raw), &statuses); err != nil {
		t.Fatalf("pod %s's network-status %q: %v", pod, raw, err)
	}
	for _, s := range statuses {
		if s.Interface == podsIfName && len(s.IPs) > 0 {
			a, err := netip.ParseAddr(s.IPs[0])
			if err != nil {
				t.Fatal(err)
			}
			if !netip.MustParsePrefix(podsCIDR).Contains(a) {
				t.Fatalf("pod %s's %s has %s, outside %s", pod, podsIfName, a, podsCIDR)
			}
			return a
		}
	}
	t.Fatalf("pod %s's network-status names no %s with an address: %s", pod, podsIfName, raw)
	return netip.Addr{}
}

// attachmentsOf returns the NetworkAttachments that stand for the pod's
// interfaces.
func (p *podsTest) attachmentsOf(t *testing.T, pod string) []networkv1alpha1.NetworkAttachment {
	t.Helper()
	got, err := p.kube.CoreV1().Pods(podsNamespace).Get(t.Context(), pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p.attachmentsOfUID(t, string(got.UID))
}

func (p *podsTest) attachmentsOfUID(t *testing.T, uid string) []networkv1alpha1.NetworkAttachment {
	t.Helper()
	list, err := p.network.NetworkV1alpha1().NetworkAttachments(podsNamespace).List(t.Context(), metav1.ListOptions{LabelSelector: v1alpha1.PodUIDLabel + "=" + uid})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// awaitNoAttachmentsUID waits until no attachment is labelled with the pod's
// UID.
func (p *podsTest) awaitNoAttachmentsUID(t *testing.T, pod, uid string, timeout time.Duration) {
	t.Helper()
	poll.Until(t, timeout, "no attachment of pod "+pod+" to be left", func(ctx context.Context) error {
		list, err := p.network.NetworkV1alpha1().NetworkAttachments(podsNamespace).List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.PodUIDLabel + "=" + uid})
		if err != nil {
			return err
		}
		if len(list.Items) > 0 {
			return fmt.Errorf("attachment %s is left", list.Items[0].Name)
		}
		return nil
	})
}

// awaitNoAttachments waits until no attachment names the deleted pod.
func (p *podsTest) awaitNoAttachments(t *testing.T, pod string, timeout time.Duration) {
	t.Helper()
	poll.Until(t, timeout, "no attachment of pod "+pod+" to be left", func(ctx context.Context) error {
		list, err := p.network.NetworkV1alpha1().NetworkAttachments(podsNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, a := range list.Items {
			for _, o := range a.OwnerReferences {
				if o.Kind == "Pod" && o.Name == pod {
					return fmt.Errorf("attachment %s is left", a.Name)
				}
			}
		}
		return nil
	})
}

// exec runs a command in the pod and returns its output.
func (p *podsTest) exec(t *testing.T, pod string, command ...string) string {
	t.Helper()
	out, err := p.execErr(t.Context(), pod, command...)
	if err != nil {
		t.Fatalf("in pod %s: %v\n%s", pod, err, out)
	}
	return out
}

// execErr runs a command in the pod with kubectl exec, as a user does.
func (p *podsTest) execErr(ctx context.Context, pod string, command ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	args := append([]string{"--kubeconfig", p.env.Kubeconfig, "-n", podsNamespace, "exec", pod, "--"}, command...)
	cmd := exec.CommandContext(ctx, "kubectl", args...)
	// Standard output alone: kubectl writes its own complaints (such as
	// a websocket's "Unknown stream id") to standard error.
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("kubectl exec %s -- %s: %w (stderr: %s)", pod, strings.Join(command, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}
