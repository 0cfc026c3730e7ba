package ovs

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/kos-sdn/kos/components/fabric"
	"github.com/kos-sdn/kos/tools/ovsenv"
)

// node is a simulated node: a network namespace with its own Open vSwitch,
// whose tunnel endpoint address lives on bridge br-ul, which also holds the
// node's end of the underlay veth.
type node struct {
	ns     *ovsenv.Netns
	ovs    *ovsenv.Instance
	fabric *Fabric
	hostIP netip.Addr
}

// underlayPrefix is the underlay's address length; its addresses exist only
// in the namespaces the test creates.
const underlayPrefix = "/24"

// underlayMTU is the MTU of the veth underlay, as of most real ones.
const underlayMTU = 1500

// startNode starts a node whose fabric makes interfaces with MTU mtu (0: OVS's
// default).
func startNode(t *testing.T, ctx context.Context, ns *ovsenv.Netns, hostIP string, mtu int) *node {
	t.Helper()
	return startNodeWith(t, ctx, ns, hostIP, func(cfg *Config) { cfg.MTU = mtu })
}

// startNodeWith starts a node whose fabric's configuration configure
// changes: its RunDir and DatapathType are set already.
func startNodeWith(t *testing.T, ctx context.Context, ns *ovsenv.Netns, hostIP string, configure func(*Config)) *node {
	t.Helper()
	n := &node{ns: ns, hostIP: netip.MustParseAddr(hostIP)}
	n.ovs = ovsenv.StartT(t, ovsenv.Options{Netns: ns.Name})
	if _, err := n.ovs.Run(ctx, "ovs-vsctl", "add-br", "br-ul", "--", "set", "bridge", "br-ul", "datapath_type=netdev", "--", "add-port", "br-ul", "ul0"); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]string{
		{"ip", "addr", "add", hostIP + underlayPrefix, "dev", "br-ul"},
		{"ip", "link", "set", "br-ul", "up"},
		{"ip", "link", "set", "ul0", "up"},
		// The kernel also sees ARP on ul0, which OVS owns: only br-ul,
		// which holds the address, may answer.
		{"sysctl", "-qw", "net.ipv4.conf.ul0.arp_ignore=1"},
	} {
		if _, err := ns.Run(ctx, cmd[0], cmd[1:]...); err != nil {
			t.Fatal(err)
		}
	}
	cfg := Config{RunDir: n.ovs.RunDir, DatapathType: "netdev"}
	configure(&cfg)
	n.fabric = New(cfg)
	if _, err := n.fabric.Ensure(ctx); err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	return n
}

// knowNeighbour tells n's OVS the underlay MAC address of peer's tunnel
// endpoint, so that the first packets are not dropped while OVS resolves it.
func (n *node) knowNeighbour(t *testing.T, ctx context.Context, peer *node) {
	t.Helper()
	mac, err := peer.ovs.Run(ctx, "ovs-vsctl", "get", "Interface", "br-ul", "mac_in_use")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.ovs.Run(ctx, "ovs-appctl", "tnl/neigh/set", "br-ul", peer.hostIP.String(), strings.Trim(mac, `"`)); err != nil {
		t.Fatal(err)
	}
}

// attachGuest creates a local attachment on n and moves its interface into
// a guest namespace of its own, configured with the attachment's address and
// the MTU the fabric gave it.
func (n *node) attachGuest(t *testing.T, ctx context.Context, att fabric.LocalAttachment) *ovsenv.Netns {
	t.Helper()
	if err := n.fabric.CreateLocal(ctx, att); err != nil {
		t.Fatal(err)
	}
	guest := ovsenv.NetnsT(t)
	ifc := att.InterfaceName()
	if _, err := n.ns.Run(ctx, "ip", "link", "set", ifc, "netns", guest.Name); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]string{
		{"ip", "addr", "add", att.IP.String() + "/16", "dev", ifc},
		{"ip", "link", "set", ifc, "up"},
	} {
		if _, err := guest.Run(ctx, cmd[0], cmd[1:]...); err != nil {
			t.Fatal(err)
		}
	}
	return guest
}

// TestIntegrationTwoNodeVXLAN joins two simulated nodes by a veth underlay,
// gives each a guest on one virtual network, and pings between the guests
// through the VXLAN tunnel; a guest on another virtual network reaches
// neither.
func TestIntegrationTwoNodeVXLAN(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	nsA, nsB := ovsenv.NetnsT(t), ovsenv.NetnsT(t)
	if err := ovsenv.AddVethPair(ctx, nsA, "ul0", nsB, "ul0"); err != nil {
		t.Fatal(err)
	}
	mtu, err := fabric.AttachmentMTU(underlayMTU)
	if err != nil {
		t.Fatal(err)
	}
	a := startNode(t, ctx, nsA, "192.168.100.1", mtu)
	b := startNode(t, ctx, nsB, "192.168.100.2", mtu)
	a.knowNeighbour(t, ctx, b)
	b.knowNeighbour(t, ctx, a)

	attA := fabric.LocalAttachment{VNI: 7, IP: netip.MustParseAddr("10.7.0.1")}
	attB := fabric.LocalAttachment{VNI: 7, IP: netip.MustParseAddr("10.7.0.2")}
	// attC is on another virtual network, on node A, in the same CIDR.
	attC := fabric.LocalAttachment{VNI: 8, IP: netip.MustParseAddr("10.7.0.3")}
	guestA := a.attachGuest(t, ctx, attA)
	guestB := b.attachGuest(t, ctx, attB)
	guestC := a.attachGuest(t, ctx, attC)
	remoteOf := func(att fabric.LocalAttachment, on *node) fabric.RemoteAttachment {
		return fabric.RemoteAttachment{VNI: att.VNI, IP: att.IP, HostIP: on.hostIP}
	}
	if err := a.fabric.CreateRemote(ctx, remoteOf(attB, b)); err != nil {
		t.Fatal(err)
	}
	if err := b.fabric.CreateRemote(ctx, remoteOf(attA, a)); err != nil {
		t.Fatal(err)
	}

	// reaches pings three times; unreachable waits less on each of two
	// pings, which have no reason to fail where the others succeed.
	reaches := func(from *ovsenv.Netns, to netip.Addr) {
		t.Helper()
		if got, err := from.Ping(ctx, to, 3, time.Second); err != nil || got != 3 {
			t.Errorf("ping from %s to %v: %d of 3 replies (%v), want 3", from.Name, to, got, err)
		}
	}
	unreachable := func(from *ovsenv.Netns, to netip.Addr) {
		t.Helper()
		if got, err := from.Ping(ctx, to, 2, 700*time.Millisecond); err != nil || got != 0 {
			t.Errorf("ping from %s to %v: %d of 2 replies (%v), want none", from.Name, to, got, err)
		}
	}
	reaches(guestA, attB.IP)
	reaches(guestB, attA.IP)
	unreachable(guestC, attA.IP)
	unreachable(guestC, attB.IP)
	unreachable(guestA, attC.IP)

	// Once node A forgets attB, nothing reaches it from there.
	if err := a.fabric.DeleteRemote(ctx, remoteOf(attB, b)); err != nil {
		t.Fatal(err)
	}
	// Forget what guest A learned, so it has to ask again.
	if _, err := guestA.Run(ctx, "ip", "neigh", "flush", "all"); err != nil {
		t.Fatal(err)
	}
	unreachable(guestA, attB.IP)
	// Nor do guest A's replies to guest B.
	unreachable(guestB, attA.IP)
}
