package agent

// This file is what the agent gives its CNI server (package cniserver):
// its cache, the readiness of its attachments, the locks of the switch's
// places, and the switch's ports measured as the agent's own operations.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kos-sdn/kos/components/agent/cniserver"
	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/fabric"
)

// cniServer returns the agent's CNI server.
func (a *Agent) cniServer() *cniserver.Server {
	observe := func(command, outcome string, d time.Duration) {
		a.metrics.cniRequests.WithLabelValues(command, outcome).Observe(d.Seconds())
	}
	return cniserver.New(a.cni, a.node, cniAgent{a}, cniPorts{a}, a.client, a.flowCheckPeriod, observe)
}

// cniAgent is the agent as its CNI server sees it.
type cniAgent struct{ a *Agent }

var _ cniserver.Agent = cniAgent{}

func (c cniAgent) Healthy() error { return c.a.Healthy() }

func (c cniAgent) CachedAttachment(key string) (*v1alpha1.NetworkAttachment, bool) {
	obj, exists, err := c.a.localInformer.GetIndexer().GetByKey(key)
	if err != nil || !exists {
		return nil, false
	}
	att, ok := obj.(*v1alpha1.NetworkAttachment)
	return att, ok
}

func (c cniAgent) PodAttachments(namespace, pod string) []*v1alpha1.NetworkAttachment {
	objs, err := c.a.localInformer.GetIndexer().ByIndex(cache.NamespaceIndex, namespace)
	if err != nil {
		return nil
	}
	var atts []*v1alpha1.NetworkAttachment
	for _, obj := range objs {
		if att, ok := obj.(*v1alpha1.NetworkAttachment); ok && att.Annotations[v1alpha1.PodAnnotation] == pod {
			atts = append(atts, att)
		}
	}
	return atts
}

func (c cniAgent) Address(att *v1alpha1.NetworkAttachment) (fabric.LocalAttachment, bool) {
	addr, ok := addressOf(att)
	return fabric.LocalAttachment{VNI: addr.vni, IP: addr.ip}, ok
}

// NotReady says why a local attachment is not ready on this node: its
// status must hold no error of this node, and the fabric must hold it for
// it. It does not wait for the agent's own status write (hostIP and
// ifcName) to come back through the API: that write tells other nodes
// where the attachment is, which they learn after the ADD either way, and
// waiting for its echo cost each ADD a round trip to kos-apiserver, the
// longest part of the wait on a busy node.
func (c cniAgent) NotReady(att *v1alpha1.NetworkAttachment, at fabric.LocalAttachment) string {
	a, key := c.a, keyOf(att)
	if errs := att.Status.Errors.Host; len(errs) > 0 {
		return fmt.Sprintf("NetworkAttachment %s (address %s) is not ready on node %s: %s", key, at.IP, a.node, strings.Join(errs, "; "))
	}
	if p := a.state.installedAt(addressAt(at)); p.kind != local || p.owner != key {
		return fmt.Sprintf("the switch of node %s does not hold NetworkAttachment %s (address %s) yet", a.node, key, at.IP)
	}
	return ""
}

// Hold takes the fabric's lock for reading and the address's lock, so
// that no sync or reconcile sees the attachment without a port while the
// CNI server replaces it.
func (c cniAgent) Hold(at fabric.LocalAttachment, key string) (func(), error) {
	a, addr := c.a, addressAt(at)
	a.fabricMu.RLock()
	unlock := a.addrLocks.lock(addr)
	release := func() {
		unlock()
		a.fabricMu.RUnlock()
	}
	if p := a.state.installedAt(addr); p.kind != local || p.owner != key {
		return release, fmt.Errorf("it holds %v for %q", p.kind, p.owner)
	}
	return release, nil
}

// Lost records that the fabric may not hold what it should at at, so that
// the attachment's sync repairs it.
func (c cniAgent) Lost(at fabric.LocalAttachment, key string) {
	c.a.state.setInstalled(addressAt(at), placement{kind: unknown, owner: key})
	c.a.queue.Add(key)
}

// addressAt returns the address of a local attachment.
func addressAt(at fabric.LocalAttachment) address { return address{vni: at.VNI, ip: at.IP} }

// cniPorts is the agent's fabric for its CNI server, each operation
// measured as the agent's own.
type cniPorts struct{ a *Agent }

var _ cniserver.Ports = cniPorts{}

// opPlugLocal and opDeletePorts name PlugLocal and DeletePorts in the
// fabric metrics.
const (
	opPlugLocal   = "plug_local"
	opDeletePorts = "delete_ports"
)

func (p cniPorts) MTU() int { return p.a.fabric.MTU() }

func (p cniPorts) CreateLocal(ctx context.Context, atts ...fabric.LocalAttachment) error {
	return p.a.timed(opCreateLocal.String(), func() error { return p.a.fabric.CreateLocal(ctx, atts...) })
}

func (p cniPorts) DeleteLocal(ctx context.Context, atts ...fabric.LocalAttachment) error {
	return p.a.timed(opDeleteLocal.String(), func() error { return p.a.fabric.DeleteLocal(ctx, atts...) })
}

func (p cniPorts) DeletePorts(ctx context.Context, atts ...fabric.LocalAttachment) error {
	return p.a.timed(opDeletePorts, func() error { return p.a.fabric.DeletePorts(ctx, atts...) })
}

func (p cniPorts) PlugLocal(ctx context.Context, plugs ...fabric.Plug) error {
	return p.a.timed(opPlugLocal, func() error { return p.a.fabric.PlugLocal(ctx, plugs...) })
}

// Plugs is not measured, as the agent's own reads are not.
func (p cniPorts) Plugs(ctx context.Context, atts ...fabric.LocalAttachment) ([]fabric.Plug, error) {
	return p.a.fabric.Plugs(ctx, atts...)
}

// deleteStrayVeth deletes the host end of the veth pair of a local
// attachment the agent just took off the switch, if the CNI server plugged
// one: the switch leaves a plugged interface to its maker, and a pair left
// would keep a dead interface in the pod and block the interface of the
// next attachment with that address ("no OpenFlow port"). The caller holds
// the address, so no plug of it runs meanwhile.
func (a *Agent) deleteStrayVeth(ctx context.Context, at fabric.LocalAttachment) error {
	if a.cni.Socket == "" {
		return nil
	}
	deleted, err := cniserver.DeleteHostVeth(a.cni.HostNetns, at.InterfaceName())
	if err != nil {
		return fmt.Errorf("deleting the pod's veth of %s: %w", at, err)
	}
	if deleted {
		klog.FromContext(ctx).Info("Deleted the veth of a local attachment taken off the switch", "address", at, "interface", at.InterfaceName())
	}
	return nil
}

// sweepVeths deletes the host ends of pods' veth pairs that are no port of
// the switch: left by attachments taken off it while the agent was down,
// or before it deleted them with their ports. present are the local
// attachments the switch holds; the caller holds the fabric for writing,
// so no plug runs meanwhile (a plug makes its veth before plugging it).
func (a *Agent) sweepVeths(ctx context.Context, present []fabric.LocalAttachment) error {
	if a.cni.Socket == "" {
		return nil
	}
	names, err := cniserver.HostVeths(a.cni.HostNetns)
	if err != nil || len(names) == 0 {
		return err
	}
	plugs, err := a.fabric.Plugs(ctx, present...)
	if err != nil {
		return fmt.Errorf("reading the switch's plugs: %w", err)
	}
	plugged := map[string]bool{}
	for _, p := range plugs {
		plugged[p.InterfaceName()] = true
	}
	var errs []error
	for _, name := range names {
		if plugged[name] {
			continue
		}
		if _, err := cniserver.DeleteHostVeth(a.cni.HostNetns, name); err != nil {
			errs = append(errs, err)
			continue
		}
		klog.FromContext(ctx).Info("Deleted a pod's veth that is no port of the switch", "interface", name)
	}
	return errors.Join(errs...)
}
