package install

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// Installed is one install record found on the cluster.
type Installed struct {
	// Namespace holds the record.
	Namespace string `json:"namespace"`
	// Name is the addon's name.
	Name string `json:"name"`
	// Record is nil when the annotation does not parse.
	Record *Record `json:"record,omitempty"`
	// Invalid holds the annotation's value when it does not parse.
	Invalid string `json:"invalid,omitempty"`
	// Pending is the release a run started applying and did not finish;
	// nil when there is none (or it does not parse). An addon whose first
	// install did not finish has a Pending and neither Record nor Invalid.
	Pending *Pending `json:"pending,omitempty"`
}

// Records holds the annotations of some record namespaces: install records
// and pending inventories. A namespace that does not exist has a nil entry.
type Records map[string]map[string]string

// Record returns the parsed record of an addon, or nil when there is none or
// it does not parse: an unreadable record is treated as no record, which
// reinstalls the addon over it.
func (rs Records) Record(namespace, name string) *Record {
	value, ok := rs[namespace][AnnotationPrefix+name]
	if !ok {
		return nil
	}
	r, err := ParseRecord(value)
	if err != nil {
		klog.InfoS("Ignoring unreadable install record", "namespace", namespace, "addon", name, "err", err)
		return nil
	}
	return r
}

// Pending returns the pending release a run that did not finish left for
// an addon, or nil. An unreadable one is ignored: it only ever widens
// pruning and makes the recorded release apply again.
func (rs Records) Pending(namespace, name string) *Pending {
	value, ok := rs[namespace][InventoryAnnotationPrefix+name]
	if !ok {
		return nil
	}
	inv, err := ParseInventory(value)
	if err != nil {
		klog.InfoS("Ignoring unreadable pending inventory", "namespace", namespace, "addon", name, "err", err)
		return nil
	}
	return inv
}

// ReadRecords reads the install records of the given namespaces, with one
// GET per namespace.
func ReadRecords(ctx context.Context, kube kubernetes.Interface, namespaces []string) (Records, error) {
	rs := Records{}
	for _, ns := range namespaces {
		if _, done := rs[ns]; done {
			continue
		}
		obj, err := kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			rs[ns] = nil
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading install records in namespace %s: %w", ns, err)
		}
		rs[ns] = obj.Annotations
	}
	return rs, nil
}

// recordAnnotations returns the install record annotations of a namespace,
// keyed by addon name.
func recordAnnotations(ns *corev1.Namespace) map[string]string {
	out := map[string]string{}
	for k, v := range ns.Annotations {
		if name, ok := strings.CutPrefix(k, AnnotationPrefix); ok && name != "" {
			out[name] = v
		}
	}
	return out
}

// ReadInstalled lists every install record and every pending release on
// the cluster, sorted by namespace and name, with one LIST of namespaces.
func ReadInstalled(ctx context.Context, kube kubernetes.Interface) ([]Installed, error) {
	list, err := kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing namespaces: %w", err)
	}
	var out []Installed
	for i := range list.Items {
		ns := &list.Items[i]
		rs := Records{ns.Name: ns.Annotations}
		names := recordAnnotations(ns)
		for k := range ns.Annotations {
			if name, ok := strings.CutPrefix(k, InventoryAnnotationPrefix); ok && name != "" {
				if _, recorded := names[name]; !recorded {
					names[name] = ""
				}
			}
		}
		for name := range names {
			in := Installed{Namespace: ns.Name, Name: name, Pending: rs.Pending(ns.Name, name)}
			if value, ok := ns.Annotations[AnnotationPrefix+name]; ok {
				if r, err := ParseRecord(value); err != nil {
					in.Invalid = value
				} else {
					in.Record = r
				}
			}
			out = append(out, in)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}
