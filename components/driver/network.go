package driver

// This file makes the run's virtual networks: their sizes, prefix
// lengths and CIDRs, one Subnet on a VNI of its own each.

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	networkapi "github.com/kos-sdn/kos/components/apis/network"
	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
)

// network is one virtual network of the run.
type network struct {
	index  int
	subnet string
	vni    uint32
	prefix int
	size   int
	// live holds the names of its attachments not deleted, in creation
	// order.
	live []string
}

// setUp finds the nodes, makes the namespace and the subnets, and waits
// until the subnets are validated.
func (d *Driver) setUp(ctx context.Context) error {
	nodes, err := d.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: d.cfg.NodeSelector})
	if err != nil {
		return fmt.Errorf("listing the nodes: %w", err)
	}
	for _, n := range nodes.Items {
		d.nodes = append(d.nodes, n.Name)
	}
	if len(d.nodes) == 0 {
		return fmt.Errorf("no node matches %q", d.cfg.NodeSelector)
	}
	slices.Sort(d.nodes)

	d.namespace = d.cfg.Namespace
	if d.namespace == "" {
		d.namespace = "kos-driver-" + d.cfg.RunID
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: d.namespace, Labels: map[string]string{RunLabel: d.cfg.RunID}}}
		if _, err := d.kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating namespace %s: %w", d.namespace, err)
		}
		d.createdNamespace = true
	}

	base := d.cfg.VNIBase
	if base == 0 {
		base = networkapi.MinVNI + uint32(d.intN(int(networkapi.MaxVNI-networkapi.MinVNI+1)-d.cfg.Networks))
	}
	var cidrs cidrAllocator
	for i := range d.cfg.Networks {
		d.randMu.Lock()
		size := d.cfg.Sizes.Sample(d.rand)
		d.randMu.Unlock()
		prefix := prefixFor(size)
		n := &network{index: i, subnet: fmt.Sprintf("net-%d", i), vni: base + uint32(i), prefix: prefix, size: size}
		s := &v1alpha1.Subnet{
			ObjectMeta: metav1.ObjectMeta{Name: n.subnet, Labels: map[string]string{RunLabel: d.cfg.RunID}},
			Spec:       v1alpha1.SubnetSpec{IPv4: cidrs.next(prefix).String(), VNI: n.vni},
		}
		if _, err := d.kos.NetworkV1alpha1().Subnets(d.namespace).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating subnet %s: %w", n.subnet, err)
		}
		d.networks = append(d.networks, n)
	}
	fmt.Fprintf(d.cfg.Out, "kos-driver run %s: namespace %s, %d networks (VNIs %d-%d, sizes %s: %d attachments), %d nodes, %.1f ops/s %s over %d threads\n",
		d.cfg.RunID, d.namespace, len(d.networks), base, base+uint32(len(d.networks))-1, d.cfg.Sizes, d.totalSize(), len(d.nodes), d.cfg.Rate, d.cfg.Arrivals, d.cfg.Threads)
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, d.cfg.ReadyTimeout, true, func(ctx context.Context) (bool, error) {
		list, err := d.kos.NetworkV1alpha1().Subnets(d.namespace).List(ctx, metav1.ListOptions{LabelSelector: RunLabel + "=" + d.cfg.RunID})
		if err != nil {
			return false, nil
		}
		for _, s := range list.Items {
			if !s.Status.Validated {
				return false, nil
			}
		}
		return len(list.Items) == len(d.networks), nil
	})
}

func (d *Driver) totalSize() int {
	t := 0
	for _, n := range d.networks {
		t += n.size
	}
	return t
}

// prefixFor returns the prefix length of a subnet for size attachments,
// with room for churn (a deleted attachment's address is free only once
// its lock is gone) and the addresses IPAM does not give out.
func prefixFor(size int) int {
	p := 30
	for p > 8 && (1<<(32-p)) < 2*size+4 {
		p--
	}
	return p
}

// cidrAllocator hands out consecutive aligned blocks of 10.0.0.0/8,
// starting again at the beginning when it runs out (VNIs apart may
// overlap).
type cidrAllocator struct{ next32 uint64 }

func (c *cidrAllocator) next(prefix int) netip.Prefix {
	size := uint64(1) << (32 - prefix)
	start := (c.next32 + size - 1) / size * size
	if start+size > 1<<24 {
		start = 0
	}
	c.next32 = start + size
	v := uint32(10<<24) + uint32(start)
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), prefix)
}
