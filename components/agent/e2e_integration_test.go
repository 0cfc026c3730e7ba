package agent_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/kos-sdn/kos/components/controllermanager"
	"github.com/kos-sdn/kos/components/fabric"
	"github.com/kos-sdn/kos/components/fabric/ovs"
	"github.com/kos-sdn/kos/tools/ovsenv"
	"github.com/kos-sdn/kos/tools/poll"
	"github.com/kos-sdn/kos/tools/testenv"
)

// startControllers runs the real controllers (subnet validator and IPAM)
// in this process until the test ends.
func startControllers(t testing.TB) {
	t.Helper()
	env := testenv.Shared(t)
	m, err := controllermanager.Config{Kube: env.RESTConfig, KOS: directConfig(t)}.Complete().New()
	if err != nil {
		t.Fatalf("creating the controller manager: %v", err)
	}
	logger := klog.LoggerWithValues(ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(2))), "component", "controllers")
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("controller manager: %v", err)
		}
	})
}

// node is a simulated node: a network namespace with an Open vSwitch of its
// own, whose tunnel endpoint address lives on bridge br-ul, which also holds
// the node's end of the veth underlay.
type node struct {
	ns     *ovsenv.Netns
	ovs    *ovsenv.Instance
	fabric *ovs.Fabric
	hostIP string
}

// startTwoNodes starts nodes A (hostA) and B (hostB), joined by a veth
// underlay, each knowing the other's underlay address.
func startTwoNodes(t *testing.T, ctx context.Context) (a, b *node) {
	t.Helper()
	nsA, nsB := ovsenv.NetnsT(t), ovsenv.NetnsT(t)
	if err := ovsenv.AddVethPair(ctx, nsA, "ul0", nsB, "ul0"); err != nil {
		t.Fatal(err)
	}
	a = startNode(t, ctx, nsA, hostA)
	b = startNode(t, ctx, nsB, hostB)
	a.knowNeighbour(t, ctx, b)
	b.knowNeighbour(t, ctx, a)
	return a, b
}

func startNode(t *testing.T, ctx context.Context, ns *ovsenv.Netns, hostIP string) *node {
	t.Helper()
	n := &node{ns: ns, hostIP: hostIP}
	n.ovs = ovsenv.StartT(t, ovsenv.Options{Netns: ns.Name})
	if _, err := n.ovs.Run(ctx, "ovs-vsctl", "add-br", "br-ul", "--", "set", "bridge", "br-ul", "datapath_type=netdev", "--", "add-port", "br-ul", "ul0"); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]string{
		// The underlay's addresses exist only in the test's namespaces.
		{"ip", "addr", "add", hostIP + "/24", "dev", "br-ul"},
		{"ip", "link", "set", "br-ul", "up"},
		{"ip", "link", "set", "ul0", "up"},
		// OVS owns ul0: only br-ul, which holds the address, answers ARP.
		{"sysctl", "-qw", "net.ipv4.conf.ul0.arp_ignore=1"},
	} {
		if _, err := ns.Run(ctx, cmd[0], cmd[1:]...); err != nil {
			t.Fatal(err)
		}
	}
	// The tunnel filter of the userspace datapath, as --tunnel-filter=auto
	// chooses with --datapath-type=netdev.
	filter, err := ovs.NewUnderlayFilter(ovs.UnderlayFilterConfig{Address: netip.MustParseAddr(hostIP), RunDir: n.ovs.RunDir})
	if err != nil {
		t.Fatal(err)
	}
	n.fabric = ovs.New(ovs.Config{RunDir: n.ovs.RunDir, DatapathType: "netdev", MTU: testMTU, Filter: filter})
	return n
}

// admits returns a check that n's tunnel filter admits exactly peers.
func (n *node) admits(peers ...string) func(context.Context) error {
	return func(ctx context.Context) error {
		out, err := n.ovs.Run(ctx, "ovs-ofctl", "dump-flows", "--no-stats", "br-ul", "udp")
		if err != nil {
			return err
		}
		var got []string
		for _, l := range strings.Split(out, "\n") {
			if _, src, ok := strings.Cut(l, "nw_src="); ok {
				got = append(got, strings.FieldsFunc(src, func(r rune) bool { return r == ',' || r == ' ' })[0])
			}
		}
		if strings.Join(got, " ") != strings.Join(peers, " ") {
			return fmt.Errorf("the tunnel filter of %s admits %q, want %q", n.ns.Name, got, peers)
		}
		return nil
	}
}

// knowNeighbour tells n's OVS the underlay MAC address of peer's tunnel
// endpoint, so that the first packets are not dropped while OVS resolves it.
func (n *node) knowNeighbour(t *testing.T, ctx context.Context, peer *node) {
	t.Helper()
	mac, err := peer.ovs.Run(ctx, "ovs-vsctl", "get", "Interface", "br-ul", "mac_in_use")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.ovs.Run(ctx, "ovs-appctl", "tnl/neigh/set", "br-ul", peer.hostIP, strings.Trim(mac, `"`)); err != nil {
		t.Fatal(err)
	}
}

// guest moves the interface the agent made for an attachment from node n
// into a guest namespace of its own, configured with the attachment's
// address, as a workload would use it. The interface keeps the MTU the agent
// gave it.
func (n *node) guest(t *testing.T, ctx context.Context, k *api, name string) (*ovsenv.Netns, netip.Addr) {
	t.Helper()
	att := k.get(name)
	ip := netip.MustParseAddr(att.Status.IPv4)
	g := ovsenv.NetnsT(t)
	if _, err := n.ns.Run(ctx, "ip", "link", "set", att.Status.IfcName, "netns", g.Name); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]string{
		{"ip", "addr", "add", ip.String() + "/24", "dev", att.Status.IfcName},
		{"ip", "link", "set", att.Status.IfcName, "up"},
	} {
		if _, err := g.Run(ctx, cmd[0], cmd[1:]...); err != nil {
			t.Fatal(err)
		}
	}
	return g, ip
}

// TestIntegrationTwoNodes runs the real control plane and controllers and
// two agents on two simulated nodes joined by a veth underlay. Guests of one
// subnet on the two nodes ping each other over VXLAN, with full-size packets
// too; a guest with the same address in another VNI is reached by neither
// and reaches neither; a node hears nothing of a VNI it has no local
// attachment in; deleting an attachment removes its flows on both nodes.
func TestIntegrationTwoNodes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	k := newAPI(t)
	startControllers(t)

	a, b := startTwoNodes(t, ctx)
	startAgent(t, agentConfig(t, k.node("a"), hostA, a.fabric))
	agentB := startAgent(t, agentConfig(t, k.node("b"), hostB, b.fabric))

	const vni1, vni2 = 301, 302
	k.subnet("s1", "10.30.0.0/24", vni1)
	k.attachment("g1", k.node("a"), "s1")
	k.attachment("g2", k.node("b"), "s1")
	poll.Until(t, settle, "g1 is ready", k.ready("g1", hostA))
	poll.Until(t, settle, "g2 is ready", k.ready("g2", hostB))
	ip2 := k.get("g2").Status.IPv4
	// g3 gets g2's address in another VNI, on node A: a subnet of one
	// address leaves IPAM no other choice.
	k.subnet("s2", ip2+"/32", vni2)
	k.attachment("g3", k.node("a"), "s2")
	poll.Until(t, settle, "g3 is ready", k.ready("g3", hostA))

	ip1 := k.get("g1").Status.IPv4
	poll.Until(t, settle, "node A holds g1, g3 and g2", holds(a.fabric, &fabric.Inventory{
		Local:  []fabric.LocalAttachment{local(vni1, ip1), local(vni2, ip2)},
		Remote: []fabric.RemoteAttachment{remote(vni1, ip2, hostB)},
	}))
	// Node B has nothing in VNI 302: it holds none of it, and its only
	// network informer is VNI 301's.
	poll.Until(t, settle, "node B holds g2 and g1", holds(b.fabric, &fabric.Inventory{
		Local:  []fabric.LocalAttachment{local(vni1, ip2)},
		Remote: []fabric.RemoteAttachment{remote(vni1, ip1, hostA)},
	}))
	if n := agentB.counter(t, "kos_agent_network_informer_starts_total", nil); n != 1 {
		t.Errorf("node B started %g network informers, want 1 (VNI %d's)", n, vni1)
	}

	g1, addr1 := a.guest(t, ctx, k, "g1")
	g2, addr2 := b.guest(t, ctx, k, "g2")
	g3, _ := a.guest(t, ctx, k, "g3")
	reaches := func(from *ovsenv.Netns, to netip.Addr) func(context.Context) error {
		return func(context.Context) error {
			if got, err := from.Ping(ctx, to, 3, time.Second); err != nil || got != 3 {
				return fmt.Errorf("ping from %s to %v: %d of 3 replies (%v)", from.Name, to, got, err)
			}
			return nil
		}
	}
	unreachable := func(from *ovsenv.Netns, to netip.Addr) {
		t.Helper()
		if got, err := from.Ping(ctx, to, 2, 700*time.Millisecond); err != nil || got != 0 {
			t.Errorf("ping from %s to %v: %d of 2 replies (%v), want none", from.Name, to, got, err)
		}
	}
	poll.Until(t, settle, "node A's tunnel filter admits node B", a.admits(hostB))
	poll.Until(t, settle, "node B's tunnel filter admits node A", b.admits(hostA))
	poll.Until(t, settle, "g1 reaches g2", reaches(g1, addr2))
	poll.Until(t, settle, "g2 reaches g1", reaches(g2, addr1))
	// The interfaces' MTU, which the test did not set, leaves room for
	// VXLAN within the underlay's 1500 bytes.
	poll.Until(t, settle, "g1 reaches g2 with full-size packets", reachesFullSize(g1, addr2))
	unreachable(g3, addr1)
	// With g2 down, g1 must not reach g3, which has g2's address.
	if _, err := g2.Run(ctx, "ip", "link", "set", k.get("g2").Status.IfcName, "down"); err != nil {
		t.Fatal(err)
	}
	if _, err := g1.Run(ctx, "ip", "neigh", "flush", "all"); err != nil {
		t.Fatal(err)
	}
	unreachable(g1, addr2)
	if _, err := g2.Run(ctx, "ip", "link", "set", k.get("g2").Status.IfcName, "up"); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, settle, "g1 reaches g2 again", reaches(g1, addr2))

	// Deleting g2 removes its flows on both nodes; node B, left with no
	// attachment, drops VNI 301 altogether.
	k.delete("g2")
	poll.Until(t, settle, "node A forgets g2", holds(a.fabric, &fabric.Inventory{
		Local: []fabric.LocalAttachment{local(vni1, ip1), local(vni2, ip2)},
	}))
	poll.Until(t, settle, "node B holds nothing", holds(b.fabric, &fabric.Inventory{}))
	poll.Until(t, settle, "node A's tunnel filter admits nobody", a.admits())
	poll.Until(t, settle, "node B's tunnel filter admits nobody", b.admits())
	// A stopped agent leaves no filter, which an older agent (after a
	// rollback) could not keep in step.
	agentB.stop(t)
	if out, err := b.ovs.Run(ctx, "ovs-ofctl", "dump-flows", "--no-stats", "br-ul", "udp"); err != nil || strings.Contains(out, "tp_dst=") {
		t.Errorf("node B's tunnel filter after its agent stopped (%v):\n%s", err, out)
	}
	for _, n := range []*node{a, b} {
		if dump := dumpFlows(t, n.ovs); strings.Contains(dump, fmt.Sprintf("tun_id=%#x,arp_tpa=%s ", vni1, ip2)) {
			t.Errorf("flows of g2 left on %s:\n%s", n.ns.Name, dump)
		}
	}
	unreachable(g1, addr2)
}
