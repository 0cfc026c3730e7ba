package nodeovs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// UnderlayConfig says which address to move onto which bridge.
type UnderlayConfig struct {
	// Address is the node's IPv4 address on the underlay.
	Address netip.Addr
	// Bridge is the OVS bridge that takes it, such as br-ul.
	Bridge string
	// DatapathType is the bridge's datapath_type ("netdev").
	DatapathType string
	// CheckPeriod is how often Server checks that Bridge holds Address.
	CheckPeriod time.Duration
}

// underlayRecord is what the move took from the interface, kept in the
// database folder: after a restart of ovs-vswitchd the bridge's kernel
// device comes back empty, and the interface no longer holds the address
// that would say which one it was.
type underlayRecord struct {
	// Interface is the interface that held the address, now a port of the
	// bridge.
	Interface string `json:"interface"`
	// Addresses are its IPv4 addresses, such as 192.168.1.2/24.
	Addresses []string `json:"addresses"`
	// Routes are the IPv4 routes through it that the kernel did not make
	// itself for the addresses.
	Routes []savedRoute `json:"routes,omitempty"`
	// ARPIgnore is its net.ipv4.conf.<interface>.arp_ignore before the
	// move.
	ARPIgnore int `json:"arpIgnore"`
}

// savedRoute is a route of underlayRecord, without its interface.
type savedRoute struct {
	// Dst is the destination, such as 0.0.0.0/0 or 10.0.0.0/8.
	Dst      string `json:"dst"`
	Gateway  string `json:"gateway,omitempty"`
	Source   string `json:"source,omitempty"`
	Priority int    `json:"priority,omitempty"`
	Table    int    `json:"table,omitempty"`
	Protocol int    `json:"protocol,omitempty"`
	Scope    int    `json:"scope,omitempty"`
	OnLink   bool   `json:"onLink,omitempty"`
}

// underlayRecordFile is the record's name in the database folder.
const underlayRecordFile = "kos-underlay.json"

// Underlay moves the node's underlay address from its interface onto an OVS
// bridge of the userspace datapath, as the userspace datapath needs to
// tunnel from it: the bridge gets the interface as a port, and the
// interface's IPv4 addresses and the routes through it (the default route
// too); the interface keeps answering no ARP for them (arp_ignore=1), since
// OVS owns it. Every step is idempotent.
type Underlay struct {
	cfg    UnderlayConfig
	record string
	// vsctl runs ovs-vsctl against the node's OVS.
	vsctl func(ctx context.Context, args ...string) (string, error)
}

// newUnderlay returns the Underlay of cfg, recording its moves in dbDir.
func newUnderlay(cfg UnderlayConfig, dbDir string, vsctl func(context.Context, ...string) (string, error)) *Underlay {
	return &Underlay{cfg: cfg, record: filepath.Join(dbDir, underlayRecordFile), vsctl: vsctl}
}

// NewUnderlay returns the Underlay of cfg for the Open vSwitch whose run dir
// is runDir, recording its moves in recordDir: for an Open vSwitch that
// kos-ovs does not run (Server makes its own), such as a node's own one
// that a test sets up as kos-agent 0.1.0's userspace release needs. Its
// netlink calls act on the calling thread's network namespace.
func NewUnderlay(cfg UnderlayConfig, runDir, recordDir string) *Underlay {
	env := append(os.Environ(), "OVS_RUNDIR="+runDir)
	return newUnderlay(cfg, recordDir, func(ctx context.Context, args ...string) (string, error) {
		return run(ctx, env, "ovs-vsctl", args...)
	})
}

// Ensure makes the bridge hold the address: when an interface other than
// the bridge holds it, it records that interface's addresses and routes and
// moves them; when none does (ovs-vswitchd recreated the bridge's device),
// it moves them again as recorded.
func (u *Underlay) Ensure(ctx context.Context) error {
	holder, err := linkHolding(u.cfg.Address)
	if err != nil {
		return err
	}
	rec, err := u.load()
	if err != nil {
		return err
	}
	switch {
	case holder != nil && holder.Attrs().Name != u.cfg.Bridge:
		if rec, err = capture(holder); err != nil {
			return err
		}
		if err := u.save(rec); err != nil {
			return err
		}
	case rec == nil:
		if holder != nil {
			// Someone else put it there; nothing of ours to redo.
			return nil
		}
		return fmt.Errorf("no interface holds the underlay address %s, and none was moved before", u.cfg.Address)
	case !slices.ContainsFunc(rec.Addresses, func(a string) bool { return strings.HasPrefix(a, u.cfg.Address.String()+"/") }):
		return fmt.Errorf("the underlay address %s is on no interface, and the record of the last move (%s) is of other addresses", u.cfg.Address, u.record)
	}
	return u.move(ctx, rec)
}

// Holds returns nil when the bridge holds the address.
func (u *Underlay) Holds() error {
	holder, err := linkHolding(u.cfg.Address)
	if err != nil {
		return err
	}
	if holder == nil || holder.Attrs().Name != u.cfg.Bridge {
		return fmt.Errorf("%s does not hold the underlay address %s", u.cfg.Bridge, u.cfg.Address)
	}
	return nil
}

// move puts the interface of rec on the bridge and moves rec's addresses
// and routes onto the bridge.
func (u *Underlay) move(ctx context.Context, rec *underlayRecord) error {
	ifc, err := netlink.LinkByName(rec.Interface)
	if err != nil {
		return fmt.Errorf("finding underlay interface %s: %w", rec.Interface, err)
	}
	// The bridge takes the interface's MAC address, so that the
	// underlay's neighbours need not learn a new one.
	args := []string{"--timeout=20",
		"--may-exist", "add-br", u.cfg.Bridge,
		"--", "set", "Bridge", u.cfg.Bridge, "datapath_type=" + u.cfg.DatapathType,
		"other_config:hwaddr=" + strconv.Quote(ifc.Attrs().HardwareAddr.String()),
		"--", "--may-exist", "add-port", u.cfg.Bridge, rec.Interface,
	}
	if _, err := u.vsctl(ctx, args...); err != nil {
		return fmt.Errorf("adding %s to bridge %s: %w", rec.Interface, u.cfg.Bridge, err)
	}
	br, err := waitLink(ctx, u.cfg.Bridge)
	if err != nil {
		return err
	}
	if err := netlink.LinkSetUp(ifc); err != nil {
		return fmt.Errorf("bringing %s up: %w", rec.Interface, err)
	}
	// arp_ignore=1 first: once the bridge holds the addresses, only it
	// may answer for them.
	if err := setARPIgnore(ifc, 1); err != nil {
		return err
	}
	if err := moveAddresses(rec, ifc, br); err != nil {
		return err
	}
	klog.InfoS("Underlay address on the bridge", "address", u.cfg.Address, "bridge", u.cfg.Bridge, "interface", rec.Interface, "addresses", rec.Addresses, "routes", len(rec.Routes))
	return nil
}

// Release moves rec's addresses and routes back onto the interface and
// restores its arp_ignore, so that the node stays reachable while the
// bridge is gone (its device goes with ovs-vswitchd). The interface stays a
// port of the bridge in the database, for the next start.
func (u *Underlay) Release() error {
	rec, err := u.load()
	if err != nil || rec == nil {
		return err
	}
	ifc, err := netlink.LinkByName(rec.Interface)
	if err != nil {
		return fmt.Errorf("finding underlay interface %s: %w", rec.Interface, err)
	}
	var from netlink.Link
	if br, err := netlink.LinkByName(u.cfg.Bridge); err == nil {
		from = br
	}
	if err := moveAddresses(rec, from, ifc); err != nil {
		return err
	}
	if err := setARPIgnore(ifc, rec.ARPIgnore); err != nil {
		return err
	}
	klog.InfoS("Underlay address back on its interface", "address", u.cfg.Address, "interface", rec.Interface)
	return nil
}

// moveAddresses adds rec's addresses and routes to link to, then removes
// the addresses from link from (when not nil). Routes are replaced, so
// that the one through from becomes the one through to, and set again once
// from lost its addresses (the kernel drops routes through an interface
// left without an address).
func moveAddresses(rec *underlayRecord, from, to netlink.Link) error {
	if err := netlink.LinkSetUp(to); err != nil {
		return fmt.Errorf("bringing %s up: %w", to.Attrs().Name, err)
	}
	addrs, err := rec.addrs()
	if err != nil {
		return err
	}
	for _, a := range addrs {
		if err := netlink.AddrReplace(to, a); err != nil {
			return fmt.Errorf("adding %s to %s: %w", a.IPNet, to.Attrs().Name, err)
		}
	}
	routes, err := rec.routes(to.Attrs().Index)
	if err != nil {
		return err
	}
	replaceRoutes := func() error {
		for _, r := range routes {
			if err := netlink.RouteReplace(&r); err != nil {
				return fmt.Errorf("routing %s through %s: %w", r.Dst, to.Attrs().Name, err)
			}
		}
		return nil
	}
	if err := replaceRoutes(); err != nil {
		return err
	}
	if from == nil {
		return nil
	}
	for _, a := range addrs {
		a := *a
		if err := netlink.AddrDel(from, &a); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
			return fmt.Errorf("removing %s from %s: %w", a.IPNet, from.Attrs().Name, err)
		}
	}
	return replaceRoutes()
}

// linkHolding returns the interface that holds addr, or nil.
func linkHolding(addr netip.Addr) (netlink.Link, error) {
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		return nil, fmt.Errorf("listing addresses: %w", err)
	}
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.Unmap() == addr {
			link, err := netlink.LinkByIndex(a.LinkIndex)
			if err != nil {
				return nil, fmt.Errorf("finding the interface of %s: %w", addr, err)
			}
			return link, nil
		}
	}
	return nil, nil
}

// waitLink waits for ovs-vswitchd to create the kernel device of a bridge.
func waitLink(ctx context.Context, name string) (netlink.Link, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for {
		link, err := netlink.LinkByName(name)
		if err == nil {
			return link, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the device of bridge %s: %w", name, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// capture records link's IPv4 addresses and the routes to move with them.
func capture(link netlink.Link) (*underlayRecord, error) {
	name := link.Attrs().Name
	rec := &underlayRecord{Interface: name}
	addrs, err := netlink.AddrList(link, netlink.FAMILY_V4)
	if err != nil {
		return nil, fmt.Errorf("listing the addresses of %s: %w", name, err)
	}
	for _, a := range addrs {
		rec.Addresses = append(rec.Addresses, a.IPNet.String())
	}
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{LinkIndex: link.Attrs().Index, Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_OIF|netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("listing the routes through %s: %w", name, err)
	}
	rec.Routes = movableRoutes(routes)
	if rec.ARPIgnore, err = arpIgnore(name); err != nil {
		return nil, err
	}
	return rec, nil
}

// movableRoutes returns the routes to move with the addresses: unicast
// routes of every table but local, except those the kernel makes itself for
// an address (protocol kernel), which follow the addresses. Multipath
// routes are left alone.
func movableRoutes(routes []netlink.Route) []savedRoute {
	var out []savedRoute
	for _, r := range routes {
		if r.Table == unix.RT_TABLE_LOCAL || r.Protocol == unix.RTPROT_KERNEL || len(r.MultiPath) > 0 ||
			(r.Type != 0 && r.Type != unix.RTN_UNICAST) {
			continue
		}
		s := savedRoute{Dst: "0.0.0.0/0", Priority: r.Priority, Protocol: int(r.Protocol), Scope: int(r.Scope), OnLink: r.Flags&unix.RTNH_F_ONLINK != 0}
		if r.Dst != nil {
			s.Dst = r.Dst.String()
		}
		if r.Gw != nil {
			s.Gateway = r.Gw.String()
		}
		if r.Src != nil {
			s.Source = r.Src.String()
		}
		if r.Table != unix.RT_TABLE_MAIN {
			s.Table = r.Table
		}
		out = append(out, s)
	}
	return out
}

// addrs returns the record's addresses for netlink.
func (rec *underlayRecord) addrs() ([]*netlink.Addr, error) {
	var out []*netlink.Addr
	for _, s := range rec.Addresses {
		a, err := netlink.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("underlay record: address %q: %w", s, err)
		}
		out = append(out, a)
	}
	return out, nil
}

// routes returns the record's routes for netlink, through link index.
func (rec *underlayRecord) routes(index int) ([]netlink.Route, error) {
	var out []netlink.Route
	for _, s := range rec.Routes {
		_, dst, err := net.ParseCIDR(s.Dst)
		if err != nil {
			return nil, fmt.Errorf("underlay record: route to %q: %w", s.Dst, err)
		}
		r := netlink.Route{
			LinkIndex: index,
			Dst:       dst,
			Gw:        net.ParseIP(s.Gateway),
			Src:       net.ParseIP(s.Source),
			Priority:  s.Priority,
			Table:     s.Table,
			Protocol:  netlink.RouteProtocol(s.Protocol),
			Scope:     netlink.Scope(s.Scope),
		}
		if s.OnLink {
			r.Flags = unix.RTNH_F_ONLINK
		}
		out = append(out, r)
	}
	return out, nil
}

// load reads the record, or returns nil when there is none.
func (u *Underlay) load() (*underlayRecord, error) {
	data, err := os.ReadFile(u.record)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("reading the underlay record: %w", err)
	}
	var rec underlayRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		return nil, fmt.Errorf("reading the underlay record %s: %w", u.record, err)
	}
	return &rec, nil
}

// save writes the record whole or not at all.
func (u *Underlay) save(rec *underlayRecord) error {
	data, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the underlay record: %w", err)
	}
	tmp := u.record + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing the underlay record: %w", err)
	}
	if err := os.Rename(tmp, u.record); err != nil {
		return fmt.Errorf("writing the underlay record: %w", err)
	}
	return nil
}

// ipv4DevconfARPIgnore is IPV4_DEVCONF_ARP_IGNORE of linux/ip.h: the
// attribute of arp_ignore in IFLA_INET_CONF.
const ipv4DevconfARPIgnore = 19

// setARPIgnore sets net.ipv4.conf.<link>.arp_ignore through netlink
// (RTM_SETLINK with IFLA_AF_SPEC/AF_INET/IFLA_INET_CONF) rather than
// /proc/sys, which a container that is not privileged sees read-only; it
// needs CAP_NET_ADMIN only.
func setARPIgnore(link netlink.Link, value int) error {
	req := nl.NewNetlinkRequest(unix.RTM_SETLINK, unix.NLM_F_ACK)
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Index = int32(link.Attrs().Index)
	req.AddData(msg)
	spec := nl.NewRtAttr(unix.IFLA_AF_SPEC, nil)
	conf := spec.AddRtAttr(unix.AF_INET, nil).AddRtAttr(unix.IFLA_INET_CONF, nil)
	conf.AddRtAttr(ipv4DevconfARPIgnore, nl.Uint32Attr(uint32(value)))
	req.AddData(spec)
	if _, err := req.Execute(unix.NETLINK_ROUTE, 0); err != nil {
		return fmt.Errorf("setting arp_ignore=%d on %s: %w", value, link.Attrs().Name, err)
	}
	return nil
}

// arpIgnore reads net.ipv4.conf.<name>.arp_ignore.
func arpIgnore(name string) (int, error) {
	data, err := os.ReadFile(filepath.Join("/proc/sys/net/ipv4/conf", name, "arp_ignore"))
	if err != nil {
		return 0, fmt.Errorf("reading arp_ignore of %s: %w", name, err)
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return 0, fmt.Errorf("reading arp_ignore of %s: %w", name, err)
	}
	return v, nil
}
