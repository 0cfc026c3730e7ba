// Package subnet holds the storage of Subnets: how the server creates, updates
// and validates them, and which fields select them.
package subnet

import (
	"context"
	"fmt"
	"strconv"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/kos-sdn/kos/components/apis/network"
	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/apis/network/validation"
	"github.com/kos-sdn/kos/components/apiserver/registry"
)

// rivalsFunc lists the subnets with a VNI, in every namespace, from the server's
// own cache.
type rivalsFunc func(ctx context.Context, vni uint32) ([]*network.Subnet, error)

// strategy is how Subnets are created and how their main endpoint updates them:
// clients write the spec, the server keeps the status and the write sections.
type strategy struct {
	registry.Strategy
	// rivals is set once the store that serves it exists; nil skips the
	// conflict check.
	rivals rivalsFunc
}

func newStrategy(typer runtime.ObjectTyper, clk clock.PassiveClock) *strategy {
	return &strategy{Strategy: registry.NewStrategy(typer, clk, registry.MainResetFields)}
}

// PrepareForCreate drops any status the client sent: a new subnet is not
// validated. It starts the write sections with the spec.
func (s *strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	subnet := obj.(*network.Subnet)
	subnet.Status = network.SubnetStatus{}
	subnet.ExtendedMetadata = network.ExtendedObjectMeta{Writes: network.WriteSet{}.Stamp(network.SectionSpec, s.Clock.Now())}
}

// PrepareForUpdate keeps the stored status and write sections: the main
// endpoint changes only metadata and spec.
func (s *strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	subnet, oldSubnet := obj.(*network.Subnet), old.(*network.Subnet)
	subnet.Status = oldSubnet.Status
	subnet.ExtendedMetadata = oldSubnet.ExtendedMetadata
	if !equality.Semantic.DeepEqual(subnet.Spec, oldSubnet.Spec) {
		subnet.ExtendedMetadata.Writes = oldSubnet.ExtendedMetadata.Writes.Stamp(network.SectionSpec, s.Clock.Now())
	}
}

// Validate checks a new subnet, and checks it against the subnets of its VNI
// that the server's cache holds. The latter is best effort: two conflicting
// subnets created at once can both pass, which is why the subnet validator
// controller has the last word.
func (s *strategy) Validate(ctx context.Context, obj runtime.Object) field.ErrorList {
	subnet := obj.(*network.Subnet)
	errs := validation.ValidateSubnet(subnet)
	if len(errs) > 0 || s.rivals == nil {
		return errs
	}
	rivals, err := s.rivals(ctx, subnet.Spec.VNI)
	if err != nil {
		// The check is best effort; the subnet validator catches what it misses.
		klog.FromContext(ctx).Info("Skipping the subnet conflict check", "subnet", klog.KObj(subnet), "err", err)
		return nil
	}
	return validation.ValidateSubnetConflicts(subnet, rivals)
}

// ValidateUpdate checks an update: the spec is immutable.
func (*strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateSubnetUpdate(obj.(*network.Subnet), old.(*network.Subnet))
}

// statusStrategy is how the status endpoint updates Subnets: only the status
// changes, and the server stamps the status section when it does.
type statusStrategy struct {
	*strategy
}

// GetResetFields returns the fields the status endpoint keeps as they were.
func (statusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return registry.StatusResetFields
}

// PrepareForUpdate keeps everything of the stored subnet but its status.
func (s statusStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	subnet, oldSubnet := obj.(*network.Subnet), old.(*network.Subnet)
	subnet.Spec = oldSubnet.Spec
	registry.KeepMetadata(&subnet.ObjectMeta, &oldSubnet.ObjectMeta)
	subnet.ExtendedMetadata = oldSubnet.ExtendedMetadata
	if !equality.Semantic.DeepEqual(subnet.Status, oldSubnet.Status) {
		subnet.ExtendedMetadata.Writes = oldSubnet.ExtendedMetadata.Writes.Stamp(network.SectionStatus, s.Clock.Now())
	}
}

// ValidateUpdate checks a status update: a validated subnet stays validated.
func (statusStrategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateSubnetStatusUpdate(obj.(*network.Subnet), old.(*network.Subnet))
}

// GetAttrs returns the labels and selectable fields of a Subnet.
func GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	subnet, ok := obj.(*network.Subnet)
	if !ok {
		return nil, nil, fmt.Errorf("not a Subnet: %T", obj)
	}
	return subnet.Labels, selectableFields(subnet), nil
}

func selectableFields(subnet *network.Subnet) fields.Set {
	return generic.AddObjectMetaFieldsSet(fields.Set{
		v1alpha1.FieldVNI: strconv.FormatUint(uint64(subnet.Spec.VNI), 10),
	}, &subnet.ObjectMeta, true)
}

// match returns the predicate that selects Subnets by label and field; the
// server's cache keeps an index on spec.vni.
func match(label labels.Selector, field fields.Selector) storage.SelectionPredicate {
	return storage.SelectionPredicate{
		Label:       label,
		Field:       field,
		GetAttrs:    GetAttrs,
		IndexFields: []string{v1alpha1.FieldVNI},
	}
}

// vniIndex indexes Subnets by spec.vni in the server's cache.
func vniIndex(obj any) ([]string, error) {
	subnet, ok := obj.(*network.Subnet)
	if !ok {
		return nil, fmt.Errorf("not a Subnet: %T", obj)
	}
	return []string{strconv.FormatUint(uint64(subnet.Spec.VNI), 10)}, nil
}
