package kubectlkos

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kos-sdn/kos/tools/golden"
)

// controlPlanePod returns a pod of component in the control plane's
// namespace.
func controlPlanePod(component, name, node, image string, ready bool, restarts int32, ports ...corev1.ContainerPort) *corev1.Pod {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: DefaultControlPlaneNamespace, Name: name, Labels: map[string]string{"app.kubernetes.io/name": component}},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: component, Image: image, Ports: ports}}},
		Status: corev1.PodStatus{
			Phase:             corev1.PodRunning,
			Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: status}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: component, RestartCount: restarts}},
		},
	}
}

func apiService(available, reason, message string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": kosAPIService},
		"status": map[string]any{"conditions": []any{
			map[string]any{"type": "Available", "status": available, "reason": reason, "message": message},
		}},
	}}
}

const etcdMetrics = `# TYPE etcd_server_is_leader gauge
etcd_server_is_leader %d
# TYPE etcd_server_has_leader gauge
etcd_server_has_leader %d
# TYPE etcd_mvcc_db_total_size_in_bytes gauge
etcd_mvcc_db_total_size_in_bytes %d
# TYPE etcd_server_quota_backend_bytes gauge
etcd_server_quota_backend_bytes 8.388608e+08
# TYPE etcd_server_version gauge
etcd_server_version{server_version="3.5.21"} 1
`

// controlPlaneFixture is a control plane with two kos-apiservers (one not
// Ready), three etcd members (a leader, a follower, one whose metrics do
// not answer), a kos-pki that reports three certificates (one expiring in
// 10 days), no kos-controller-manager, and an APIService that is not
// Available.
func controlPlaneFixture(t *testing.T) (*controlPlane, *fakeProxy) {
	metrics := corev1.ContainerPort{Name: "metrics", ContainerPort: 2381}
	pending := controlPlanePod("kos-etcd", "kos-etcd-2", "node-3", "registry.k8s.io/etcd:3.5.21-0", false, 0, metrics)
	pending.Status.Phase = corev1.PodPending
	kube := fake.NewClientset(
		controlPlanePod("kos-apiserver", "kos-apiserver-7d9-aaaa", "node-1", "kos.example.com/kos-apiserver:0.3.0", true, 0),
		controlPlanePod("kos-apiserver", "kos-apiserver-7d9-bbbb", "node-2", "kos.example.com/kos-apiserver:0.3.0", false, 4),
		controlPlanePod("kos-etcd", "kos-etcd-0", "node-1", "registry.k8s.io/etcd:3.5.21-0", true, 0, metrics),
		controlPlanePod("kos-etcd", "kos-etcd-1", "node-2", "registry.k8s.io/etcd:3.5.21-0", true, 1, metrics),
		pending,
		controlPlanePod("kos-pki", "kos-pki-5f4-cccc", "node-1", "kos.example.com/kos-apiserver:0.3.0", true, 0, corev1.ContainerPort{Name: "metrics", ContainerPort: 9296}),
		// Not the control plane's: another label.
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: DefaultControlPlaneNamespace, Name: "other"}},
	)
	expiry := func(days int) float64 { return float64(now.Add(time.Duration(days) * 24 * time.Hour).Unix()) }
	p := &fakeProxy{answers: map[string]string{
		"kos-etcd-0 GET /metrics": fmt.Sprintf(etcdMetrics, 1, 1, 12*1024*1024),
		"kos-etcd-1 GET /metrics": fmt.Sprintf(etcdMetrics, 0, 1, 13*1024*1024),
		"kos-pki-5f4-cccc GET /metrics": fmt.Sprintf(`# TYPE kos_certificate_expiry_timestamp_seconds gauge
kos_certificate_expiry_timestamp_seconds{namespace="example-com",secret="kos-ca"} %g
kos_certificate_expiry_timestamp_seconds{namespace="example-com",secret="kos-etcd-server"} %g
kos_certificate_expiry_timestamp_seconds{namespace="example-com",secret="kos-apiserver-serving"} %g
`, expiry(3650), expiry(10), expiry(300)),
	}}
	scheme := runtime.NewScheme()
	dyn := dynamicfake.NewSimpleDynamicClient(scheme, apiService("False", "MissingEndpoints", "endpoints for service/kos-apiserver in \"example-com\" have no addresses with port name \"https\""))
	return &controlPlane{kube: kube, dynamic: dyn, namespace: DefaultControlPlaneNamespace, proxy: p}, p
}

func TestControlPlaneOutput(t *testing.T) {
	t.Parallel()
	cp, p := controlPlaneFixture(t)
	rows := cp.collect(context.Background(), now)
	// The pending member is not asked; kos-pki once.
	wantAsked := []string{
		"example-com/kos-etcd-0:2381 GET /metrics ",
		"example-com/kos-etcd-1:2381 GET /metrics ",
		"example-com/kos-pki-5f4-cccc:9296 GET /metrics ",
	}
	if diff := cmp.Diff(p.asked, wantAsked); diff != "" {
		t.Errorf("requests (-got +want):\n%s", diff)
	}
	ag, _, kos := statusFixture()
	nodes, err := collectStatus(context.Background(), ag, kos, "", func(f string, a ...any) { t.Errorf("warning: "+f, a...) })
	if err != nil {
		t.Fatal(err)
	}
	for _, format := range []string{"", "wide", "json"} {
		t.Run("-o "+format, func(t *testing.T) {
			so := &statusOptions{print: genericclioptions.NewPrintFlags("").WithDefaultOutput("")}
			*so.print.OutputFormat = format
			print, err := so.printer(newStatusCommand(&options{}))
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if err := print(&out, statusReport{ControlPlane: rows, Nodes: nodes[:1]}, now); err != nil {
				t.Fatal(err)
			}
			name := "status-control-plane"
			if format != "" {
				name += "-" + format
			}
			golden.Check(t, name+".golden", out.String())
		})
	}
}

func TestControlPlaneMissing(t *testing.T) {
	t.Parallel()
	cp, _ := controlPlaneFixture(t)
	cp.namespace = "elsewhere"
	cp.dynamic = dynamicfake.NewSimpleDynamicClient(runtime.NewScheme())
	rows := cp.collect(context.Background(), now)
	var got []string
	for _, r := range rows {
		got = append(got, r.Component+" "+r.Name+": "+r.Error)
	}
	want := []string{
		"kos-apiserver <none>: no kos-apiserver pod in namespace elsewhere",
		"kos-etcd <none>: no kos-etcd pod in namespace elsewhere",
		"kos-controller-manager <none>: no kos-controller-manager pod in namespace elsewhere",
		"kos-pki <none>: no kos-pki pod in namespace elsewhere",
		"apiservice v1alpha1.network.example.com: the APIService does not exist: the KOS API is not served",
	}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("rows (-got +want):\n%s", diff)
	}
}

func TestBytesIEC(t *testing.T) {
	t.Parallel()
	for n, want := range map[int64]string{512: "512 B", 2048: "2.0 KiB", 12 * 1024 * 1024: "12.0 MiB", 800 << 20: "800.0 MiB", 8 << 30: "8.0 GiB"} {
		if got := bytesIEC(n); got != want {
			t.Errorf("bytesIEC(%d) = %q, want %q", n, got, want)
		}
	}
}
