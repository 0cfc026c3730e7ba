package ovs

// This file reads back what the switch holds: the ports, interfaces and
// flows of the bridge, sorted into whole and partial attachments (List).

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"

	goovs "github.com/digitalocean/go-openvswitch/ovs"
	"k8s.io/klog/v2"

	"github.com/kos-sdn/kos/components/fabric"
)

// List reads the bridge's ports, the Interface table and KOS's flows, and
// sorts what it finds into whole and partial attachments.
func (f *Fabric) List(ctx context.Context) (*fabric.Inventory, error) {
	portNames, err := f.ovs.bridgePorts(ctx, f.bridge)
	if err != nil {
		return nil, err
	}
	onBridge := make(map[string]bool, len(portNames))
	for _, p := range portNames {
		onBridge[p] = true
	}
	rows, err := f.ovs.interfaces(ctx)
	if err != nil {
		return nil, err
	}
	flows, err := f.ovs.dumpFlows(ctx, f.bridge, attachmentFlows())
	if err != nil {
		return nil, err
	}

	vtep := 0
	type localPort struct {
		att  fabric.LocalAttachment
		row  interfaceRow
		seen bool
	}
	ports := map[uint64]*localPort{}
	for _, r := range rows {
		if !onBridge[r.Name] {
			continue
		}
		if r.Name == TunnelPort {
			vtep = r.OFPort
			continue
		}
		att, ok := attachmentOf(r)
		if !ok {
			continue
		}
		ports[cookie(kindLocal, att.VNI, att.IP)] = &localPort{att: att, row: r}
	}

	byCookie := map[uint64][]*goovs.Flow{}
	for _, fl := range flows {
		byCookie[fl.Cookie] = append(byCookie[fl.Cookie], fl)
	}

	inv := &fabric.Inventory{}
	for c, fls := range byCookie {
		kind, vni, ip, ok := parseCookie(c)
		switch {
		case !ok:
			klog.FromContext(ctx).V(2).Info("Ignoring flows with an unknown KOS cookie", "bridge", f.bridge, "cookie", fmt.Sprintf("%#x", c), "count", len(fls))
		case kind == kindLocal:
			p := ports[c]
			if p == nil {
				inv.PartialLocal = append(inv.PartialLocal, fabric.LocalAttachment{VNI: vni, IP: ip})
				continue
			}
			p.seen = true
			if f.localWhole(p.att, p.row, fls) {
				inv.Local = append(inv.Local, p.att)
			} else {
				inv.PartialLocal = append(inv.PartialLocal, p.att)
			}
		case kind == kindRemote:
			att := fabric.RemoteAttachment{VNI: vni, IP: ip}
			hosts := map[netip.Addr]bool{}
			for _, fl := range fls {
				if h, ok := tunnelDestination(fl); ok {
					hosts[h] = true
					att.HostIP = h
				}
			}
			if len(hosts) == 1 && vtep > 0 && sameFlows(fls, remoteFlows(att, vtep)) {
				inv.Remote = append(inv.Remote, att)
			} else {
				inv.PartialRemote = append(inv.PartialRemote, att)
			}
		}
	}
	for _, p := range ports {
		if !p.seen {
			inv.PartialLocal = append(inv.PartialLocal, p.att)
		}
	}
	if inv.Policies, err = f.policyVNIs(ctx); err != nil {
		return nil, err
	}
	f.checkGates(inv.Policies)
	f.peers.replace(inv)
	inv.Sort()
	return inv, nil
}

// attachmentOf returns the local attachment an interface was made for, if
// it was made for one: its external IDs name a valid one whose interface
// name it has.
func attachmentOf(r interfaceRow) (fabric.LocalAttachment, bool) {
	vni, err := strconv.ParseUint(r.ExternalIDs[externalIDVNI], 10, 32)
	if err != nil {
		return fabric.LocalAttachment{}, false
	}
	ip, err := netip.ParseAddr(r.ExternalIDs[externalIDIP])
	if err != nil {
		return fabric.LocalAttachment{}, false
	}
	att := fabric.LocalAttachment{VNI: uint32(vni), IP: ip}
	if att.Validate() != nil || att.InterfaceName() != r.Name {
		return fabric.LocalAttachment{}, false
	}
	return att, true
}

// localWhole reports whether a local attachment's interface and flows are
// exactly what CreateLocal or PlugLocal makes. The MTU checked is the one
// asked of OVS: an interface moved into another network namespace keeps
// its MTU there, out of OVS's sight. A plugged interface has the MTU its
// maker gave it, which its pod has too, and is not checked.
func (f *Fabric) localWhole(att fabric.LocalAttachment, r interfaceRow, flows []*goovs.Flow) bool {
	port := plugged(r) ||
		(r.Type == "internal" && r.MAC == att.MAC().String() && (f.MTU() == 0 || r.MTURequest == f.MTU()))
	return port && r.OFPort > 0 && sameFlows(flows, localFlows(att, r.OFPort))
}
