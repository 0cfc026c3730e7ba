package channels

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kos-sdn/kos/channels/install"
)

// Installed lists every install record and every pending release on the
// cluster, sorted by namespace and name, with one LIST of namespaces
// (install.ReadInstalled).
func (c *Client) Installed(ctx context.Context) ([]Installed, error) {
	return install.ReadInstalled(ctx, c.Kube)
}

// WriteRecord sets the install record of an addon, and removes its pending
// inventory, with one JSON merge patch that touches only those annotations,
// as install.RecordFieldManager; it creates the namespace if it does not exist.
func (c *Client) WriteRecord(ctx context.Context, namespace, name string, r *install.Record) error {
	value, err := r.Encode()
	if err != nil {
		return err
	}
	key := install.AnnotationPrefix + name
	err = c.patchAnnotations(ctx, namespace, map[string]*string{key: &value, install.InventoryAnnotationPrefix + name: nil})
	if err != nil {
		return fmt.Errorf("writing install record %s on namespace %s: %w", key, namespace, err)
	}
	return nil
}

// writePending records, before a release is applied, which release it is
// and the kinds and namespaces the addon's objects may be found in, so that
// a run that dies half-way, or whose objects never become ready, leaves the
// next one what to prune and a reason to apply.
func (c *Client) writePending(ctx context.Context, namespace, name string, p *install.Pending) error {
	value, err := p.Encode()
	if err != nil {
		return err
	}
	key := install.InventoryAnnotationPrefix + name
	if err := c.patchAnnotations(ctx, namespace, map[string]*string{key: &value}); err != nil {
		return fmt.Errorf("writing pending inventory %s on namespace %s: %w", key, namespace, err)
	}
	return nil
}

// patchAnnotations sets (or, for nil values, removes) annotations of a
// namespace with a JSON merge patch as install.RecordFieldManager, creating the
// namespace if it does not exist.
func (c *Client) patchAnnotations(ctx context.Context, namespace string, annotations map[string]*string) error {
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": annotations},
	})
	if err != nil {
		return fmt.Errorf("encoding patch: %w", err)
	}
	opts := metav1.PatchOptions{FieldManager: install.RecordFieldManager}
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
	_, err = namespaces.Create(ctx, ns, metav1.CreateOptions{FieldManager: install.RecordFieldManager})
	if apierrors.IsAlreadyExists(err) {
		_, err = namespaces.Patch(ctx, namespace, types.MergePatchType, patch, opts)
	}
	return err
}
