// Package iplock holds the storage of IPLocks: how the server creates, updates
// and validates them, and which fields select them.
package iplock

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/utils/clock"

	"github.com/kos-sdn/kos/components/apis/network"
	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/apis/network/validation"
	"github.com/kos-sdn/kos/components/apiserver/registry"
)

// strategy is how IPLocks are created and updated: clients write the spec, the
// server keeps the write sections.
type strategy struct {
	registry.Strategy
}

func newStrategy(typer runtime.ObjectTyper, clk clock.PassiveClock) *strategy {
	return &strategy{Strategy: registry.NewStrategy(typer, clk, registry.ResetFields([]string{"extendedMetadata"}))}
}

// PrepareForCreate starts the write sections with the spec.
func (s *strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	lock := obj.(*network.IPLock)
	lock.ExtendedMetadata = network.ExtendedObjectMeta{Writes: network.WriteSet{}.Stamp(network.SectionSpec, s.Clock.Now())}
}

// PrepareForUpdate keeps the stored write sections, and stamps the spec
// section when the spec changes (which validation then refuses).
func (s *strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	lock, oldLock := obj.(*network.IPLock), old.(*network.IPLock)
	lock.ExtendedMetadata = oldLock.ExtendedMetadata
	if !equality.Semantic.DeepEqual(lock.Spec, oldLock.Spec) {
		lock.ExtendedMetadata.Writes = oldLock.ExtendedMetadata.Writes.Stamp(network.SectionSpec, s.Clock.Now())
	}
}

// Validate checks a new lock.
func (*strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return validation.ValidateIPLock(obj.(*network.IPLock))
}

// ValidateUpdate checks an update: the spec is immutable.
func (*strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateIPLockUpdate(obj.(*network.IPLock), old.(*network.IPLock))
}

// GetAttrs returns the labels and selectable fields of an IPLock.
func GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	lock, ok := obj.(*network.IPLock)
	if !ok {
		return nil, nil, fmt.Errorf("not an IPLock: %T", obj)
	}
	return lock.Labels, generic.AddObjectMetaFieldsSet(fields.Set{
		v1alpha1.FieldSubnetName: lock.Spec.SubnetName,
	}, &lock.ObjectMeta, true), nil
}

// match returns the predicate that selects IPLocks by label and field.
func match(label labels.Selector, field fields.Selector) storage.SelectionPredicate {
	return storage.SelectionPredicate{Label: label, Field: field, GetAttrs: GetAttrs}
}
