// Package tunnelfilter keeps a node's VXLAN port closed, in the kernel's
// nftables, to all but the nodes it tunnels with: the tunnel filter of the
// kernel datapath, where tunnels end in a kernel UDP socket. It owns one
// table, ip kos-tunnel, and nothing else of the ruleset:
//
//	table ip kos-tunnel {
//		set peers { type ipv4_addr; elements = { 192.168.1.2, ... } }
//		chain input {
//			type filter hook input priority filter; policy accept;
//			meta l4proto udp udp dport 4789 iifname "eth0" ip saddr @peers accept
//			meta l4proto udp udp dport 4789 counter drop
//		}
//		chain forward {
//			type filter hook forward priority filter; policy accept;
//			meta l4proto udp udp dport 4789 ip daddr @peers counter drop
//		}
//	}
//
// A tunnel packet passes when it comes from a peer and arrives on the
// underlay interface: a pod on the node that sends to the node's own
// tunnel port with a peer's address comes in on its own interface, not on
// the underlay's, and is dropped. The node forwards nothing to a peer's
// tunnel port either: its own tunnel packets are its own (output), so a
// forwarded one is a pod's, which the primary network may be about to
// masquerade as the node, where the peer would take it for the node's.
// Other rulesets (kube-proxy's, the operator's) are evaluated as before: a
// packet this table accepts may still be dropped by them.
//
// The package talks to the kernel over netlink (github.com/google/nftables)
// and needs no nft or iptables program.
package tunnelfilter

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"sync"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// The names of what the filter owns.
const (
	// TableName is the filter's table, of family ip.
	TableName        = "kos-tunnel"
	chainName        = "input"
	forwardChainName = "forward"
	setName          = "peers"
)

// Config says which interface the filter admits tunnel packets on and
// which network namespace's nftables it programs.
type Config struct {
	// Interface is the underlay interface, the one holding the node's
	// underlay address: tunnel packets that arrive on any other are
	// dropped whatever their source. Empty admits the peers on any
	// interface.
	Interface string
	// NetNS is the path of the network namespace to program, such as
	// /var/run/netns/NAME; empty for the process's own.
	NetNS string
}

// Filter is the nftables tunnel filter. It implements ovs.TunnelFilter and
// is safe for concurrent use.
type Filter struct {
	cfg Config
	// mu serialises the filter's transactions, whose reads decide what
	// they write.
	mu sync.Mutex
}

// New returns the filter cfg describes. It does not touch the ruleset
// until Set.
func New(cfg Config) *Filter { return &Filter{cfg: cfg} }

// conn returns a connection to the namespace's nftables and a function
// that releases it.
func conn(netns string) (*nftables.Conn, func(), error) {
	if netns == "" {
		c, err := nftables.New()
		return c, func() {}, err
	}
	f, err := os.Open(netns)
	if err != nil {
		return nil, nil, fmt.Errorf("opening network namespace %s: %w", netns, err)
	}
	c, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())))
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return c, func() { f.Close() }, nil
}

func table() *nftables.Table {
	return &nftables.Table{Family: nftables.TableFamilyIPv4, Name: TableName}
}

// tableExists reports whether the namespace has the filter's table.
func tableExists(c *nftables.Conn) (bool, error) {
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyIPv4)
	if err != nil {
		return false, fmt.Errorf("listing nftables tables: %w", err)
	}
	return slices.ContainsFunc(tables, func(t *nftables.Table) bool { return t.Name == TableName }), nil
}

// Check returns an error when the filter cannot read the ruleset, for want
// of rights (CAP_NET_ADMIN) or of nftables in the kernel.
func (f *Filter) Check() error {
	c, release, err := conn(f.cfg.NetNS)
	if err != nil {
		return err
	}
	defer release()
	_, err = tableExists(c)
	return err
}

// comments of the two rules, which say what each does, in the ruleset's
// listing and to Set, which compares them to tell whether the rules are
// the ones wanted.
func admitComment(port int, ifc string) string {
	return fmt.Sprintf("kos: tunnel port %d from peers on %q", port, ifc)
}

func dropComment(port int) string { return fmt.Sprintf("kos: tunnel port %d from others", port) }

func forwardComment(port int) string {
	return fmt.Sprintf("kos: no forwarding to the peers' tunnel port %d", port)
}

// udpTo returns the expressions that match UDP to port.
func udpTo(port int) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_UDP}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(uint16(port))},
	}
}

// ifname returns an interface name as nftables compares it: padded with
// zeros to IFNAMSIZ.
func ifname(name string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return b
}

func elements(hosts []netip.Addr) []nftables.SetElement {
	out := make([]nftables.SetElement, 0, len(hosts))
	for _, h := range hosts {
		b := h.As4()
		out = append(out, nftables.SetElement{Key: b[:]})
	}
	return out
}

// Set makes the filter admit UDP to port from hosts alone, on the
// configured interface, in one transaction: the whole table when it is
// missing or its rules are not the ones wanted (their drop count starts
// again from zero), else only the peers that changed. When nothing changed
// it costs two reads.
func (f *Filter) Set(ctx context.Context, port int, hosts []netip.Addr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, release, err := conn(f.cfg.NetNS)
	if err != nil {
		return err
	}
	defer release()
	exists, err := tableExists(c)
	if err != nil {
		return err
	}
	logger := klog.FromContext(ctx)
	if exists {
		same, err := f.sameRules(c, port)
		if err != nil {
			return err
		}
		if same {
			added, removed, err := f.updatePeers(c, hosts)
			if err != nil {
				return err
			}
			if added+removed > 0 {
				logger.V(2).Info("Updated the tunnel filter's peers", "table", TableName, "port", port, "peers", hosts, "added", added, "removed", removed)
			}
			return nil
		}
		c.DelTable(table())
	}
	if err := f.create(c, port, hosts); err != nil {
		return err
	}
	logger.Info("Set the tunnel filter", "table", TableName, "port", port, "interface", f.cfg.Interface, "peers", hosts, "replaced", exists)
	return nil
}

// sameRules reports whether the chain holds the two rules wanted.
func (f *Filter) sameRules(c *nftables.Conn, port int) (bool, error) {
	rules, err := c.GetRules(table(), &nftables.Chain{Name: chainName, Table: table()})
	if err != nil {
		// No such chain: the table is not what Set makes.
		return false, nil
	}
	want := []string{admitComment(port, f.cfg.Interface), dropComment(port)}
	forward, err := c.GetRules(table(), &nftables.Chain{Name: forwardChainName, Table: table()})
	if err != nil {
		return false, nil
	}
	want = append(want, forwardComment(port))
	var got []string
	for _, r := range append(rules, forward...) {
		s, _ := userdata.GetString(r.UserData, userdata.TypeComment)
		got = append(got, s)
	}
	return slices.Equal(got, want), nil
}

// updatePeers makes the set hold hosts, in one transaction.
func (f *Filter) updatePeers(c *nftables.Conn, hosts []netip.Addr) (added, removed int, err error) {
	set, err := c.GetSetByName(table(), setName)
	if err != nil {
		return 0, 0, fmt.Errorf("reading set %s of table %s: %w", setName, TableName, err)
	}
	got, err := c.GetSetElements(set)
	if err != nil {
		return 0, 0, fmt.Errorf("reading the elements of set %s: %w", setName, err)
	}
	want := elements(hosts)
	has := func(l []nftables.SetElement, e nftables.SetElement) bool {
		return slices.ContainsFunc(l, func(o nftables.SetElement) bool { return bytes.Equal(o.Key, e.Key) })
	}
	var add, del []nftables.SetElement
	for _, e := range want {
		if !has(got, e) {
			add = append(add, e)
		}
	}
	for _, e := range got {
		if !has(want, e) {
			del = append(del, e)
		}
	}
	if len(add)+len(del) == 0 {
		return 0, 0, nil
	}
	if len(del) > 0 {
		if err := c.SetDeleteElements(set, del); err != nil {
			return 0, 0, err
		}
	}
	if len(add) > 0 {
		if err := c.SetAddElements(set, add); err != nil {
			return 0, 0, err
		}
	}
	if err := c.Flush(); err != nil {
		return 0, 0, fmt.Errorf("updating the peers of the tunnel filter: %w", err)
	}
	return len(add), len(del), nil
}

// create adds the table with its set, chain and rules to c's transaction,
// which may delete the old table first, and commits it.
func (f *Filter) create(c *nftables.Conn, port int, hosts []netip.Addr) error {
	t := c.AddTable(table())
	set := &nftables.Set{Table: t, Name: setName, KeyType: nftables.TypeIPAddr}
	if err := c.AddSet(set, elements(hosts)); err != nil {
		return fmt.Errorf("adding set %s: %w", setName, err)
	}
	accept := nftables.ChainPolicyAccept
	ch := c.AddChain(&nftables.Chain{
		Name: chainName, Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &accept,
	})
	admit := udpTo(port)
	if f.cfg.Interface != "" {
		admit = append(admit,
			&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(f.cfg.Interface)})
	}
	admit = append(admit,
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Lookup{SourceRegister: 1, SetName: set.Name, SetID: set.ID},
		&expr.Verdict{Kind: expr.VerdictAccept})
	c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: admit,
		UserData: userdata.AppendString(nil, userdata.TypeComment, admitComment(port, f.cfg.Interface))})
	drop := append(udpTo(port), &expr.Counter{}, &expr.Verdict{Kind: expr.VerdictDrop})
	c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: drop,
		UserData: userdata.AppendString(nil, userdata.TypeComment, dropComment(port))})
	fw := c.AddChain(&nftables.Chain{
		Name: forwardChainName, Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &accept,
	})
	forward := append(udpTo(port),
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Lookup{SourceRegister: 1, SetName: set.Name, SetID: set.ID},
		&expr.Counter{}, &expr.Verdict{Kind: expr.VerdictDrop})
	c.AddRule(&nftables.Rule{Table: t, Chain: fw, Exprs: forward,
		UserData: userdata.AppendString(nil, userdata.TypeComment, forwardComment(port))})
	if err := c.Flush(); err != nil {
		return fmt.Errorf("setting table %s: %w", TableName, err)
	}
	return nil
}

// Drops returns how many tunnel packets the filter dropped since its table
// was last made, coming in and forwarded; 0 when there is none.
func (f *Filter) Drops(ctx context.Context) (uint64, error) {
	c, release, err := conn(f.cfg.NetNS)
	if err != nil {
		return 0, err
	}
	defer release()
	if exists, err := tableExists(c); err != nil || !exists {
		return 0, err
	}
	var rules []*nftables.Rule
	for _, name := range []string{chainName, forwardChainName} {
		rs, err := c.GetRules(table(), &nftables.Chain{Name: name, Table: table()})
		if err != nil {
			return 0, fmt.Errorf("reading the rules of table %s: %w", TableName, err)
		}
		rules = append(rules, rs...)
	}
	var n uint64
	for _, r := range rules {
		for _, e := range r.Exprs {
			if ctr, ok := e.(*expr.Counter); ok {
				n += ctr.Packets
			}
		}
	}
	return n, nil
}

// Remove deletes the filter's table, if it is there, and reports whether
// it was; the next Set makes it again.
func (f *Filter) Remove(ctx context.Context) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return Remove(f.cfg.NetNS)
}

// Exists reports whether the namespace at netns (empty for the process's
// own) has the filter's table.
func Exists(netns string) (bool, error) {
	c, release, err := conn(netns)
	if err != nil {
		return false, err
	}
	defer release()
	return tableExists(c)
}

// Remove deletes the filter's table from the namespace at netns (empty for
// the process's own), if it is there, and reports whether it was.
func Remove(netns string) (bool, error) {
	c, release, err := conn(netns)
	if err != nil {
		return false, err
	}
	defer release()
	exists, err := tableExists(c)
	if err != nil || !exists {
		return false, err
	}
	c.DelTable(table())
	if err := c.Flush(); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, fmt.Errorf("deleting table %s: %w", TableName, err)
	}
	return true, nil
}
