package agent_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/kos-sdn/kos/components/fabric"
	"github.com/kos-sdn/kos/components/fabric/ovs"
	"github.com/kos-sdn/kos/tools/ovsenv"
	"github.com/kos-sdn/kos/tools/poll"
)

// pingDF returns how many of count pings of size bytes of ICMP payload, not
// to be fragmented, from reaches to.
func pingDF(ctx context.Context, from *ovsenv.Netns, to netip.Addr, size, count int) (int, error) {
	out, _ := from.Command(ctx, "ping", "-n", "-q", "-i", "0.2", "-M", "do", "-s", strconv.Itoa(size), "-c", strconv.Itoa(count), "-W", "1", to.String()).CombinedOutput()
	m := pingReceived.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("ping -M do -s %d %v from %s: %s", size, to, from.Name, out)
	}
	return strconv.Atoi(string(m[2]))
}

// TestIntegrationMixedUnderlayMTU is issue 34's proof of one network MTU:
// three simulated nodes on one switched underlay, two with 1500-byte
// interfaces and one (C) with 1400, each with an agent that would choose
// its underlay's MTU less 50 on its own (1450, 1450, 1350). The agents
// report their underlays on their Nodes; the NetworkConfig applies the
// smallest less 50, as kos-controller-manager computes it; every
// attachment of the network, on every node, gets that one MTU, and a
// full-size ping that must not be fragmented crosses every pair of nodes
// both ways. The control: an interface left at what its node would choose
// (1450) reaches the other 1500-byte node at full size, and loses every
// full-size packet to node C.
func TestIntegrationMixedUnderlayMTU(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	k := newAPI(t)
	kube := mainClient(t)
	const vni = 243
	k.subnet("s1", "10.243.0.0/24", vni)

	// The underlay: a Linux bridge in a namespace of its own, one port per
	// node; node C's link has MTU 1400 at both ends.
	sw := ovsenv.NetnsT(t)
	for _, cmd := range [][]string{
		{"ip", "link", "add", "br0", "type", "bridge"},
		{"ip", "link", "set", "br0", "up"},
	} {
		if _, err := sw.Run(ctx, cmd[0], cmd[1:]...); err != nil {
			t.Fatal(err)
		}
	}
	type simNode struct {
		name, hostIP string
		underlayMTU  int
		n            *node
		inst         *ovsenv.Instance
	}
	nodes := []*simNode{
		{name: "a", hostIP: "192.168.100.1", underlayMTU: 1500},
		{name: "b", hostIP: "192.168.100.2", underlayMTU: 1500},
		{name: "c", hostIP: "192.168.100.3", underlayMTU: 1400},
	}
	for _, s := range nodes {
		ns := ovsenv.NetnsT(t)
		if err := ovsenv.AddVethPair(ctx, ns, "ul0", sw, "to-"+s.name); err != nil {
			t.Fatal(err)
		}
		mtu := strconv.Itoa(s.underlayMTU)
		for _, c := range []struct {
			ns  *ovsenv.Netns
			cmd []string
		}{
			{sw, []string{"ip", "link", "set", "to-" + s.name, "mtu", mtu, "master", "br0", "up"}},
			{ns, []string{"ip", "link", "set", "ul0", "mtu", mtu}},
		} {
			if _, err := c.ns.Run(ctx, c.cmd[0], c.cmd[1:]...); err != nil {
				t.Fatal(err)
			}
		}
		s.n = startNode(t, ctx, ns, s.hostIP)
		s.inst = s.n.ovs
		// The bridge that holds the tunnel address carries what its
		// port does.
		if _, err := s.inst.Run(ctx, "ovs-vsctl", "set", "Interface", "br-ul", "mtu_request="+mtu); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range nodes {
		for _, p := range nodes {
			if p != s {
				s.n.knowNeighbour(t, ctx, p.n)
			}
		}
	}

	// Each agent's own MTU is what it would choose alone: its underlay's
	// less VXLAN's overhead.
	for _, s := range nodes {
		makeNode(t, kube, k.node(s.name))
		own, err := fabric.AttachmentMTU(s.underlayMTU)
		if err != nil {
			t.Fatal(err)
		}
		fab := ovs.New(ovs.Config{RunDir: s.inst.RunDir, DatapathType: "netdev", MTU: own})
		cfg := agentConfig(t, k.node(s.name), s.hostIP, fab)
		cfg.NetworkConfig, cfg.UnderlayMTU, cfg.Nodes = true, s.underlayMTU, kube.CoreV1().Nodes()
		startAgent(t, cfg)
	}
	// What the agents report is what kos-controller-manager computes the
	// overlay MTU from: the smallest underlay less the overhead.
	var reported []int
	for _, s := range nodes {
		poll.Until(t, settle, "node "+s.name+" reports its underlay", underlayAnnotation(kube, k.node(s.name), strconv.Itoa(s.underlayMTU)))
		reported = append(reported, s.underlayMTU)
	}
	overlay := slices.Min(reported) - fabric.VXLANOverhead
	applyNetworkConfig(t, int32(overlay))
	// Other tests share the API: leave them the MTU they expect.
	t.Cleanup(func() { applyNetworkConfig(t, appliedMTU) })

	type guest struct {
		node *simNode
		ns   *ovsenv.Netns
		ip   netip.Addr
	}
	var guests []guest
	for i, s := range nodes {
		name := "m-" + s.name
		k.attachment(name, k.node(s.name), "s1")
		k.address(name, fmt.Sprintf("10.243.0.%d", 10+i), vni)
		poll.Until(t, settle, name+" is ready", k.ready(name, s.hostIP))
		poll.Until(t, settle, name+" has the network's MTU", k.hasMTU(s.inst, name, overlay))
	}
	for _, s := range nodes {
		g, ip := s.n.guest(t, ctx, k, "m-"+s.name)
		guests = append(guests, guest{node: s, ns: g, ip: ip})
	}

	fullSize := overlay - 28 // the IPv4 and ICMP headers
	for _, from := range guests {
		for _, to := range guests {
			if from == to {
				continue
			}
			what := fmt.Sprintf("full-size ping (%d bytes, DF) from node %s to node %s", fullSize, from.node.name, to.node.name)
			poll.Until(t, settle, what, func(ctx context.Context) error {
				if got, err := pingDF(ctx, from.ns, to.ip, fullSize, 3); err != nil || got != 3 {
					return fmt.Errorf("%d of 3 replies (%v)", got, err)
				}
				return nil
			})
		}
	}

	// The control: node A's guest at the MTU node A would choose alone.
	ga := guests[0]
	ifc := k.get("m-a").Status.IfcName
	if _, err := ga.ns.Run(ctx, "ip", "link", "set", ifc, "mtu", "1450"); err != nil {
		t.Fatal(err)
	}
	const ownFullSize = 1450 - 28
	if got, err := pingDF(ctx, ga.ns, guests[1].ip, ownFullSize, 3); err != nil || got != 3 {
		t.Errorf("control: a %d-byte ping from node A to node B: %d of 3 replies (%v), want all", ownFullSize, got, err)
	}
	if got, err := pingDF(ctx, ga.ns, guests[2].ip, ownFullSize, 3); err != nil || got != 0 {
		t.Errorf("control: a %d-byte ping from node A to node C, whose underlay is 1400: %d of 3 replies (%v), want none", ownFullSize, got, err)
	}
	t.Logf("overlay MTU %d (underlays %v): full-size pings crossed all %d ordered pairs of nodes", overlay, reported, len(guests)*(len(guests)-1))
}
