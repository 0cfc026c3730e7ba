package agent

// This file is what the agent gives its CNI server (package cniserver):
// its cache, the readiness of its attachments, the locks of the switch's
// places, and the switch's ports measured as the agent's own operations.

import (
	"context"
	"fmt"
	"strings"
	"time"

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

func (c cniAgent) Address(att *v1alpha1.NetworkAttachment) (fabric.LocalAttachment, bool) {
	addr, ok := addressOf(att)
	return fabric.LocalAttachment{VNI: addr.vni, IP: addr.ip}, ok
}

// NotReady says why a local attachment is not ready on this node: its
// status must report its interface here, and the fabric must hold it for
// it.
func (c cniAgent) NotReady(att *v1alpha1.NetworkAttachment, at fabric.LocalAttachment) string {
	a, key := c.a, keyOf(att)
	if errs := att.Status.Errors.Host; len(errs) > 0 {
		return fmt.Sprintf("NetworkAttachment %s (address %s) is not ready on node %s: %s", key, at.IP, a.node, strings.Join(errs, "; "))
	}
	if att.Status.HostIP != a.hostIP.String() || att.Status.IfcName != at.InterfaceName() {
		return fmt.Sprintf("NetworkAttachment %s (address %s) is not ready on node %s yet", key, at.IP, a.node)
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
	l := a.addrLock(addr)
	l.Lock()
	release := func() {
		l.Unlock()
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
