package iplock

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/utils/clock"

	"github.com/kos-sdn/kos/components/apis/network"
	"github.com/kos-sdn/kos/components/apiserver/registry"
)

// NewStorage returns the storage of IPLocks, kept where optsGetter says.
func NewStorage(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter) (*registry.REST, error) {
	strategy := newStrategy(scheme, clock.RealClock{})
	store := &genericregistry.Store{
		NewFunc:                   func() runtime.Object { return &network.IPLock{} },
		NewListFunc:               func() runtime.Object { return &network.IPLockList{} },
		PredicateFunc:             match,
		DefaultQualifiedResource:  network.Resource("iplocks"),
		SingularQualifiedResource: network.Resource("iplock"),

		CreateStrategy:      strategy,
		UpdateStrategy:      strategy,
		DeleteStrategy:      strategy,
		ResetFieldsStrategy: strategy,

		TableConvertor: table,
	}
	if err := store.CompleteWithOptions(&generic.StoreOptions{RESTOptions: optsGetter, AttrFunc: GetAttrs}); err != nil {
		return nil, fmt.Errorf("completing the IP lock store: %w", err)
	}
	return registry.NewREST(store, "ipl"), nil
}

// table renders IPLocks for kubectl get: NAME, SUBNET, OWNER, AGE.
var table = registry.Table[*network.IPLock]{
	Columns: []metav1.TableColumnDefinition{
		{Name: "Subnet", Type: "string", Description: "The Subnet the address was taken from."},
		{Name: "Owner", Type: "string", Description: "The NetworkAttachment that holds the address."},
	},
	Cells: func(l *network.IPLock) []any {
		owner := ""
		if ref := metav1.GetControllerOfNoCopy(l); ref != nil {
			owner = ref.Name
		}
		return []any{l.Spec.SubnetName, owner}
	},
}
