// Package kosinstall is what the tests and the demo know of KOS installed by
// channels on a local cluster: the names the addons use, the host paths
// their pods mount and that must be lent to a node that shares the host's
// file system, the local volumes the standard etcd release needs, guest
// namespaces for attachments, and when the install is ready.
//
// tools/e2e and tools/demo both use it, so that they lend the same paths,
// provide the same volumes and wait for the same thing.
package kosinstall

import (
	"context"
	"fmt"
	"maps"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
)

// The names the KOS addons use.
const (
	// Namespace is where the KOS control components run (and, before
	// 0.2.0, the agent too).
	Namespace = "example-com"
	// AgentNamespace is where the agent runs from 0.2.0 on.
	AgentNamespace = "kos-node"
	// APIService serves the KOS API through kube-apiserver's aggregator.
	APIService = "v1alpha1.network.example.com"
	// agentAddon is the agent's addon name.
	agentAddon = "kos-agent"
	// AddonLabel is the label of every addon's selector; its value is the
	// addon's name.
	AddonLabel = "addon.kos.example.com/name"
)

// nodeLabels are the labels the addons select nodes by.
var nodeLabels = map[string]string{
	"role.kos.example.com/control":  "true",
	"role.kos.example.com/workload": "true",
}

// Namespaces returns the namespaces the KOS addons run in.
func Namespaces() []string { return []string{Namespace, AgentNamespace} }

// NodeLabels returns the labels a node needs for the addons to run their
// control plane and their agent on it.
func NodeLabels() map[string]string { return maps.Clone(nodeLabels) }

// Ready returns nil when KOS is ready: the Deployments, StatefulSets and
// DaemonSets of its Namespaces have every desired pod Ready and up to date,
// APIService is Available, and a list of Subnets through kube-apiserver is
// answered. Otherwise its error says what is not.
//
// The last is asked because the first two follow what kube-apiserver's
// aggregator routes to by a moment: right after a kos-apiserver restarts,
// its pod can be Ready and the APIService Available while a request
// still gets 503.
func Ready(ctx context.Context, kube kubernetes.Interface, agg aggregator.Interface) error {
	if err := workloadsReady(ctx, kube); err != nil {
		return err
	}
	svc, err := agg.ApiregistrationV1().APIServices().Get(ctx, APIService, metav1.GetOptions{})
	if err != nil {
		return err
	}
	available := false
	for _, c := range svc.Status.Conditions {
		if c.Type == apiregistrationv1.Available {
			if c.Status != apiregistrationv1.ConditionTrue {
				return fmt.Errorf("APIService %s not available: %s: %s", APIService, c.Reason, c.Message)
			}
			available = true
		}
	}
	if !available {
		return fmt.Errorf("APIService %s has no Available condition yet", APIService)
	}
	err = kube.CoreV1().RESTClient().Get().AbsPath("/apis", svc.Spec.Group, svc.Spec.Version, "subnets").Param("limit", "1").Do(ctx).Error()
	if err != nil {
		return fmt.Errorf("APIService %s is Available, but a list of subnets through it failed: %w", APIService, err)
	}
	return nil
}

// workloadsReady returns nil when the KOS namespaces' Deployments,
// StatefulSets and DaemonSets have every desired pod Ready and up to date.
func workloadsReady(ctx context.Context, kube kubernetes.Interface) error {
	var notReady []string
	workloads := 0
	for _, ns := range Namespaces() {
		deploys, err := kube.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		sets, err := kube.AppsV1().StatefulSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		daemons, err := kube.AppsV1().DaemonSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		workloads += len(deploys.Items) + len(sets.Items) + len(daemons.Items)
		for _, d := range deploys.Items {
			want := ptrOr(d.Spec.Replicas, 1)
			if d.Status.ObservedGeneration < d.Generation || d.Status.ReadyReplicas != want || d.Status.UpdatedReplicas != want || d.Status.Replicas != want {
				notReady = append(notReady, fmt.Sprintf("Deployment %s/%s: %d of %d ready, %d updated, %d in all", ns, d.Name, d.Status.ReadyReplicas, want, d.Status.UpdatedReplicas, d.Status.Replicas))
			}
		}
		for _, s := range sets.Items {
			want := ptrOr(s.Spec.Replicas, 1)
			if s.Status.ObservedGeneration < s.Generation || s.Status.ReadyReplicas != want || s.Status.UpdatedReplicas != want {
				notReady = append(notReady, fmt.Sprintf("StatefulSet %s/%s: %d of %d ready, %d updated", ns, s.Name, s.Status.ReadyReplicas, want, s.Status.UpdatedReplicas))
			}
		}
		for _, d := range daemons.Items {
			want := d.Status.DesiredNumberScheduled
			if d.Status.ObservedGeneration < d.Generation || want == 0 || d.Status.NumberReady != want || d.Status.UpdatedNumberScheduled != want {
				notReady = append(notReady, fmt.Sprintf("DaemonSet %s/%s: %d of %d ready, %d updated", ns, d.Name, d.Status.NumberReady, want, d.Status.UpdatedNumberScheduled))
			}
		}
	}
	if workloads == 0 {
		return fmt.Errorf("no workloads in %s", strings.Join(Namespaces(), " or "))
	}
	if len(notReady) > 0 {
		return fmt.Errorf("not ready: %s", strings.Join(notReady, "; "))
	}
	return nil
}

func ptrOr(p *int32, def int32) int32 {
	if p == nil {
		return def
	}
	return *p
}
