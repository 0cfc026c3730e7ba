// Package networkattachment holds the storage of NetworkAttachments: how the
// server creates, updates and validates them, which write section each status
// change belongs to, and which fields select them.
package networkattachment

import (
	"context"
	"fmt"
	"strconv"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/utils/clock"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/kos-sdn/kos/components/apis/network"
	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/apis/network/validation"
	"github.com/kos-sdn/kos/components/apiserver/registry"
)

// strategy is how NetworkAttachments are created and how their main endpoint
// updates them: clients write the spec, the server keeps the status and the
// write sections.
type strategy struct {
	registry.Strategy
}

func newStrategy(typer runtime.ObjectTyper, clk clock.PassiveClock) *strategy {
	return &strategy{Strategy: registry.NewStrategy(typer, clk, registry.MainResetFields)}
}

// PrepareForCreate drops any status the client sent, starts the write
// sections with the spec and the generation at 1, and sets the conditions of
// an attachment without an address.
func (s *strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	att := obj.(*network.NetworkAttachment)
	now := s.Clock.Now()
	att.Generation = 1
	att.Status = network.NetworkAttachmentStatus{}
	att.ExtendedMetadata = network.ExtendedObjectMeta{Writes: network.WriteSet{}.Stamp(network.SectionSpec, now)}
	setConditions(att, nil, now)
}

// PrepareForUpdate keeps the stored status and write sections; when the
// spec changes, it stamps the spec section and counts a new generation. It
// derives the conditions again: a new postCreateExec may be pending, and
// an attachment stored before the server derived conditions gets them on
// any write.
func (s *strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	att, oldAtt := obj.(*network.NetworkAttachment), old.(*network.NetworkAttachment)
	att.Status = oldAtt.Status
	att.ExtendedMetadata = oldAtt.ExtendedMetadata
	now := s.Clock.Now()
	if !equality.Semantic.DeepEqual(att.Spec, oldAtt.Spec) {
		att.Generation = oldAtt.Generation + 1
		att.ExtendedMetadata.Writes = oldAtt.ExtendedMetadata.Writes.Stamp(network.SectionSpec, now)
	}
	setConditions(att, oldAtt.Status.Conditions, now)
}

// Validate checks a new attachment.
func (*strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return validation.ValidateNetworkAttachment(obj.(*network.NetworkAttachment))
}

// ValidateUpdate checks an update: spec.node and spec.subnet are immutable.
func (*strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateNetworkAttachmentUpdate(obj.(*network.NetworkAttachment), old.(*network.NetworkAttachment))
}

// statusStrategy is how the status endpoint updates NetworkAttachments: only
// the status changes, and the server stamps each status section that does.
type statusStrategy struct {
	*strategy
}

// GetResetFields returns the fields the status endpoint keeps as they were.
func (statusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return registry.StatusResetFields
}

// PrepareForUpdate keeps everything of the stored attachment but its status,
// stamps the sections of the status that changed, and derives the
// conditions from the new status, whatever the client wrote into them but
// a stale agent's Unknown (setStatusConditions).
func (s statusStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	att, oldAtt := obj.(*network.NetworkAttachment), old.(*network.NetworkAttachment)
	att.Spec = oldAtt.Spec
	registry.KeepMetadata(&att.ObjectMeta, &oldAtt.ObjectMeta)
	att.ExtendedMetadata = oldAtt.ExtendedMetadata
	now := s.Clock.Now()
	changed := ChangedStatusSections(&att.Status, &oldAtt.Status)
	for _, sec := range changed {
		att.ExtendedMetadata.Writes = att.ExtendedMetadata.Writes.Stamp(sec, now)
	}
	setStatusConditions(att, att.Status.Conditions, oldAtt.Status.Conditions, len(changed) > 0, now)
}

// ChangedStatusSections returns the write sections (network.SectionAddress,
// SectionImpl, SectionExecReport) in which status differs from old, in that
// order. Nil and empty lists are the same.
func ChangedStatusSections(status, old *network.NetworkAttachmentStatus) []string {
	var changed []string
	for _, sec := range statusSections {
		if !equality.Semantic.DeepEqual(sec.part(status), sec.part(old)) {
			changed = append(changed, sec.name)
		}
	}
	return changed
}

// statusSections maps each write section of an attachment's status to the
// fields it covers.
var statusSections = []struct {
	name string
	part func(*network.NetworkAttachmentStatus) any
}{
	{network.SectionAddress, func(st *network.NetworkAttachmentStatus) any {
		return struct {
			IPv4               string
			AddressVNI         uint32
			LockUID            string
			AddressContention  bool
			IPAMErrors         []string
			SubnetCreationTime *metav1.Time
		}{st.IPv4, st.AddressVNI, st.LockUID, st.AddressContention, st.Errors.IPAM, st.SubnetCreationTime}
	}},
	{network.SectionImpl, func(st *network.NetworkAttachmentStatus) any {
		return struct {
			MACAddress, IfcName, HostIP string
			MTU                         int32
			HostErrors                  []string
		}{st.MACAddress, st.IfcName, st.HostIP, st.MTU, st.Errors.Host}
	}},
	{network.SectionExecReport, func(st *network.NetworkAttachmentStatus) any {
		return st.PostCreateExecReport
	}},
}

// ValidateUpdate checks a status update: the addresses in it must parse.
func (statusStrategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateNetworkAttachmentStatusUpdate(obj.(*network.NetworkAttachment), old.(*network.NetworkAttachment))
}

// GetAttrs returns the labels and selectable fields of a NetworkAttachment.
func GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	att, ok := obj.(*network.NetworkAttachment)
	if !ok {
		return nil, nil, fmt.Errorf("not a NetworkAttachment: %T", obj)
	}
	return att.Labels, selectableFields(att), nil
}

func selectableFields(att *network.NetworkAttachment) fields.Set {
	return generic.AddObjectMetaFieldsSet(fields.Set{
		v1alpha1.FieldNode:       att.Spec.Node,
		v1alpha1.FieldSubnet:     att.Spec.Subnet,
		v1alpha1.FieldIPv4:       att.Status.IPv4,
		v1alpha1.FieldHostIP:     att.Status.HostIP,
		v1alpha1.FieldAddressVNI: strconv.FormatUint(uint64(att.Status.AddressVNI), 10),
	}, &att.ObjectMeta, true)
}

// match returns the predicate that selects NetworkAttachments by label and
// field. The server's cache indexes the two fields the node agents select by.
func match(label labels.Selector, field fields.Selector) storage.SelectionPredicate {
	return storage.SelectionPredicate{
		Label:       label,
		Field:       field,
		GetAttrs:    GetAttrs,
		IndexFields: []string{v1alpha1.FieldNode, v1alpha1.FieldAddressVNI},
	}
}

// nodeIndex indexes NetworkAttachments by spec.node in the server's cache.
func nodeIndex(obj any) ([]string, error) {
	att, ok := obj.(*network.NetworkAttachment)
	if !ok {
		return nil, fmt.Errorf("not a NetworkAttachment: %T", obj)
	}
	return []string{att.Spec.Node}, nil
}

// addressVNIIndex indexes NetworkAttachments by status.addressVNI in the
// server's cache.
func addressVNIIndex(obj any) ([]string, error) {
	att, ok := obj.(*network.NetworkAttachment)
	if !ok {
		return nil, fmt.Errorf("not a NetworkAttachment: %T", obj)
	}
	return []string{strconv.FormatUint(uint64(att.Status.AddressVNI), 10)}, nil
}

// addressVNITrigger lets the cache hand an attachment's watch events only to
// the watchers of its network among those that select by status.addressVNI.
func addressVNITrigger(obj runtime.Object) string {
	return strconv.FormatUint(uint64(obj.(*network.NetworkAttachment).Status.AddressVNI), 10)
}

// nodeTrigger lets the cache hand an attachment's watch events only to the
// watchers of its node among those that select by spec.node.
func nodeTrigger(obj runtime.Object) string {
	return obj.(*network.NetworkAttachment).Spec.Node
}
