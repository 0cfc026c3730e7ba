package kubectlkos

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// DefaultControlPlaneNamespace is where the releases run kos-etcd, kos-pki,
// kos-apiserver and kos-controller-manager.
const DefaultControlPlaneNamespace = "example-com"

// The control plane's parts, by their pods' app.kubernetes.io/name, in the
// order status shows them, and the APIService that serves the KOS API.
var controlPlaneComponents = []string{"kos-apiserver", "kos-etcd", "kos-controller-manager", "kos-pki"}

const (
	kosAPIService        = "v1alpha1.network.example.com"
	componentAPIService  = "apiservice"
	componentCertificate = "certificate"
)

// certificateWarning is how long before its expiry a certificate is shown
// not Ready: as alert KOSCertificateExpiresSoon (kos-pki renews leaves 30
// days ahead, so 21 days left means renewal failed for a week).
const certificateWarning = 21 * 24 * time.Hour

// The ports the releases serve plain-HTTP metrics on, when a pod names no
// container port "metrics".
const (
	etcdMetricsPort = 2381
	pkiMetricsPort  = 9296
)

var apiServices = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// ComponentStatus is what status reports of one part of the control
// plane: a pod of kos-apiserver, kos-etcd, kos-controller-manager or
// kos-pki, the KOS APIService, or a certificate kos-pki keeps.
type ComponentStatus struct {
	Component string `json:"component"`
	// Name is the pod's, the APIService's or the certificate's Secret's.
	Name     string `json:"name"`
	Node     string `json:"node,omitempty"`
	Version  string `json:"version,omitempty"`
	Restarts int32  `json:"restarts,omitempty"`
	// Ready is the pod's Ready condition, the APIService's Available, or
	// whether a certificate has more than 21 days left.
	Ready bool `json:"ready"`
	// Of an etcd member, as its metrics say: whether it leads, whether it
	// has a leader, its database's size and quota in bytes.
	Leader    *bool  `json:"leader,omitempty"`
	HasLeader *bool  `json:"hasLeader,omitempty"`
	DBSize    *int64 `json:"dbSizeBytes,omitempty"`
	DBQuota   *int64 `json:"dbQuotaBytes,omitempty"`
	// Expires is a certificate's expiry.
	Expires *metav1.Time `json:"expires,omitempty"`
	// Message is the APIService's condition message when not Available.
	Message string `json:"message,omitempty"`
	// Error says what could not be read.
	Error string `json:"error,omitempty"`
}

// controlPlane reads the control plane's state through the kube-apiserver:
// its pods, their metrics through proxy, and the APIService.
type controlPlane struct {
	kube      kubernetes.Interface
	dynamic   dynamic.Interface
	namespace string
	proxy     proxy
}

// collect returns a row per control-plane pod (or per component without
// one), one for the APIService and one per certificate kos-pki reports.
// What cannot be read is said in its row; collect itself does not fail.
func (cp *controlPlane) collect(ctx context.Context, now time.Time) []ComponentStatus {
	var rows []ComponentStatus
	pods, err := cp.kube.CoreV1().Pods(cp.namespace).List(ctx, metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/name in (" + strings.Join(controlPlaneComponents, ",") + ")",
	})
	if err != nil {
		rows = append(rows, ComponentStatus{Component: "pods", Name: cp.namespace, Error: fmt.Sprintf("listing the control plane's pods: %v", err)})
	}
	var certificates []ComponentStatus
	for _, component := range controlPlaneComponents {
		var mine []corev1.Pod
		if pods != nil {
			for _, p := range pods.Items {
				if p.Labels["app.kubernetes.io/name"] == component {
					mine = append(mine, p)
				}
			}
		}
		slices.SortFunc(mine, func(x, y corev1.Pod) int { return strings.Compare(x.Name, y.Name) })
		if len(mine) == 0 && err == nil {
			rows = append(rows, ComponentStatus{Component: component, Name: "<none>", Error: fmt.Sprintf("no %s pod in namespace %s", component, cp.namespace)})
		}
		for i := range mine {
			row := componentPod(component, &mine[i])
			running := mine[i].Status.Phase == corev1.PodRunning
			switch {
			case !running:
				row.Error = fmt.Sprintf("the pod is %s", mine[i].Status.Phase)
			case component == "kos-etcd":
				cp.etcdMember(ctx, &mine[i], &row)
			case component == "kos-pki" && certificates == nil:
				certificates, row.Error = cp.certificates(ctx, &mine[i], now)
			}
			rows = append(rows, row)
		}
	}
	rows = append(rows, cp.apiService(ctx))
	return append(rows, certificates...)
}

// componentPod is what a control-plane pod tells of itself.
func componentPod(component string, pod *corev1.Pod) ComponentStatus {
	row := ComponentStatus{Component: component, Name: pod.Name, Node: pod.Spec.NodeName}
	for _, c := range pod.Spec.Containers {
		if c.Name == component || row.Version == "" {
			row.Version = imageVersion(c.Image)
		}
	}
	for _, c := range pod.Status.ContainerStatuses {
		row.Restarts += c.RestartCount
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			row.Ready = c.Status == corev1.ConditionTrue
		}
	}
	return row
}

// etcdMember reads an etcd member's metrics: leadership, database size
// and quota, and etcd's version.
func (cp *controlPlane) etcdMember(ctx context.Context, pod *corev1.Pod, row *ComponentStatus) {
	families, err := cp.metrics(ctx, pod, etcdMetricsPort)
	if err != nil {
		row.Error = err.Error()
		return
	}
	if v, ok := gauge(families, "etcd_server_is_leader"); ok {
		leader := v == 1
		row.Leader = &leader
	}
	if v, ok := gauge(families, "etcd_server_has_leader"); ok {
		has := v == 1
		row.HasLeader = &has
	}
	if v, ok := gauge(families, "etcd_mvcc_db_total_size_in_bytes"); ok {
		size := int64(v)
		row.DBSize = &size
	}
	if v, ok := gauge(families, "etcd_server_quota_backend_bytes"); ok {
		quota := int64(v)
		row.DBQuota = &quota
	}
	if f := families["etcd_server_version"]; f != nil && len(f.Metric) > 0 {
		if v := label(f.Metric[0], "server_version"); v != "" {
			row.Version = v
		}
	}
}

// certificates reads kos-pki's metrics: when each certificate it keeps
// expires.
func (cp *controlPlane) certificates(ctx context.Context, pod *corev1.Pod, now time.Time) ([]ComponentStatus, string) {
	families, err := cp.metrics(ctx, pod, pkiMetricsPort)
	if err != nil {
		return []ComponentStatus{}, err.Error()
	}
	rows := []ComponentStatus{}
	if f := families["kos_certificate_expiry_timestamp_seconds"]; f != nil {
		for _, m := range f.Metric {
			if m.Gauge == nil {
				continue
			}
			sec, frac := math.Modf(m.Gauge.GetValue())
			expires := metav1.NewTime(time.Unix(int64(sec), int64(frac*1e9)).UTC())
			name := label(m, "secret")
			if ns := label(m, "namespace"); ns != "" && ns != cp.namespace {
				name = ns + "/" + name
			}
			rows = append(rows, ComponentStatus{Component: componentCertificate, Name: name, Ready: expires.Sub(now) > certificateWarning, Expires: &expires})
		}
	}
	slices.SortFunc(rows, func(x, y ComponentStatus) int { return strings.Compare(x.Name, y.Name) })
	return rows, ""
}

// metrics reads a pod's /metrics on its container port named metrics (else
// port) through the proxy.
func (cp *controlPlane) metrics(ctx context.Context, pod *corev1.Pod, port int) (map[string]*dto.MetricFamily, error) {
	if p, ok := namedPort(pod, "metrics"); ok {
		port = p
	}
	raw, err := cp.proxy.Do(ctx, pod.Namespace, pod.Name, port, http.MethodGet, "/metrics", nil)
	if err != nil {
		return nil, fmt.Errorf("reading its metrics: %w", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("parsing its metrics: %w", err)
	}
	return families, nil
}

// apiService reads the KOS APIService's Available condition.
func (cp *controlPlane) apiService(ctx context.Context) ComponentStatus {
	row := ComponentStatus{Component: componentAPIService, Name: kosAPIService}
	u, err := cp.dynamic.Resource(apiServices).Get(ctx, kosAPIService, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			row.Error = "the APIService does not exist: the KOS API is not served"
		} else {
			row.Error = fmt.Sprintf("reading the APIService: %v", err)
		}
		return row
	}
	conditions, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conditions {
		cond, _ := c.(map[string]any)
		if cond["type"] != "Available" {
			continue
		}
		row.Ready = cond["status"] == "True"
		if !row.Ready {
			reason, _ := cond["reason"].(string)
			message, _ := cond["message"].(string)
			row.Message = strings.TrimSpace(reason + ": " + message)
		}
		return row
	}
	row.Message = "no Available condition yet"
	return row
}

// namedPort returns the port named name of any of a pod's containers.
func namedPort(pod *corev1.Pod, name string) (int, bool) {
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == name && p.ContainerPort > 0 {
				return int(p.ContainerPort), true
			}
		}
	}
	return 0, false
}

// gauge returns the value of a family's first sample, gauge or untyped.
func gauge(families map[string]*dto.MetricFamily, name string) (float64, bool) {
	f := families[name]
	if f == nil || len(f.Metric) == 0 {
		return 0, false
	}
	switch m := f.Metric[0]; {
	case m.Gauge != nil:
		return m.Gauge.GetValue(), true
	case m.Untyped != nil:
		return m.Untyped.GetValue(), true
	case m.Counter != nil:
		return m.Counter.GetValue(), true
	}
	return 0, false
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.Label {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

var controlPlaneColumns = []metav1.TableColumnDefinition{
	{Name: "Component", Type: "string"},
	{Name: "Name", Type: "string", Format: "name"},
	{Name: "Version", Type: "string"},
	{Name: "Ready", Type: "string"},
	{Name: "Details", Type: "string"},
	{Name: "Errors", Type: "string"},
	{Name: "Node", Type: "string", Priority: 1},
	{Name: "Restarts", Type: "integer", Priority: 1},
}

// controlPlaneTable is the control plane's table of the default and wide
// formats.
func controlPlaneTable(rows []ComponentStatus, now time.Time) *metav1.Table {
	table := &metav1.Table{ColumnDefinitions: controlPlaneColumns}
	for _, r := range rows {
		version, ready, node := r.Version, fmt.Sprint(r.Ready), r.Node
		if version == "" {
			version = "-"
		}
		if node == "" {
			node = "-"
		}
		var errs []string
		if r.Error != "" {
			errs = append(errs, r.Error)
		}
		table.Rows = append(table.Rows, metav1.TableRow{
			Cells: []any{r.Component, r.Name, version, ready, r.details(now), summarize(errs, 60), node, int64(r.Restarts)},
		})
	}
	return table
}

// details is the Details cell: an etcd member's role and database, a
// certificate's expiry, why the APIService is not Available.
func (r ComponentStatus) details(now time.Time) string {
	var parts []string
	if r.Leader != nil {
		switch {
		case *r.Leader:
			parts = append(parts, "leader")
		case r.HasLeader != nil && !*r.HasLeader:
			parts = append(parts, "no leader")
		default:
			parts = append(parts, "follower")
		}
	}
	if r.DBSize != nil {
		db := "db " + bytesIEC(*r.DBSize)
		if r.DBQuota != nil && *r.DBQuota > 0 {
			db += fmt.Sprintf(" of %s (%.0f%%)", bytesIEC(*r.DBQuota), 100*float64(*r.DBSize)/float64(*r.DBQuota))
		}
		parts = append(parts, db)
	}
	if r.Expires != nil {
		left := r.Expires.Sub(now)
		if left > 0 {
			parts = append(parts, fmt.Sprintf("expires %s (in %s)", r.Expires.Format(time.DateOnly), duration.HumanDuration(left)))
		} else {
			parts = append(parts, fmt.Sprintf("expired %s (%s ago)", r.Expires.Format(time.DateOnly), duration.HumanDuration(-left)))
		}
	}
	if r.Message != "" {
		parts = append(parts, summarize([]string{r.Message}, 60))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

// bytesIEC writes n bytes in KiB, MiB or GiB.
func bytesIEC(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, suffix := float64(n)/unit, "KiB"
	for _, s := range []string{"MiB", "GiB", "TiB"} {
		if v < unit {
			break
		}
		v, suffix = v/unit, s
	}
	return fmt.Sprintf("%.1f %s", v, suffix)
}
