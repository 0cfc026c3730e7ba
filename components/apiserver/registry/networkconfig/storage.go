package networkconfig

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/utils/clock"

	"github.com/kos-sdn/kos/components/apis/network"
	"github.com/kos-sdn/kos/components/apiserver/registry"
)

// Storage is the storage of NetworkConfigs: the main endpoint and /status.
type Storage struct {
	// NetworkConfig serves networkconfigs.
	NetworkConfig *REST
	// Status serves networkconfigs/status.
	Status *registry.StatusREST
}

// NewStorage returns the storage of NetworkConfigs, kept where optsGetter
// says; attachments counts the NetworkAttachments, for the guard against
// unsafe changes.
func NewStorage(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter, attachments CountFunc) (*Storage, error) {
	strategy := newStrategy(scheme, clock.RealClock{}, attachments)
	store := &genericregistry.Store{
		NewFunc:                   func() runtime.Object { return &network.NetworkConfig{} },
		NewListFunc:               func() runtime.Object { return &network.NetworkConfigList{} },
		PredicateFunc:             match,
		DefaultQualifiedResource:  network.Resource("networkconfigs"),
		SingularQualifiedResource: network.Resource("networkconfig"),

		CreateStrategy:      strategy,
		UpdateStrategy:      strategy,
		DeleteStrategy:      strategy,
		ResetFieldsStrategy: strategy,

		TableConvertor: table,
	}
	if err := store.CompleteWithOptions(&generic.StoreOptions{RESTOptions: optsGetter, AttrFunc: GetAttrs}); err != nil {
		return nil, fmt.Errorf("completing the networkconfig store: %w", err)
	}
	return &Storage{
		NetworkConfig: &REST{Store: store, attachments: attachments},
		Status:        registry.NewStatusREST(store, statusStrategy{strategy}),
	}, nil
}

// REST is the storage of the networkconfigs endpoint. Unlike the other KOS
// resources it is in no category: the cluster's configuration is an
// administrator's, and a tenant's `kubectl get kos -n <namespace>`, which
// lists every resource of the category, would fail on it for want of the
// right to list it.
//
// Deleting the NetworkConfig while attachments exist is refused unless it
// carries the force annotation: kos-controller-manager would create it
// again with an overlay MTU computed anew from the nodes' underlays, the
// silent recomputation the configuration exists to prevent.
type REST struct {
	*genericregistry.Store
	attachments CountFunc
}

var _ rest.ShortNamesProvider = &REST{}

// ShortNames returns the short names of the resource.
func (*REST) ShortNames() []string { return []string{"netconf"} }

// Delete deletes the NetworkConfig name unless attachments exist and it is
// not forced.
func (r *REST) Delete(ctx context.Context, name string, deleteValidation rest.ValidateObjectFunc, options *metav1.DeleteOptions) (runtime.Object, bool, error) {
	return r.Store.Delete(ctx, name, r.unused(deleteValidation), options)
}

// DeleteCollection deletes the NetworkConfigs listOptions selects, each
// under the same rule as Delete.
func (r *REST) DeleteCollection(ctx context.Context, deleteValidation rest.ValidateObjectFunc, options *metav1.DeleteOptions, listOptions *metainternalversion.ListOptions) (runtime.Object, error) {
	return r.Store.DeleteCollection(ctx, r.unused(deleteValidation), options, listOptions)
}

// unused returns a deletion check that runs validate (admission), then
// refuses the deletion of a NetworkConfig, unforced, while attachments
// exist.
func (r *REST) unused(validate rest.ValidateObjectFunc) rest.ValidateObjectFunc {
	return func(ctx context.Context, obj runtime.Object) error {
		if validate != nil {
			if err := validate(ctx, obj); err != nil {
				return err
			}
		}
		cfg, ok := obj.(*network.NetworkConfig)
		if !ok {
			return apierrors.NewInternalError(fmt.Errorf("deleting a networkconfig: got a %T", obj))
		}
		if cfg.Annotations[network.ForceUnsafeChangeAnnotation] == "true" {
			return nil
		}
		n, err := r.attachments(ctx)
		if err != nil {
			return apierrors.NewInternalError(err)
		}
		if n == 0 {
			return nil
		}
		noun := "NetworkAttachments exist"
		if n == 1 {
			noun = "NetworkAttachment exists"
		}
		return apierrors.NewConflict(network.Resource("networkconfigs"), cfg.Name, fmt.Errorf(
			"%d %s: kos-controller-manager would create the configuration again with an overlay MTU computed anew from the nodes' underlays; to delete it anyway, first set the annotation %s: \"true\" on it", n, noun, network.ForceUnsafeChangeAnnotation))
	}
}

// CountAttachments returns the CountFunc that counts the NetworkAttachments
// of every namespace through attachments, their storage. It reads one
// attachment and the count of the rest, not the whole list: a consistent
// read (no resourceVersion), so it sees every attachment created before
// the update began.
func CountAttachments(attachments rest.Lister) CountFunc {
	return func(ctx context.Context) (int, error) {
		ctx = genericapirequest.WithNamespace(ctx, metav1.NamespaceAll)
		obj, err := attachments.List(ctx, &metainternalversion.ListOptions{Limit: 1})
		if err != nil {
			return 0, fmt.Errorf("counting the NetworkAttachments: %w", err)
		}
		list, ok := obj.(*network.NetworkAttachmentList)
		if !ok {
			return 0, fmt.Errorf("counting the NetworkAttachments: got a %T", obj)
		}
		n := len(list.Items)
		switch {
		case list.RemainingItemCount != nil:
			n += int(*list.RemainingItemCount)
		case list.Continue != "":
			// More exist, uncounted; at least one.
			n++
		}
		return n, nil
	}
}

// table renders NetworkConfigs for kubectl get: NAME, MTU, PORT,
// APPLIED-MTU, APPLIED-PORT, TOO-SMALL, AGE.
var table = registry.Table[*network.NetworkConfig]{
	Columns: []metav1.TableColumnDefinition{
		{Name: "MTU", Type: "integer", Description: "The overlay MTU asked for (spec.overlayMTU)."},
		{Name: "Port", Type: "integer", Description: "The VXLAN tunnel port asked for (spec.tunnelPort)."},
		{Name: "Applied-MTU", Type: "integer", Description: "The overlay MTU applied, which agents use (status.overlayMTU)."},
		{Name: "Applied-Port", Type: "integer", Description: "The tunnel port applied, which agents use (status.tunnelPort)."},
		{Name: "Too-Small", Type: "integer", Description: "Nodes whose underlay cannot carry the overlay MTU (status.underlay.nodesTooSmall)."},
	},
	Cells: func(c *network.NetworkConfig) []any {
		return []any{optional(c.Spec.OverlayMTU), optional(c.Spec.TunnelPort),
			int64(c.Status.OverlayMTU), int64(c.Status.TunnelPort), int64(c.Status.Underlay.NodesTooSmall)}
	},
}

// optional renders an optional number: empty (shown as <none>) when unset.
func optional(v *int32) any {
	if v == nil {
		return ""
	}
	return int64(*v)
}
