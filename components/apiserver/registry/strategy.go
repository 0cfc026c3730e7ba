package registry

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/storage/names"
	"k8s.io/utils/clock"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
)

// Strategy is what the create and update strategies of every KOS resource
// share. A resource's strategy embeds it and adds how it prepares, stamps and
// validates its own objects.
type Strategy struct {
	runtime.ObjectTyper
	names.NameGenerator
	// Clock stamps the write sections.
	Clock clock.PassiveClock
	// resetFields are the fields the endpoint keeps as they were, whatever
	// the client sends.
	resetFields map[fieldpath.APIVersion]*fieldpath.Set
}

// NewStrategy returns the shared part of a strategy whose endpoint keeps
// resetFields as they were.
func NewStrategy(typer runtime.ObjectTyper, clk clock.PassiveClock, resetFields map[fieldpath.APIVersion]*fieldpath.Set) Strategy {
	return Strategy{ObjectTyper: typer, NameGenerator: names.SimpleNameGenerator, Clock: clk, resetFields: resetFields}
}

// ResetFields returns the fields at paths (each a list of field names), in the
// form GetResetFields returns.
func ResetFields(paths ...[]string) map[fieldpath.APIVersion]*fieldpath.Set {
	set := fieldpath.NewSet()
	for _, path := range paths {
		parts := make([]any, len(path))
		for i, p := range path {
			parts[i] = p
		}
		set.Insert(fieldpath.MakePathOrDie(parts...))
	}
	return map[fieldpath.APIVersion]*fieldpath.Set{fieldpath.APIVersion(v1alpha1.SchemeGroupVersion.String()): set}
}

// The fields a main endpoint or a status endpoint keeps as they were.
var (
	// MainResetFields: a main endpoint writes neither the status nor the
	// write sections.
	MainResetFields = ResetFields([]string{"status"}, []string{"extendedMetadata"})
	// StatusResetFields: a status endpoint writes the status only.
	StatusResetFields = ResetFields(
		[]string{"spec"},
		[]string{"metadata", "labels"}, []string{"metadata", "annotations"},
		[]string{"metadata", "finalizers"}, []string{"metadata", "ownerReferences"},
		[]string{"extendedMetadata"},
	)
)

// NamespaceScoped returns true: every KOS resource lives in a namespace.
func (Strategy) NamespaceScoped() bool { return true }

// WarningsOnCreate returns no warnings.
func (Strategy) WarningsOnCreate(context.Context, runtime.Object) []string { return nil }

// AllowCreateOnUpdate returns false: objects are created by POST only. For an
// IPLock creating is what takes an address, and a PUT must not take one by
// accident.
func (Strategy) AllowCreateOnUpdate(context.Context) bool { return false }

// AllowUnconditionalUpdate returns true: an update need not name a
// resourceVersion.
func (Strategy) AllowUnconditionalUpdate(context.Context) bool { return true }

// Canonicalize does nothing: KOS objects have one form.
func (Strategy) Canonicalize(runtime.Object) {}

// WarningsOnUpdate returns no warnings.
func (Strategy) WarningsOnUpdate(context.Context, runtime.Object, runtime.Object) []string {
	return nil
}

// GetResetFields returns the fields the endpoint keeps as they were.
func (s Strategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return s.resetFields
}

// KeepMetadata copies onto meta what a status update must not change of the
// stored object's metadata: labels, annotations, finalizers and owners.
func KeepMetadata(meta, stored *metav1.ObjectMeta) {
	meta.Labels, meta.Annotations = stored.Labels, stored.Annotations
	meta.Finalizers, meta.OwnerReferences = stored.Finalizers, stored.OwnerReferences
}
