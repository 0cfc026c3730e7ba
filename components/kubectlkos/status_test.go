package kubectlkos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kos-sdn/kos/components/agent/api"
	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	kosfake "github.com/kos-sdn/kos/components/generated/clientset/versioned/fake"
	"github.com/kos-sdn/kos/tools/golden"
)

// fakeProxy answers the pod proxy's requests from memory, by pod, method
// and path, and records them.
type fakeProxy struct {
	answers map[string]string // "pod METHOD path" -> body
	asked   []string
}

func (p *fakeProxy) Do(_ context.Context, namespace, name string, port int, method, path string, body []byte) ([]byte, error) {
	key := fmt.Sprintf("%s %s %s", name, method, path)
	p.asked = append(p.asked, fmt.Sprintf("%s/%s:%d %s %s %s", namespace, name, port, method, path, body))
	a, ok := p.answers[key]
	if !ok {
		return nil, errors.New(method + " " + path + ": 503: no route to host")
	}
	return []byte(a), nil
}

// agentPod returns a running agent pod on node.
func agentPod(name, node, image string, restarts int32) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: DefaultAgentNamespace, Name: name, Labels: map[string]string{"app.kubernetes.io/name": "kos-agent"}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{
			{Name: "ovs", Image: image},
			{Name: agentContainer, Image: image, Ports: []corev1.ContainerPort{{Name: agentPortName, ContainerPort: 9298}}},
		}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
			{Name: "ovs"}, {Name: agentContainer, RestartCount: restarts},
		}},
	}
}

func readyAttachment(ns, name, node string, ready bool) *v1alpha1.NetworkAttachment {
	status := metav1.ConditionFalse
	if ready {
		status = metav1.ConditionTrue
	}
	return &v1alpha1.NetworkAttachment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       v1alpha1.NetworkAttachmentSpec{Node: node, Subnet: "s1"},
		Status: v1alpha1.NetworkAttachmentStatus{IPv4: "10.1.0.2", AddressVNI: 4097,
			Conditions: []metav1.Condition{{Type: v1alpha1.NetworkAttachmentReady, Status: status, Reason: "NotImplemented"}}},
	}
}

var now = time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)

// statusFixture is three nodes: one healthy, one whose agent reports
// errors, one whose agent does not answer; and a pending pod.
func statusFixture() (*agents, *fakeProxy, *kosfake.Clientset) {
	pending := agentPod("kos-agent-dddd", "node-4", "kos.example.com/kos-agent:0.3.0", 0)
	pending.Status.Phase = corev1.PodPending
	kube := fake.NewClientset(
		agentPod("kos-agent-aaaa", "node-1", "registry:5000/kos/kos-agent:0.3.0@sha256:0123456789abcdef0123", 0),
		agentPod("kos-agent-bbbb", "node-2", "registry:5000/kos/kos-agent@sha256:0123456789abcdef0123", 2),
		agentPod("kos-agent-cccc", "node-3", "kos.example.com/kos-agent:0.3.0", 0),
		pending,
		// Not an agent: another label.
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: DefaultAgentNamespace, Name: "other"}, Spec: corev1.PodSpec{NodeName: "node-1"}},
	)
	p := &fakeProxy{answers: map[string]string{
		"kos-agent-aaaa GET " + api.PathStatus: `{"node":"node-1","hostIP":"192.168.1.1","ready":true,"localAttachments":2,"local":2,"remote":4,"networks":1,"flows":22,
			"lastReconcile":"2026-11-27T09:59:15Z","lastReconcileReason":"periodic","lastCheck":"2026-11-27T09:59:58Z"}`,
		"kos-agent-bbbb GET " + api.PathStatus: `{"node":"node-2","hostIP":"192.168.1.2","ready":false,"local":0,"remote":0,"networks":0,"flows":-1,
			"lastReconcile":"2026-11-27T09:00:00Z","lastReconcileReason":"retry","lastReconcileError":"listing the fabric: ovs-vsctl: exit status 1",
			"fabricErrors":{"list":3,"ensure":1},
			"errors":["not ready: checking the fabric: ovs-vsctl said \"database connection failed (No such file or directory)\": exit status 1","the last reconcile failed: listing the fabric: ovs-vsctl: exit status 1","counting the flows: ovs-ofctl: exit status 1"]}`,
	}}
	kos := kosfake.NewSimpleClientset(
		readyAttachment("t1", "a1", "node-1", true),
		readyAttachment("t2", "a2", "node-1", true),
		readyAttachment("t1", "b1", "node-2", false),
		readyAttachment("t1", "c1", "node-9", false),
	)
	return &agents{kube: kube, namespace: DefaultAgentNamespace, selector: DefaultAgentSelector, proxy: p}, p, kos
}

func TestStatusOutput(t *testing.T) {
	t.Parallel()
	ag, _, kos := statusFixture()
	statuses, err := collectStatus(context.Background(), ag, kos, "", func(f string, a ...any) { t.Errorf("warning: "+f, a...) })
	if err != nil {
		t.Fatal(err)
	}
	for _, format := range []string{"", "wide", "yaml", "json"} {
		t.Run("-o "+format, func(t *testing.T) {
			so := &statusOptions{print: genericclioptions.NewPrintFlags("").WithDefaultOutput("")}
			*so.print.OutputFormat = format
			print, err := so.printer(newStatusCommand(&options{}))
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if err := print(&out, statusReport{Nodes: statuses}, now); err != nil {
				t.Fatal(err)
			}
			name := "status"
			if format != "" {
				name += "-" + format
			}
			golden.Check(t, name+".golden", out.String())
		})
	}
}

func TestStatusOfOneNode(t *testing.T) {
	t.Parallel()
	ag, p, kos := statusFixture()
	statuses, err := collectStatus(context.Background(), ag, kos, "node-2", func(string, ...any) {})
	if err != nil {
		t.Fatal(err)
	}
	if len(statuses) != 1 || statuses[0].Node != "node-2" || statuses[0].Agent == nil || *statuses[0].NotReady != 1 {
		t.Errorf("status of node-2: %+v, want node-2's agent with one attachment not ready", statuses)
	}
	want := []string{"kos-node/kos-agent-bbbb:9298 GET /debug/status "}
	if diff := cmp.Diff(p.asked, want); diff != "" {
		t.Errorf("requests (-got +want):\n%s", diff)
	}
}

func TestStatusWithoutAttachments(t *testing.T) {
	t.Parallel()
	ag, _, kos := statusFixture()
	kos.PrependReactor("list", "networkattachments", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("forbidden")
	})
	var warnings []string
	statuses, err := collectStatus(context.Background(), ag, kos, "node-1", func(f string, a ...any) { warnings = append(warnings, fmt.Sprintf(f, a...)) })
	if err != nil {
		t.Fatal(err)
	}
	if len(statuses) != 1 || statuses[0].NotReady != nil || len(warnings) != 1 {
		t.Errorf("statuses %+v, warnings %q: want node-1 without counts, and a warning", statuses, warnings)
	}
}

func TestImageVersion(t *testing.T) {
	t.Parallel()
	tests := []struct{ ref, want string }{
		{"kos.example.com/kos-agent:0.3.0", "0.3.0"},
		{"registry:5000/kos/kos-agent:0.3.0@sha256:0123456789abcdef", "0.3.0"},
		{"registry:5000/kos/kos-agent@sha256:0123456789abcdef0123", "sha256:0123456789ab"},
		{"registry:5000/kos/kos-agent", ""},
		{"kos-agent", ""},
	}
	for _, tt := range tests {
		if got := imageVersion(tt.ref); got != tt.want {
			t.Errorf("imageVersion(%q) = %q, want %q", tt.ref, got, tt.want)
		}
	}
}

func TestSummarize(t *testing.T) {
	t.Parallel()
	tests := []struct {
		errs []string
		want string
	}{
		{nil, "<none>"},
		{[]string{"short"}, "short"},
		{[]string{"a  long\nerror that goes on", "second"}, "a long error… (+1 more)"},
	}
	for _, tt := range tests {
		if got := summarize(tt.errs, 13); got != tt.want {
			t.Errorf("summarize(%q) = %q, want %q", tt.errs, got, tt.want)
		}
	}
}
