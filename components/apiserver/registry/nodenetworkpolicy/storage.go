package nodenetworkpolicy

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/utils/clock"

	"github.com/kos-sdn/kos/components/apis/network"
	"github.com/kos-sdn/kos/components/apiserver/registry"
)

// NewStorage returns the storage of NodeNetworkPolicies, kept where
// optsGetter says.
func NewStorage(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter) (*REST, error) {
	strategy := newStrategy(scheme, clock.RealClock{})
	store := &genericregistry.Store{
		NewFunc:                   func() runtime.Object { return &network.NodeNetworkPolicy{} },
		NewListFunc:               func() runtime.Object { return &network.NodeNetworkPolicyList{} },
		PredicateFunc:             match,
		DefaultQualifiedResource:  network.Resource("nodenetworkpolicies"),
		SingularQualifiedResource: network.Resource("nodenetworkpolicy"),

		CreateStrategy:      strategy,
		UpdateStrategy:      strategy,
		DeleteStrategy:      strategy,
		ResetFieldsStrategy: strategy,

		TableConvertor: table,
	}
	if err := store.CompleteWithOptions(&generic.StoreOptions{RESTOptions: optsGetter, AttrFunc: GetAttrs}); err != nil {
		return nil, fmt.Errorf("completing the node network policy store: %w", err)
	}
	return &REST{Store: store}, nil
}

// REST is the storage of the nodenetworkpolicies endpoint. Like
// networkconfigs it is in no category: they are the controller manager's
// output for agents, and a tenant's `kubectl get kos -n <namespace>` would
// fail on them for want of the right to list them.
type REST struct {
	*genericregistry.Store
}

var _ rest.ShortNamesProvider = &REST{}

// ShortNames returns the short names of the resource.
func (*REST) ShortNames() []string { return []string{"nnp"} }

// table renders NodeNetworkPolicies for kubectl get: NAME, NODE, VNI,
// POLICIES, AGE.
var table = registry.Table[*network.NodeNetworkPolicy]{
	Columns: []metav1.TableColumnDefinition{
		{Name: "Node", Type: "string", Description: "The node whose agent enforces it."},
		{Name: "VNI", Type: "integer", Description: "The virtual network."},
		{Name: "Policies", Type: "integer", Description: "How many policies select attachments of the network on the node."},
	},
	Cells: func(p *network.NodeNetworkPolicy) []any {
		return []any{p.Spec.Node, int64(p.Spec.VNI), int64(len(p.Spec.Policies))}
	},
}
