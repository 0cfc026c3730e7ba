package pki

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	apiregistrationclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset/typed/apiregistration/v1"
)

// EnsureCABundle makes caPEM the CA bundle (spec.caBundle) of the existing
// APIService name, by a server-side apply of that one field as
// FieldManager. Owning the field is what keeps it: an applier that applies
// the APIService without a CA bundle, as channels does, leaves it alone. It
// writes nothing when the bundle is already caPEM and owned so. A missing
// APIService is an error: the addon that defines it must be applied first.
func EnsureCABundle(ctx context.Context, client apiregistrationclient.APIServiceInterface, name string, caPEM []byte) (Result, error) {
	r := Result{Object: "apiservice " + name, Action: Kept}
	svc, err := client.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return r, fmt.Errorf("apiservice %s does not exist yet (apply it first): %w", name, err)
	case err != nil:
		return r, apiServiceError(err, "reading apiservice "+name, "get", name)
	}
	if bytes.Equal(svc.Spec.CABundle, caPEM) && ownsCABundle(svc.ManagedFields) {
		return r, nil
	}
	patch, err := json.Marshal(map[string]any{
		"apiVersion": apiregistrationv1.SchemeGroupVersion.String(),
		"kind":       "APIService",
		"metadata":   map[string]any{"name": name},
		"spec":       map[string]any{"caBundle": caPEM},
	})
	if err != nil {
		return r, fmt.Errorf("encoding the caBundle patch: %w", err)
	}
	// Force takes the field over from whoever set it before, such as an
	// older manifest that carried a bundle.
	force := true
	_, err = client.Patch(ctx, name, types.ApplyPatchType, patch, metav1.PatchOptions{FieldManager: FieldManager, Force: &force})
	if err != nil {
		return r, apiServiceError(err, "patching the caBundle of apiservice "+name, "patch", name)
	}
	r.Action = Patched
	klog.FromContext(ctx).V(2).Info("Set the CA bundle of an APIService", "apiService", name)
	return r, nil
}

// ownsCABundle reports whether FieldManager applied spec.caBundle.
func ownsCABundle(entries []metav1.ManagedFieldsEntry) bool {
	for _, e := range entries {
		if e.Manager != FieldManager || e.Operation != metav1.ManagedFieldsOperationApply || e.FieldsV1 == nil {
			continue
		}
		var fields struct {
			Spec map[string]json.RawMessage `json:"f:spec"`
		}
		if err := json.Unmarshal(e.FieldsV1.Raw, &fields); err != nil {
			// Unreadable ownership only costs one more apply.
			continue
		}
		if _, ok := fields.Spec["f:caBundle"]; ok {
			return true
		}
	}
	return false
}

// apiServiceError wraps an error of a request on an APIService with what
// was being done and, when RBAC denied it, what to grant.
func apiServiceError(err error, doing, verb, name string) error {
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("%s: grant %s on apiservices.apiregistration.k8s.io named %s to this identity: %w", doing, verb, name, err)
	}
	return fmt.Errorf("%s: %w", doing, err)
}
