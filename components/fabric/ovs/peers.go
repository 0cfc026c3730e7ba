package ovs

// This file keeps the tunnel filter (TunnelFilter) in line with the nodes
// of the remote attachments on the switch: the flows admit a tunnel packet
// only from the node of a remote attachment of its VNI, and the filter
// keeps every other sender from reaching the tunnel's UDP port at all.

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"

	goovs "github.com/digitalocean/go-openvswitch/ovs"

	"github.com/kos-sdn/kos/components/fabric"
)

// TunnelFilter keeps a node's tunnel UDP port closed to all but some hosts,
// outside the bridge: package tunnelfilter's nftables table on the kernel
// datapath, UnderlayFilter's flows on the userspace one.
type TunnelFilter interface {
	// Set makes the filter admit UDP packets to port from hosts alone
	// and drop the others. It is called again and again with the same
	// values (every Ensure): it then changes nothing, unless someone
	// changed or removed the filter, which it repairs.
	Set(ctx context.Context, port int, hosts []netip.Addr) error
}

// remoteKey names a remote attachment.
type remoteKey struct {
	vni uint32
	ip  netip.Addr
}

// peers is the set of nodes the filter admits: the hosts of the remote
// attachments on the switch. A host joins before its attachment's flows
// are installed and leaves after the last of them are deleted, so the
// filter never drops what the flows would admit.
//
// Lock order: setMu, then mu.
type peers struct {
	filter TunnelFilter
	// setMu serialises the filter's updates; each writes the hosts as
	// they are when it runs, so the last one writes the latest.
	setMu sync.Mutex
	mu    sync.Mutex
	// byRemote maps each remote attachment to its host, once known:
	// learnt from the switch at first need, then kept by CreateRemote,
	// DeleteRemote and List.
	byRemote map[remoteKey]netip.Addr
	known    bool
}

func newPeers(filter TunnelFilter) *peers {
	return &peers{filter: filter, byRemote: map[remoteKey]netip.Addr{}}
}

// hostsLocked returns the hosts, sorted, with p.mu held.
func (p *peers) hostsLocked() []netip.Addr {
	var hosts []netip.Addr
	for _, h := range p.byRemote {
		hosts = append(hosts, h)
	}
	slices.SortFunc(hosts, netip.Addr.Compare)
	return slices.Compact(hosts)
}

// learnLocked reads the remote attachments' hosts from the switch, with
// p.mu held, unless they are known.
func (p *peers) learnLocked(ctx context.Context, learn func(context.Context) (map[remoteKey]netip.Addr, error)) error {
	if p.known {
		return nil
	}
	byRemote, err := learn(ctx)
	if err != nil {
		return fmt.Errorf("reading the hosts of the remote attachments: %w", err)
	}
	p.byRemote, p.known = byRemote, true
	return nil
}

// set writes the hosts to the filter, with p.setMu held.
func (p *peers) setLocked(ctx context.Context, port int) error {
	p.mu.Lock()
	hosts := p.hostsLocked()
	p.mu.Unlock()
	if err := p.filter.Set(ctx, port, hosts); err != nil {
		return fmt.Errorf("setting the tunnel filter: %w", err)
	}
	return nil
}

// ensure makes the filter admit the hosts of the remote attachments.
func (p *peers) ensure(ctx context.Context, port int, learn func(context.Context) (map[remoteKey]netip.Addr, error)) error {
	if p.filter == nil {
		return nil
	}
	p.setMu.Lock()
	defer p.setMu.Unlock()
	p.mu.Lock()
	err := p.learnLocked(ctx, learn)
	p.mu.Unlock()
	if err != nil {
		return err
	}
	return p.setLocked(ctx, port)
}

// admit records remote attachments about to be created and, when one's
// host is new, lets the filter admit it before the flows do.
func (p *peers) admit(ctx context.Context, port int, atts []fabric.RemoteAttachment, learn func(context.Context) (map[remoteKey]netip.Addr, error)) error {
	if p.filter == nil {
		return nil
	}
	p.setMu.Lock()
	defer p.setMu.Unlock()
	p.mu.Lock()
	if err := p.learnLocked(ctx, learn); err != nil {
		p.mu.Unlock()
		return err
	}
	before := p.hostsLocked()
	for _, a := range atts {
		p.byRemote[remoteKey{a.VNI, a.IP}] = a.HostIP
	}
	grew := !slices.Equal(before, p.hostsLocked())
	p.mu.Unlock()
	if !grew {
		return nil
	}
	return p.setLocked(ctx, port)
}

// forget drops remote attachments whose flows were deleted and, when a
// host has none left, closes the filter to it.
func (p *peers) forget(ctx context.Context, port int, atts []fabric.RemoteAttachment) error {
	if p.filter == nil {
		return nil
	}
	p.setMu.Lock()
	defer p.setMu.Unlock()
	p.mu.Lock()
	if !p.known {
		// Learnt at the next need, from what the switch then holds.
		p.mu.Unlock()
		return nil
	}
	before := p.hostsLocked()
	for _, a := range atts {
		delete(p.byRemote, remoteKey{a.VNI, a.IP})
	}
	shrank := !slices.Equal(before, p.hostsLocked())
	p.mu.Unlock()
	if !shrank {
		return nil
	}
	return p.setLocked(ctx, port)
}

// replace records what List found on the switch. The filter follows at the
// next Ensure, CreateRemote or DeleteRemote.
func (p *peers) replace(inv *fabric.Inventory) {
	if p.filter == nil {
		return
	}
	byRemote := map[remoteKey]netip.Addr{}
	for _, l := range [][]fabric.RemoteAttachment{inv.Remote, inv.PartialRemote} {
		for _, a := range l {
			if a.HostIP.Is4() {
				byRemote[remoteKey{a.VNI, a.IP}] = a.HostIP
			}
		}
	}
	p.mu.Lock()
	p.byRemote, p.known = byRemote, true
	p.mu.Unlock()
}

// filterRemover is a tunnel filter that can be removed (both of KOS's
// can).
type filterRemover interface {
	Remove(ctx context.Context) (bool, error)
}

// RemoveTunnelFilter removes the tunnel filter, if the fabric has one, and
// reports whether there was one to remove. The agent calls it as it stops,
// so that an agent that does not keep the filter (an older release, after
// a rollback) never finds one it cannot follow, which would drop the
// nodes that join later. The next Ensure makes it again.
func (f *Fabric) RemoveTunnelFilter(ctx context.Context) (bool, error) {
	r, ok := f.peers.filter.(filterRemover)
	if !ok {
		return false, nil
	}
	f.peers.setMu.Lock()
	defer f.peers.setMu.Unlock()
	return r.Remove(ctx)
}

// remoteHosts reads the hosts of the remote attachments on the switch from
// their flows.
func (f *Fabric) remoteHosts(ctx context.Context) (map[remoteKey]netip.Addr, error) {
	match := &goovs.MatchFlow{Cookie: cookie(kindRemote, 0, netip.Addr{}), CookieMask: cookieMagicMask | kindMask, Table: forwardTable}
	flows, err := f.ovs.dumpFlows(ctx, f.bridge, match)
	if err != nil {
		return nil, err
	}
	byRemote := map[remoteKey]netip.Addr{}
	for _, fl := range flows {
		kind, vni, ip, ok := parseCookie(fl.Cookie)
		if !ok || kind != kindRemote {
			continue
		}
		if h, ok := tunnelDestination(fl); ok {
			byRemote[remoteKey{vni, ip}] = h
		}
	}
	return byRemote, nil
}
