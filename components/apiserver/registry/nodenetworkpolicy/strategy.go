// Package nodenetworkpolicy holds the storage of NodeNetworkPolicies: how
// the server creates, updates and validates them, and which fields select
// them.
package nodenetworkpolicy

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

// strategy is how NodeNetworkPolicies are created and updated: the
// controller manager writes the spec, the server keeps the write sections.
type strategy struct {
	registry.Strategy
}

func newStrategy(typer runtime.ObjectTyper, clk clock.PassiveClock) *strategy {
	return &strategy{Strategy: registry.NewStrategy(typer, clk, registry.ResetFields([]string{"extendedMetadata"}))}
}

// PrepareForCreate starts the write sections with the spec.
func (s *strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	p := obj.(*network.NodeNetworkPolicy)
	p.ExtendedMetadata = network.ExtendedObjectMeta{Writes: network.WriteSet{}.Stamp(network.SectionSpec, s.Clock.Now())}
}

// PrepareForUpdate keeps the stored write sections and stamps the spec
// section when the spec changes.
func (s *strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	p, oldP := obj.(*network.NodeNetworkPolicy), old.(*network.NodeNetworkPolicy)
	p.ExtendedMetadata = oldP.ExtendedMetadata
	if !equality.Semantic.DeepEqual(p.Spec, oldP.Spec) {
		p.ExtendedMetadata.Writes = oldP.ExtendedMetadata.Writes.Stamp(network.SectionSpec, s.Clock.Now())
	}
}

// Validate checks a new NodeNetworkPolicy.
func (*strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return validation.ValidateNodeNetworkPolicy(obj.(*network.NodeNetworkPolicy))
}

// ValidateUpdate checks an update: node and VNI are immutable.
func (*strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateNodeNetworkPolicyUpdate(obj.(*network.NodeNetworkPolicy), old.(*network.NodeNetworkPolicy))
}

// GetAttrs returns the labels and selectable fields of a NodeNetworkPolicy.
func GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	p, ok := obj.(*network.NodeNetworkPolicy)
	if !ok {
		return nil, nil, fmt.Errorf("not a NodeNetworkPolicy: %T", obj)
	}
	return p.Labels, generic.AddObjectMetaFieldsSet(fields.Set{
		v1alpha1.FieldNode: p.Spec.Node,
		v1alpha1.FieldVNI:  fmt.Sprint(p.Spec.VNI),
	}, &p.ObjectMeta, true), nil
}

// match returns the predicate that selects NodeNetworkPolicies by label and
// field.
func match(label labels.Selector, field fields.Selector) storage.SelectionPredicate {
	return storage.SelectionPredicate{Label: label, Field: field, GetAttrs: GetAttrs}
}
