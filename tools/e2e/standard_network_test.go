package e2e

// This file holds TestIntegrationStandardRelease's network: the subnets and
// attachments it makes, the guest namespaces given their interfaces, the
// pings across nodes and between VNIs, and, for a failed run, the dump of
// every agent's log, node's switch and guest.

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	networkv1alpha1 "github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/tools/cluster"
	"github.com/kos-sdn/kos/tools/figures"
	"github.com/kos-sdn/kos/tools/kosinstall"
	"github.com/kos-sdn/kos/tools/ovsenv"
	"github.com/kos-sdn/kos/tools/poll"
)

// testNetwork makes two subnets of the same CIDR in two VNIs, an attachment
// of each on every node and one more in the second, gives each to a guest
// namespace, and pings: every guest reaches the others of its VNI across
// nodes, and none reaches the other VNI.
func (s *standard) testNetwork(t *testing.T) {
	ctx := t.Context()
	if _, err := s.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: standardNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const cidr = "10.251.0.0/24"
	for name, vni := range map[string]uint32{"blue": 4101, "red": 4102} {
		subnet := &networkv1alpha1.Subnet{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       networkv1alpha1.SubnetSpec{IPv4: cidr, VNI: vni},
		}
		if _, err := s.network.NetworkV1alpha1().Subnets(standardNamespace).Create(ctx, subnet, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating subnet %s: %v", name, err)
		}
		s.subnets[name] = netip.MustParsePrefix(cidr)
	}
	began := time.Now()
	var names []string
	for i, n := range s.env.Nodes {
		for _, subnet := range []string{"blue", "red"} {
			names = append(names, s.attach(t, fmt.Sprintf("%s-%d", subnet, i+1), subnet, n.Name))
		}
	}
	// One more in red: an address red has that blue may not.
	names = append(names, s.attach(t, "red-extra", "red", s.env.Nodes[0].Name))
	for _, name := range names {
		s.plumb(t, name)
	}
	blue, red := s.guestsOf("blue"), s.guestsOf("red")
	first := awaitPing(t, blue[0], blue[1].IP, time.Minute)
	figures.Duration(t, "first-cross-node-ping", time.Since(began))
	t.Logf("the first reply across nodes came %s after the first ping", first.Round(100*time.Millisecond))
	checkPings(t, blue, 5, 1, 30*time.Second)
	checkPings(t, red, 5, 1, 30*time.Second)

	// Isolation: the same address in the other VNI answers from its own
	// VNI's attachment, and an address only the other VNI has does not
	// answer at all.
	blueIPs := map[netip.Addr]*kosinstall.Guest{}
	for _, g := range blue {
		blueIPs[g.IP] = g
	}
	checked := 0
	for _, r := range red {
		if g, ok := blueIPs[r.IP]; ok {
			if g == blue[0] {
				continue
			}
			if lost, err := pingLoss(ctx, blue[0], r.IP, 1); err != nil || lost != 0 {
				t.Errorf("ping %s -> %s: lost %d (%v)", blue[0].Attachment.Name, r.IP, lost, err)
				continue
			}
			mac, err := blue[0].NeighbourMAC(ctx, r.IP)
			if err != nil {
				t.Fatal(err)
			}
			if mac != g.Attachment.Status.MACAddress {
				t.Errorf("guest %s: %s answered from MAC %s, want blue's %s (red's is %s)", blue[0].Attachment.Name, r.IP, mac, g.Attachment.Status.MACAddress, r.Attachment.Status.MACAddress)
			}
			checked++
			continue
		}
		if lost, err := pingLoss(ctx, blue[0], r.IP, 3); err != nil || lost != 3 {
			t.Errorf("guest %s (blue) reached %s, which only red's %s has: %d of 3 lost (%v)", blue[0].Attachment.Name, r.IP, r.Attachment.Name, lost, err)
		}
		checked++
	}
	if checked == 0 {
		t.Error("the isolation check checked nothing")
	}
}

// attach creates an attachment of subnet on node and returns its name.
func (s *standard) attach(t *testing.T, name, subnet, node string) string {
	t.Helper()
	att := &networkv1alpha1.NetworkAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       networkv1alpha1.NetworkAttachmentSpec{Node: node, Subnet: subnet},
	}
	if _, err := s.network.NetworkV1alpha1().NetworkAttachments(standardNamespace).Create(t.Context(), att, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating attachment %s: %v", name, err)
	}
	return name
}

// plumb waits until the attachment has an address and its interface on its
// node, then gives the interface to the attachment's guest.
func (s *standard) plumb(t *testing.T, name string) {
	t.Helper()
	_, again := s.guests[name]
	poll.Until(t, 2*time.Minute, "attachment "+name+" to be addressed and given to its guest", func(ctx context.Context) error {
		att, err := s.network.NetworkV1alpha1().NetworkAttachments(standardNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		st := att.Status
		if st.IPv4 == "" || st.IfcName == "" || st.HostIP == "" {
			return fmt.Errorf("attachment %s: ipv4 %q, ifcName %q, hostIP %q, errors %+v", name, st.IPv4, st.IfcName, st.HostIP, st.Errors)
		}
		node := s.node(t, att.Spec.Node)
		g, err := kosinstall.PlumbGuest(ctx, node.Netns, guestPrefix+name, att, s.subnets[att.Spec.Subnet])
		if err != nil {
			return err
		}
		s.guests[name] = g
		return nil
	})
	if !again {
		// The guests last as long as the whole test.
		s.t.Cleanup(func() {
			if err := s.guests[name].Delete(); err != nil {
				s.t.Error(err)
			}
		})
	}
}

// guestsOf returns the guests of a subnet's attachments on each node, in
// node order.
func (s *standard) guestsOf(subnet string) []*kosinstall.Guest {
	var out []*kosinstall.Guest
	for i := range s.env.Nodes {
		if g := s.guests[fmt.Sprintf("%s-%d", subnet, i+1)]; g != nil {
			out = append(out, g)
		}
	}
	return out
}

func (s *standard) node(t *testing.T, name string) *cluster.Node {
	t.Helper()
	for _, n := range s.env.Nodes {
		if n.Name == name {
			return n
		}
	}
	t.Fatalf("no node %s", name)
	return nil
}

// dumpFabrics logs, for a failed run, the end of every agent's log and how
// the switch of each running node differs from what the attachments call
// for: a lost ping is explained by one or the other.
func (s *standard) dumpFabrics() {
	t := s.t
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pods, err := s.kube.CoreV1().Pods(kosinstall.AgentNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Logf("listing the agents: %v", err)
		pods = &corev1.PodList{}
	}
	// The agent's log, and that of kos-ovs, which runs the node's Open
	// vSwitch beside it.
	for _, p := range pods.Items {
		for _, c := range []struct {
			name  string
			lines int64
		}{{"kos-agent", 40}, {"ovs", 30}} {
			logs, err := s.kube.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: c.name, TailLines: &c.lines}).DoRaw(ctx)
			if err != nil {
				t.Logf("the log of container %s on %s: %v", c.name, p.Spec.NodeName, err)
				continue
			}
			t.Logf("the end of the log of container %s on %s:\n%s", c.name, p.Spec.NodeName, logs)
		}
	}
	atts, err := s.network.NetworkV1alpha1().NetworkAttachments(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Logf("listing the attachments: %v", err)
		return
	}
	for _, n := range s.env.Nodes {
		if n == s.stopped {
			continue
		}
		// Where the node's underlay address is.
		node := &ovsenv.Netns{Name: n.Netns}
		for _, args := range [][]string{{"ip", "-o", "addr", "show"}, {"ip", "route", "show"}} {
			out, err := node.Run(ctx, args[0], args[1:]...)
			t.Logf("node %s: %s (err %v):\n%s", n.Name, strings.Join(args, " "), err, out)
		}
		if err := fabricProblems(ctx, n, atts.Items); err != nil {
			t.Logf("fabric: %v", err)
		} else {
			t.Logf("fabric: node %s holds what the attachments call for", n.Name)
		}
		// What Open vSwitch thinks of each port (a port it believes down
		// drops what it should send) and what its datapath did.
		runDir := n.HostPath(agentOVSRunDir)
		env := append(os.Environ(), "OVS_RUNDIR="+runDir)
		// ovs-vswitchd's pid file names a pid of the pod's namespace: reach
		// its control socket by path.
		ctl, _ := filepath.Glob(filepath.Join(runDir, "ovs-vswitchd.*.ctl"))
		ctl = append(ctl, "ovs-vswitchd")
		for _, args := range [][]string{
			{"ovs-vsctl", "--timeout=20", "--columns=name,ofport,admin_state,link_state,statistics", "list", "interface"},
			{"ovs-ofctl", "-O", "OpenFlow14", "dump-flows", "kos"},
			{"ovs-appctl", "--timeout=20", "-t", ctl[0], "dpctl/dump-flows", "-m"},
			{"ovs-appctl", "--timeout=20", "-t", ctl[0], "ovs/route/show"},
			{"ovs-appctl", "--timeout=20", "-t", ctl[0], "tnl/neigh/show"},
			{"ovs-appctl", "--timeout=20", "-t", ctl[0], "tnl/ports/show", "-v"},
		} {
			out, err := runEnv(ctx, env, args[0], args[1:]...)
			t.Logf("node %s: %s (err %v):\n%s", n.Name, strings.Join(args, " "), err, out)
		}
	}
	// And what each guest sees.
	for _, name := range slices.Sorted(maps.Keys(s.guests)) {
		g := s.guests[name]
		for _, args := range [][]string{{"ip", "-s", "link"}, {"ip", "addr"}, {"ip", "neigh"}} {
			out, err := g.Run(ctx, args[0], args[1:]...)
			t.Logf("guest %s (%s): %s (err %v):\n%s", g.Name, g.IP, strings.Join(args, " "), err, out)
		}
	}
}
