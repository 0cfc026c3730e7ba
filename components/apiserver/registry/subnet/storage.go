package subnet

import (
	"context"
	"fmt"
	"strconv"

	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/kos-sdn/kos/components/apis/network"
	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/apiserver/registry"
)

// Storage is the storage of Subnets: the main endpoint and /status.
type Storage struct {
	// Subnet serves subnets; a subnet in use cannot be deleted.
	Subnet *ProtectedREST
	// Status serves subnets/status.
	Status *registry.StatusREST
}

// NewStorage returns the storage of Subnets, kept where optsGetter says;
// users tells which attachments use a subnet, whose deletion they keep.
func NewStorage(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter, users UsersFunc) (*Storage, error) {
	strategy := newStrategy(scheme, clock.RealClock{})
	store := &genericregistry.Store{
		NewFunc:                   func() runtime.Object { return &network.Subnet{} },
		NewListFunc:               func() runtime.Object { return &network.SubnetList{} },
		PredicateFunc:             match,
		DefaultQualifiedResource:  network.Resource("subnets"),
		SingularQualifiedResource: network.Resource("subnet"),

		CreateStrategy:      strategy,
		UpdateStrategy:      strategy,
		DeleteStrategy:      strategy,
		ResetFieldsStrategy: strategy,

		TableConvertor: table,
	}
	options := &generic.StoreOptions{
		RESTOptions: optsGetter,
		AttrFunc:    GetAttrs,
		Indexers:    &cache.Indexers{storage.FieldIndex(v1alpha1.FieldVNI): vniIndex},
	}
	if err := store.CompleteWithOptions(options); err != nil {
		return nil, fmt.Errorf("completing the subnet store: %w", err)
	}
	strategy.rivals = cachedRivals(store)
	return &Storage{
		Subnet: NewProtectedREST(registry.NewREST(store, "sn"), users),
		Status: registry.NewStatusREST(store, statusStrategy{strategy}),
	}, nil
}

// cachedRivals lists the subnets of a VNI through store, from its watch cache
// (resourceVersion 0 accepts any cached state), in every namespace.
func cachedRivals(store *genericregistry.Store) rivalsFunc {
	return func(ctx context.Context, vni uint32) ([]*network.Subnet, error) {
		ctx = genericapirequest.WithNamespace(ctx, metav1.NamespaceAll)
		obj, err := store.List(ctx, &metainternalversion.ListOptions{
			FieldSelector:   fields.OneTermEqualSelector(v1alpha1.FieldVNI, strconv.FormatUint(uint64(vni), 10)),
			ResourceVersion: "0",
		})
		if err != nil {
			return nil, fmt.Errorf("listing the subnets of VNI %d: %w", vni, err)
		}
		list := obj.(*network.SubnetList)
		rivals := make([]*network.Subnet, 0, len(list.Items))
		for i := range list.Items {
			rivals = append(rivals, &list.Items[i])
		}
		return rivals, nil
	}
}

// table renders Subnets for kubectl get: NAME, VNI, CIDR, VALIDATED, AGE.
var table = registry.Table[*network.Subnet]{
	Columns: []metav1.TableColumnDefinition{
		{Name: "VNI", Type: "integer", Description: "VXLAN network identifier of the subnet's virtual network."},
		{Name: "CIDR", Type: "string", Description: "The subnet's IPv4 CIDR block."},
		{Name: "Validated", Type: "boolean", Description: "Whether the subnet was found to conflict with no other."},
	},
	Cells: func(s *network.Subnet) []any {
		return []any{int64(s.Spec.VNI), s.Spec.IPv4, s.Status.Validated}
	},
}
