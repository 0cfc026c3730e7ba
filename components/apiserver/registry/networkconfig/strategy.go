// Package networkconfig holds the storage of NetworkConfigs, the cluster's
// one data plane configuration: how the server creates, updates and
// validates it, and the guard against unsafe changes, which needs to know
// whether NetworkAttachments exist.
package networkconfig

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
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/kos-sdn/kos/components/apis/network"
	"github.com/kos-sdn/kos/components/apis/network/validation"
	"github.com/kos-sdn/kos/components/apiserver/registry"
)

// CountFunc returns how many NetworkAttachments exist, in every namespace.
type CountFunc func(ctx context.Context) (int, error)

// strategy is how NetworkConfigs are created and how their main endpoint
// updates them: clients write the spec, kos-controller-manager the status.
type strategy struct {
	registry.Strategy
	attachments CountFunc
}

func newStrategy(typer runtime.ObjectTyper, clk clock.PassiveClock, attachments CountFunc) *strategy {
	return &strategy{Strategy: registry.NewStrategy(typer, clk, registry.MainResetFields), attachments: attachments}
}

// NamespaceScoped returns false: a NetworkConfig belongs to the cluster.
func (*strategy) NamespaceScoped() bool { return false }

// PrepareForCreate drops any status the client sent: nothing is applied
// yet. It starts the write sections with the spec.
func (s *strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	cfg := obj.(*network.NetworkConfig)
	cfg.Status = network.NetworkConfigStatus{}
	cfg.Generation = 1
	cfg.ExtendedMetadata = network.ExtendedObjectMeta{Writes: network.WriteSet{}.Stamp(network.SectionSpec, s.Clock.Now())}
}

// PrepareForUpdate keeps the stored status and write sections, and moves
// the generation on when the spec changes.
func (s *strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	cfg, oldCfg := obj.(*network.NetworkConfig), old.(*network.NetworkConfig)
	cfg.Status = oldCfg.Status
	cfg.ExtendedMetadata = oldCfg.ExtendedMetadata
	if !equality.Semantic.DeepEqual(cfg.Spec, oldCfg.Spec) {
		cfg.Generation = oldCfg.Generation + 1
		cfg.ExtendedMetadata.Writes = oldCfg.ExtendedMetadata.Writes.Stamp(network.SectionSpec, s.Clock.Now())
	}
}

// Validate checks a new NetworkConfig.
func (*strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return validation.ValidateNetworkConfig(obj.(*network.NetworkConfig))
}

// ValidateUpdate checks an update, with the guard against unsafe changes.
// It counts the attachments only when the spec changes, so that metadata
// edits cost no list.
func (s *strategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	cfg, oldCfg := obj.(*network.NetworkConfig), old.(*network.NetworkConfig)
	n := 0
	if !equality.Semantic.DeepEqual(cfg.Spec, oldCfg.Spec) {
		var err error
		if n, err = s.attachments(ctx); err != nil {
			return field.ErrorList{field.InternalError(field.NewPath("spec"), err)}
		}
	}
	return validation.ValidateNetworkConfigUpdate(cfg, oldCfg, n)
}

// statusStrategy is how the status endpoint updates NetworkConfigs: only
// the status changes, and the server stamps the status section when it does.
type statusStrategy struct {
	*strategy
}

// GetResetFields returns the fields the status endpoint keeps as they were.
func (statusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return registry.StatusResetFields
}

// PrepareForUpdate keeps everything of the stored config but its status.
func (s statusStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	cfg, oldCfg := obj.(*network.NetworkConfig), old.(*network.NetworkConfig)
	cfg.Spec = oldCfg.Spec
	cfg.Generation = oldCfg.Generation
	registry.KeepMetadata(&cfg.ObjectMeta, &oldCfg.ObjectMeta)
	cfg.ExtendedMetadata = oldCfg.ExtendedMetadata
	if !equality.Semantic.DeepEqual(cfg.Status, oldCfg.Status) {
		cfg.ExtendedMetadata.Writes = oldCfg.ExtendedMetadata.Writes.Stamp(network.SectionStatus, s.Clock.Now())
	}
}

// ValidateUpdate checks a status update.
func (statusStrategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateNetworkConfigStatusUpdate(obj.(*network.NetworkConfig), old.(*network.NetworkConfig))
}

// GetAttrs returns the labels and selectable fields of a NetworkConfig.
func GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	cfg, ok := obj.(*network.NetworkConfig)
	if !ok {
		return nil, nil, fmt.Errorf("not a NetworkConfig: %T", obj)
	}
	return cfg.Labels, generic.ObjectMetaFieldsSet(&cfg.ObjectMeta, false), nil
}

// match returns the predicate that selects NetworkConfigs by label and field.
func match(label labels.Selector, field fields.Selector) storage.SelectionPredicate {
	return storage.SelectionPredicate{Label: label, Field: field, GetAttrs: GetAttrs}
}
