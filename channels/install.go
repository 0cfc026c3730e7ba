package channels

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
}

// records holds the install records of some namespaces, keyed by namespace
// and then addon name. A namespace that does not exist has no entry.
type records map[string]map[string]string

// lookup returns the parsed record of an addon, or nil when there is none or
// it does not parse: an unreadable record is treated as no record, which
// reinstalls the addon over it.
func (rs records) lookup(namespace, name string) *Record {
	value, ok := rs[namespace][name]
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

// readRecords reads the install records of the given namespaces, with one
// GET per namespace.
func (c *Client) readRecords(ctx context.Context, namespaces []string) (records, error) {
	rs := records{}
	for _, ns := range namespaces {
		if _, done := rs[ns]; done {
			continue
		}
		obj, err := c.Kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			rs[ns] = nil
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading install records in namespace %s: %w", ns, err)
		}
		rs[ns] = recordAnnotations(obj)
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

// Installed lists every install record on the cluster, sorted by namespace
// and name, with one LIST of namespaces.
func (c *Client) Installed(ctx context.Context) ([]Installed, error) {
	list, err := c.Kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing namespaces: %w", err)
	}
	var out []Installed
	for i := range list.Items {
		ns := &list.Items[i]
		for name, value := range recordAnnotations(ns) {
			in := Installed{Namespace: ns.Name, Name: name}
			if r, err := ParseRecord(value); err != nil {
				in.Invalid = value
			} else {
				in.Record = r
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

// WriteRecord sets the install record of an addon with a JSON merge patch
// that touches only its annotation, creating the namespace if it does not
// exist.
func (c *Client) WriteRecord(ctx context.Context, namespace, name string, r *Record) error {
	value, err := r.Encode()
	if err != nil {
		return err
	}
	key := AnnotationPrefix + name
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": map[string]string{key: value}},
	})
	if err != nil {
		return fmt.Errorf("encoding patch of %s: %w", key, err)
	}
	namespaces := c.Kube.CoreV1().Namespaces()
	_, err = namespaces.Patch(ctx, namespace, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
	if apierrors.IsNotFound(err) {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
			Name:        namespace,
			Annotations: map[string]string{key: value},
		}}
		_, err = namespaces.Create(ctx, ns, metav1.CreateOptions{FieldManager: FieldManager})
		if apierrors.IsAlreadyExists(err) {
			_, err = namespaces.Patch(ctx, namespace, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
		}
	}
	if err != nil {
		return fmt.Errorf("writing install record %s on namespace %s: %w", key, namespace, err)
	}
	return nil
}
