package cniserver

import (
	"context"
	"net/netip"
	"sync"

	"github.com/containernetworking/cni/pkg/types"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kosclient "github.com/kos-sdn/kos/components/generated/clientset/versioned"
)

// subnets reads the prefix lengths of subnets and remembers them. A
// subnet's CIDR block cannot change, so what was read holds for as long as
// that subnet lives: only a subnet of the same name made again, which an
// attachment's SubnetCreationTime tells apart, is read anew. An ADD thus
// reads a subnet once per node, not once per pod: under load the read
// took a quarter of a second of each ADD.
type subnets struct {
	client kosclient.Interface

	mu   sync.Mutex
	read map[string]subnetPrefix // by namespace/name
}

// subnetPrefix is what was read of a subnet.
type subnetPrefix struct {
	created metav1.Time
	bits    int
}

// prefix returns the prefix length of the subnet ns/name, or a CNI error
// that says it does not exist. It reads the subnet unless it has read it
// before and, when created is not nil, the subnet read was created then.
func (s *subnets) prefix(ctx context.Context, ns, name string, created *metav1.Time) (int, *types.Error) {
	key := ns + "/" + name
	s.mu.Lock()
	p, ok := s.read[key]
	s.mu.Unlock()
	if ok && (created == nil || created.Equal(&p.created)) {
		return p.bits, nil
	}
	subnet, err := s.client.NetworkV1alpha1().Subnets(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		s.forget(key)
		return 0, cniError(types.ErrInvalidNetworkConfig, "subnet %s not found in namespace %s", name, ns)
	}
	if err != nil {
		return 0, cniError(types.ErrTryAgainLater, "reading subnet %s in namespace %s: %v", name, ns, err)
	}
	cidr, err := netip.ParsePrefix(subnet.Spec.IPv4)
	if err != nil {
		return 0, cniError(types.ErrInvalidNetworkConfig, "subnet %s in namespace %s has no valid CIDR block (%q): %v", name, ns, subnet.Spec.IPv4, err)
	}
	s.mu.Lock()
	if s.read == nil {
		s.read = map[string]subnetPrefix{}
	}
	s.read[key] = subnetPrefix{created: subnet.CreationTimestamp, bits: cidr.Bits()}
	s.mu.Unlock()
	return cidr.Bits(), nil
}

func (s *subnets) forget(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.read, key)
}
