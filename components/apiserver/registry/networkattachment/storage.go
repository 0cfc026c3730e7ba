package networkattachment

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/kos-sdn/kos/components/apis/network"
	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/apiserver/registry"
)

// Storage is the storage of NetworkAttachments: the main endpoint and /status.
type Storage struct {
	// NetworkAttachment serves networkattachments.
	NetworkAttachment *registry.REST
	// Status serves networkattachments/status.
	Status *registry.StatusREST
}

// NewStorage returns the storage of NetworkAttachments, kept where optsGetter says.
func NewStorage(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter) (*Storage, error) {
	strategy := newStrategy(scheme, clock.RealClock{})
	store := &genericregistry.Store{
		NewFunc:                   func() runtime.Object { return &network.NetworkAttachment{} },
		NewListFunc:               func() runtime.Object { return &network.NetworkAttachmentList{} },
		PredicateFunc:             match,
		DefaultQualifiedResource:  network.Resource("networkattachments"),
		SingularQualifiedResource: network.Resource("networkattachment"),

		CreateStrategy:      strategy,
		UpdateStrategy:      strategy,
		DeleteStrategy:      strategy,
		ResetFieldsStrategy: strategy,

		TableConvertor: table,
	}
	options := &generic.StoreOptions{
		// Node agents watch their node's attachments and, per network,
		// the network's: a watch cache per trigger hands each event to
		// the watchers of its node and of its network only.
		RESTOptions: registry.CachePerTrigger(optsGetter),
		AttrFunc:    GetAttrs,
		TriggerFunc: storage.IndexerFuncs{
			v1alpha1.FieldNode:       nodeTrigger,
			v1alpha1.FieldAddressVNI: addressVNITrigger,
		},
		Indexers: &cache.Indexers{
			storage.FieldIndex(v1alpha1.FieldNode):       nodeIndex,
			storage.FieldIndex(v1alpha1.FieldAddressVNI): addressVNIIndex,
		},
	}
	if err := store.CompleteWithOptions(options); err != nil {
		return nil, fmt.Errorf("completing the network attachment store: %w", err)
	}
	return &Storage{
		NetworkAttachment: registry.NewREST(store, "na"),
		Status:            registry.NewStatusREST(store, statusStrategy{strategy}),
	}, nil
}

// table renders NetworkAttachments for kubectl get: NAME, SUBNET, NODE, IPV4,
// MAC, HOST IP, READY, AGE, and with -o wide REASON.
var table = registry.Table[*network.NetworkAttachment]{
	Columns: []metav1.TableColumnDefinition{
		{Name: "Subnet", Type: "string", Description: "The Subnet the address comes from."},
		{Name: "Node", Type: "string", Description: "The node of the interface."},
		{Name: "IPv4", Type: "string", Description: "The address of the interface."},
		{Name: "MAC", Type: "string", Description: "The MAC address of the interface."},
		{Name: "Host IP", Type: "string", Description: "The IP address of the node."},
		{Name: "Ready", Type: "string", Description: "The status of the Ready condition: True once the interface is ready for use."},
		{Name: "Reason", Type: "string", Priority: 1, Description: "The reason of the Ready condition: what the interface waits for."},
	},
	Cells: func(a *network.NetworkAttachment) []any {
		var ready, reason string
		if c := meta.FindStatusCondition(a.Status.Conditions, v1alpha1.NetworkAttachmentReady); c != nil {
			ready, reason = string(c.Status), c.Reason
		}
		return []any{a.Spec.Subnet, a.Spec.Node, a.Status.IPv4, a.Status.MACAddress, a.Status.HostIP, ready, reason}
	},
}
