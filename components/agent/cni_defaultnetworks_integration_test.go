package agent_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/kos-sdn/kos/components/agent/cniserver"
	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/cni"
	"github.com/kos-sdn/kos/components/fabric"
	"github.com/kos-sdn/kos/components/fabric/ovs"
	"github.com/kos-sdn/kos/tools/ovsenv"
	"github.com/kos-sdn/kos/tools/poll"
)

// TestIntegrationCNIDefaultNetworks plugs a pod's interfaces under the
// names Multus gives them when its configuration has one default network:
// the pod's annotation "blue, red, blue" makes the controller name its
// attachments net1, net2 and net3, and Multus, counting its default
// network first, asks for net2, net3 and net4. Each ADD gets the
// attachment of its entry (the address of its subnet), the pod carries
// traffic on them, CHECK passes, and after an agent restart (which forgets
// the sandboxes) a DEL of net2 takes off that interface's port alone.
func TestIntegrationCNIDefaultNetworks(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	k := newAPI(t)
	const blueVNI, redVNI = 232, 233
	k.subnet("blue", "10.232.0.0/24", blueVNI)
	k.subnet("red", "10.233.0.0/24", redVNI)
	inst := ovsenv.StartT(t, ovsenv.Options{})
	fab := ovs.New(ovs.Config{RunDir: inst.RunDir, DatapathType: "netdev", MTU: podMTU})
	cfg := agentConfig(t, k.node("a"), hostA, fab)
	cfg.CNI = cniserver.Config{
		Socket:            filepath.Join(shortDir(t), "cni.sock"),
		Wait:              5 * time.Second,
		HostNetns:         "/run/netns/" + inst.Netns.Name,
		NoChecksumOffload: true,
	}
	first := startAgent(t, cfg)
	c := newCNIClient(t, cfg.CNI.Socket)

	web := &sandbox{netns: ovsenv.NetnsT(t), pod: cni.Pod{Namespace: k.ns, Name: "web-0", UID: "uid-web-0"}, containerID: "c0"}
	// Each entry of the annotation: the controller's interface name,
	// Multus's, the subnet and the address IPAM gave.
	entries := []struct {
		ifname, multus, subnet string
		ip                     netip.Addr
		vni                    uint32
	}{
		{"net1", "net2", "blue", netip.MustParseAddr("10.232.0.10"), blueVNI},
		{"net2", "net3", "red", netip.MustParseAddr("10.233.0.10"), redVNI},
		{"net3", "net4", "blue", netip.MustParseAddr("10.232.0.11"), blueVNI},
	}
	atts := make([]fabric.LocalAttachment, len(entries))
	for i, e := range entries {
		name := v1alpha1.AttachmentName(web.pod.Name, e.ifname)
		k.attachment(name, k.node("a"), e.subnet, func(att *v1alpha1.NetworkAttachment) {
			att.Labels = map[string]string{v1alpha1.PodUIDLabel: web.pod.UID}
			att.Annotations = map[string]string{v1alpha1.PodAnnotation: web.pod.Name, v1alpha1.InterfaceAnnotation: e.ifname}
		})
		k.address(name, e.ip.String(), e.vni)
		atts[i] = fabric.LocalAttachment{VNI: e.vni, IP: e.ip}
	}
	// A peer on blue, without default networks: its net1 is net1.
	peer := &sandbox{netns: ovsenv.NetnsT(t), pod: cni.Pod{Namespace: k.ns, Name: "peer", UID: "uid-peer"}, containerID: "p0"}
	peerIP := netip.MustParseAddr("10.232.0.20")
	k.podAttachment(peer.pod, k.node("a"), "blue", peerIP.String(), blueVNI)

	request := func(command string, i int) cni.Request {
		r := web.request(command)
		r.IfName, r.Subnet, r.Network = entries[i].multus, entries[i].subnet, entries[i].subnet+"-net"
		return r
	}
	serving := func() {
		t.Helper()
		poll.Until(t, settle, "the CNI server answers STATUS", func(context.Context) error {
			if _, err := os.Stat(cfg.CNI.Socket); err != nil {
				return err
			}
			if _, cniErr := c.do(cni.Request{Command: cni.CommandStatus}); cniErr != nil {
				return cniErr
			}
			return nil
		})
	}
	serving()
	// Multus runs a sandbox's ADDs in the annotation's order.
	for i, e := range entries {
		res := c.mustSucceed(request(cni.CommandAdd, i))
		if len(res.Interfaces) != 1 || len(res.IPs) != 1 || res.Interfaces[0].Name != e.multus || !res.IPs[0].Address.IP.Equal(e.ip.AsSlice()) {
			t.Errorf("ADD of %s (entry %d, %s): interfaces %v, addresses %v; want %s with %s", e.multus, i+1, e.subnet, res.Interfaces, res.IPs, e.multus, e.ip)
		}
		out, err := web.netns.Run(ctx, "ip", "-o", "-4", "addr", "show", "dev", e.multus)
		if err != nil || !strings.Contains(out, e.ip.String()+"/24") {
			t.Errorf("%s of web-0: %q (%v), want address %s", e.multus, out, err, e.ip)
		}
	}
	c.mustSucceed(peer.request(cni.CommandAdd))
	for i := range entries {
		if _, cniErr := c.do(request(cni.CommandCheck, i)); cniErr != nil {
			t.Errorf("CHECK of %s: %v", entries[i].multus, cniErr)
		}
	}
	wantPlugs := []fabric.Plug{
		{LocalAttachment: atts[0], Owner: "c0/net2"},
		{LocalAttachment: atts[1], Owner: "c0/net3"},
		{LocalAttachment: atts[2], Owner: "c0/net4"},
	}
	checkPlugs := func(step string, want []fabric.Plug) {
		t.Helper()
		got, err := fab.Plugs(ctx, atts...)
		if err != nil {
			t.Fatalf("%s: Plugs: %v", step, err)
		}
		if diff := cmp.Diff(got, want, cmpopts.EquateComparable(netip.Addr{}), cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%s: plugs (-got +want):\n%s", step, diff)
		}
	}
	checkPlugs("added", wantPlugs)
	// Both blue interfaces reach the peer (each bound to its device: the
	// two routes to blue are alike).
	for _, from := range []string{entries[0].multus, entries[2].multus} {
		poll.Until(t, settle, fmt.Sprintf("web-0 pings the peer from %s", from), func(ctx context.Context) error {
			if got, err := web.netns.Run(ctx, "ping", "-c", "1", "-W", "1", "-I", from, peerIP.String()); err != nil {
				return fmt.Errorf("%s (%v)", got, err)
			}
			return nil
		})
	}

	// A restarted agent remembers no sandbox: the DEL finds net2's
	// attachment by the owner its port records.
	first.stop(t)
	fab = ovs.New(ovs.Config{RunDir: inst.RunDir, DatapathType: "netdev", MTU: podMTU})
	cfg.Fabric = fab
	startAgent(t, cfg)
	serving()
	checkPlugs("after an agent restart", wantPlugs)
	c.mustSucceed(request(cni.CommandDel, 0))
	checkPlugs("after the DEL of net2", wantPlugs[1:])
	if out, err := web.netns.Run(ctx, "ip", "link", "show", "net2"); err == nil {
		t.Errorf("web-0 still has net2 after its DEL: %s", out)
	}
	// The sandbox's next ADD of net2 takes the same attachment again.
	c.mustSucceed(request(cni.CommandAdd, 0))
	checkPlugs("after net2's ADD again", wantPlugs)
}
