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
	// Pending is the release a run started applying and did not finish;
	// nil when there is none (or it does not parse). An addon whose first
	// install did not finish has a Pending and neither Record nor Invalid.
	Pending *Pending `json:"pending,omitempty"`
}

// records holds the annotations of some record namespaces: install records
// and pending inventories. A namespace that does not exist has a nil entry.
type records map[string]map[string]string

// lookup returns the parsed record of an addon, or nil when there is none or
// it does not parse: an unreadable record is treated as no record, which
// reinstalls the addon over it.
func (rs records) lookup(namespace, name string) *Record {
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

// pending returns the pending release a run that did not finish left for
// an addon, or nil. An unreadable one is ignored: it only ever widens
// pruning and makes the recorded release apply again.
func (rs records) pending(namespace, name string) *Pending {
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

// Installed lists every install record and every pending release on the
// cluster, sorted by namespace and name, with one LIST of namespaces.
func (c *Client) Installed(ctx context.Context) ([]Installed, error) {
	list, err := c.Kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing namespaces: %w", err)
	}
	var out []Installed
	for i := range list.Items {
		ns := &list.Items[i]
		rs := records{ns.Name: ns.Annotations}
		names := recordAnnotations(ns)
		for k := range ns.Annotations {
			if name, ok := strings.CutPrefix(k, InventoryAnnotationPrefix); ok && name != "" {
				if _, recorded := names[name]; !recorded {
					names[name] = ""
				}
			}
		}
		for name := range names {
			in := Installed{Namespace: ns.Name, Name: name, Pending: rs.pending(ns.Name, name)}
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

// WriteRecord sets the install record of an addon, and removes its pending
// inventory, with one JSON merge patch that touches only those annotations,
// as RecordFieldManager; it creates the namespace if it does not exist.
func (c *Client) WriteRecord(ctx context.Context, namespace, name string, r *Record) error {
	value, err := r.Encode()
	if err != nil {
		return err
	}
	key := AnnotationPrefix + name
	err = c.patchAnnotations(ctx, namespace, map[string]*string{key: &value, InventoryAnnotationPrefix + name: nil})
	if err != nil {
		return fmt.Errorf("writing install record %s on namespace %s: %w", key, namespace, err)
	}
	return nil
}

// writePending records, before a release is applied, which release it is
// and the kinds and namespaces the addon's objects may be found in, so that
// a run that dies half-way, or whose objects never become ready, leaves the
// next one what to prune and a reason to apply.
func (c *Client) writePending(ctx context.Context, namespace, name string, p *Pending) error {
	value, err := p.encode()
	if err != nil {
		return err
	}
	key := InventoryAnnotationPrefix + name
	if err := c.patchAnnotations(ctx, namespace, map[string]*string{key: &value}); err != nil {
		return fmt.Errorf("writing pending inventory %s on namespace %s: %w", key, namespace, err)
	}
	return nil
}

// patchAnnotations sets (or, for nil values, removes) annotations of a
// namespace with a JSON merge patch as RecordFieldManager, creating the
// namespace if it does not exist.
func (c *Client) patchAnnotations(ctx context.Context, namespace string, annotations map[string]*string) error {
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": annotations},
	})
	if err != nil {
		return fmt.Errorf("encoding patch: %w", err)
	}
	opts := metav1.PatchOptions{FieldManager: RecordFieldManager}
	namespaces := c.Kube.CoreV1().Namespaces()
	_, err = namespaces.Patch(ctx, namespace, types.MergePatchType, patch, opts)
	if !apierrors.IsNotFound(err) {
		return err
	}
	set := map[string]string{}
	for k, v := range annotations {
		if v != nil {
			set[k] = *v
		}
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace, Annotations: set}}
	_, err = namespaces.Create(ctx, ns, metav1.CreateOptions{FieldManager: RecordFieldManager})
	if apierrors.IsAlreadyExists(err) {
		_, err = namespaces.Patch(ctx, namespace, types.MergePatchType, patch, opts)
	}
	return err
}
