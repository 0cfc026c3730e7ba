package agent_test

// This file holds the attachments of the agents' benchmarks: their names and
// how they spread over the nodes and networks, remote attachments written as
// another node's agent would, the fabric that times when each is programmed,
// and the check that no address is held twice.

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/fabric"
)

// uniqueAddresses returns an error naming the first address held by two
// attachments of one network.
func uniqueAddresses(atts map[string]*v1alpha1.NetworkAttachment) error {
	holders := map[string]string{}
	for _, a := range atts {
		key := fmt.Sprintf("%d/%s", a.Status.AddressVNI, a.Status.IPv4)
		if other, ok := holders[key]; ok {
			return fmt.Errorf("attachments %s and %s both hold address %s", other, a.Name, key)
		}
		holders[key] = a.Name
	}
	return nil
}

// createRemote creates an attachment on another node and writes its address
// and its host into its status.
func createRemote(ctx context.Context, atts interface {
	Create(context.Context, *v1alpha1.NetworkAttachment, metav1.CreateOptions) (*v1alpha1.NetworkAttachment, error)
	UpdateStatus(context.Context, *v1alpha1.NetworkAttachment, metav1.UpdateOptions) (*v1alpha1.NetworkAttachment, error)
}, name, node string, ip netip.Addr, vni uint32, host string) error {
	att, err := atts.Create(ctx, &v1alpha1.NetworkAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1alpha1.NetworkAttachmentSpec{Node: node, Subnet: "s1"},
	}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	att.Status.IPv4, att.Status.AddressVNI, att.Status.LockUID = ip.String(), vni, "bench-lock-"+name
	if att, err = atts.UpdateStatus(ctx, att, metav1.UpdateOptions{}); err != nil {
		return err
	}
	att.Status.HostIP = host
	_, err = atts.UpdateStatus(ctx, att, metav1.UpdateOptions{})
	return err
}

// timedFabric is a fabric that remembers when each remote attachment was
// first programmed on it.
type timedFabric struct {
	fabric.Interface

	mu         sync.Mutex
	programmed map[fabric.RemoteAttachment]time.Time
}

func (f *timedFabric) CreateRemote(ctx context.Context, atts ...fabric.RemoteAttachment) error {
	err := f.Interface.CreateRemote(ctx, atts...)
	if err == nil {
		now := time.Now()
		f.mu.Lock()
		for _, a := range atts {
			if _, ok := f.programmed[a]; !ok {
				f.programmed[a] = now
			}
		}
		f.mu.Unlock()
	}
	return err
}

func (f *timedFabric) at(a fabric.RemoteAttachment) (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.programmed[a]
	return t, ok
}

func (f *timedFabric) has(a fabric.RemoteAttachment) bool {
	_, ok := f.at(a)
	return ok
}

// remoteOf returns the remote attachment the other nodes of its network
// program for att.
func remoteOf(att *v1alpha1.NetworkAttachment) fabric.RemoteAttachment {
	ip, _ := netip.ParseAddr(att.Status.IPv4)
	host, _ := netip.ParseAddr(att.Status.HostIP)
	return fabric.RemoteAttachment{VNI: att.Status.AddressVNI, IP: ip, HostIP: host}
}

func benchName(s int) string { return fmt.Sprintf("a%d", s) }

// benchNodeOf returns the agent index of the s-th attachment: the
// attachments of network j land in turn on the benchSpread consecutive
// nodes starting at node 2j.
func benchNodeOf(s, agents int) int {
	networks := max(1, agents/2)
	j := s % networks
	return (2*j + (s/networks)%benchSpread) % agents
}

func benchNode(k *api, i int) string { return k.node(fmt.Sprintf("n%03d", i)) }

// benchHost returns the underlay address of node i: 192.168.x.y.
func benchHost(i int) string { return fmt.Sprintf("192.168.%d.%d", 1+i/250, 1+i%250) }
