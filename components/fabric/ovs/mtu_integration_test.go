package ovs

import (
	"context"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/kos-sdn/kos/components/fabric"
	"github.com/kos-sdn/kos/tools/ovsenv"
)

// deviceMTU returns the MTU the kernel gives interface ifc in namespace ns.
func deviceMTU(t *testing.T, ns *ovsenv.Netns, ifc string) int {
	t.Helper()
	out, err := ns.Run(t.Context(), "cat", "/sys/class/net/"+ifc+"/mtu")
	if err != nil {
		t.Fatal(err)
	}
	mtu, err := strconv.Atoi(out)
	if err != nil {
		t.Fatalf("MTU of %s: %v", ifc, err)
	}
	return mtu
}

// mtuRequest returns the MTU OVS was asked to give an interface, "[]" for
// none.
func mtuRequest(t *testing.T, inst *ovsenv.Instance, ifc string) string {
	t.Helper()
	out, err := inst.Run(t.Context(), "ovs-vsctl", "get", "Interface", ifc, "mtu_request")
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestIntegrationMTU checks that local attachments' interfaces get the
// fabric's MTU, that List reports one whose MTU request someone changed as
// partial and that creating it again repairs it, and that a fabric with
// another MTU (an agent restarted with another --mtu) moves every interface
// to its own.
func TestIntegrationMTU(t *testing.T) {
	inst := ovsenv.StartT(t, ovsenv.Options{})
	ctx := t.Context()
	f := New(Config{RunDir: inst.RunDir, DatapathType: "netdev", MTU: 1450})
	if _, err := f.Ensure(ctx); err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	if err := f.CreateLocal(ctx, l1, l2); err != nil {
		t.Fatal(err)
	}
	// check checks what OVS was asked for and what the kernel did.
	check := func(step string, mtu int) {
		t.Helper()
		for _, a := range []fabric.LocalAttachment{l1, l2} {
			if got, want := mtuRequest(t, inst, a.InterfaceName()), strconv.Itoa(mtu); got != want {
				t.Errorf("%s: mtu_request of %s = %s, want %s", step, a.InterfaceName(), got, want)
			}
			if got := deviceMTU(t, inst.Netns, a.InterfaceName()); got != mtu {
				t.Errorf("%s: MTU of device %s = %d, want %d", step, a.InterfaceName(), got, mtu)
			}
		}
	}
	check("created", 1450)
	whole := &fabric.Inventory{Local: []fabric.LocalAttachment{l1, l2}}
	if diff := diffInventory(whole, list(t, f)); diff != "" {
		t.Errorf("List after creating differs (-want +got):\n%s", diff)
	}

	if _, err := inst.Run(ctx, "ovs-vsctl", "set", "Interface", l1.InterfaceName(), "mtu_request=1500"); err != nil {
		t.Fatal(err)
	}
	want := &fabric.Inventory{Local: []fabric.LocalAttachment{l2}, PartialLocal: []fabric.LocalAttachment{l1}}
	if diff := diffInventory(want, list(t, f)); diff != "" {
		t.Errorf("List after l1's MTU changed differs (-want +got):\n%s", diff)
	}
	if err := f.CreateLocal(ctx, l1); err != nil {
		t.Fatal(err)
	}
	check("repaired", 1450)
	if diff := diffInventory(whole, list(t, f)); diff != "" {
		t.Errorf("List after the repair differs (-want +got):\n%s", diff)
	}

	// A fabric that leaves the MTU to OVS does not check it.
	if diff := diffInventory(whole, list(t, New(Config{RunDir: inst.RunDir}))); diff != "" {
		t.Errorf("List without an MTU differs (-want +got):\n%s", diff)
	}

	restarted := New(Config{RunDir: inst.RunDir, DatapathType: "netdev", MTU: 1400})
	partial := &fabric.Inventory{PartialLocal: []fabric.LocalAttachment{l1, l2}}
	if diff := diffInventory(partial, list(t, restarted)); diff != "" {
		t.Errorf("List with another MTU differs (-want +got):\n%s", diff)
	}
	if err := restarted.CreateLocal(ctx, l1, l2); err != nil {
		t.Fatal(err)
	}
	check("moved to another MTU", 1400)
	if diff := diffInventory(whole, list(t, restarted)); diff != "" {
		t.Errorf("List after moving to another MTU differs (-want +got):\n%s", diff)
	}
}

// pingReceived matches ping's summary, such as "3 packets transmitted, 3
// received, 0% packet loss".
var pingReceived = regexp.MustCompile(`(\d+) packets transmitted, (\d+) received`)

// pingDF sends count pings of size bytes of ICMP payload (28 bytes less than
// the IPv4 packet) from namespace ns to dst, not to be fragmented, five a
// second, and returns how many replies came back within a second of the
// last.
func pingDF(ctx context.Context, ns *ovsenv.Netns, dst netip.Addr, size, count int) (int, error) {
	out, _ := ns.Command(ctx, "ping", "-n", "-q", "-i", "0.2", "-M", "do", "-s", strconv.Itoa(size), "-c", strconv.Itoa(count), "-W", "1", dst.String()).CombinedOutput()
	// ping exits 1 when replies are missing, which is an answer here.
	m := pingReceived.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("ping -M do -s %d %v in %s: %s", size, dst, ns.Name, out)
	}
	return strconv.Atoi(string(m[2]))
}

// TestIntegrationTwoNodeVXLANFullSize sends full-size packets, which must not
// be fragmented, between guests on two simulated nodes whose underlay has
// MTU 1500. Guests whose interfaces have the MTU fabric.AttachmentMTU
// computes reach each other with the largest packet their MTU allows; guests
// on interfaces of the underlay's MTU, which OVS gives a fresh bridge's
// internal ports when not asked for another, lose every full-size packet
// once VXLAN has added its 50 bytes, while small packets cross.
func TestIntegrationTwoNodeVXLANFullSize(t *testing.T) {
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
	// Fabrics on the same switches that make interfaces of the
	// underlay's MTU. (Asking for none would not do here: OVS gives the
	// internal ports that ask for none the smallest MTU asked for on the
	// bridge, the other fabric's.)
	a1500 := &node{ns: a.ns, ovs: a.ovs, hostIP: a.hostIP, fabric: New(Config{RunDir: a.ovs.RunDir, DatapathType: "netdev", MTU: underlayMTU})}
	b1500 := &node{ns: b.ns, ovs: b.ovs, hostIP: b.hostIP, fabric: New(Config{RunDir: b.ovs.RunDir, DatapathType: "netdev", MTU: underlayMTU})}

	type pair struct {
		name   string
		mtu    int
		a, b   *node
		attA   fabric.LocalAttachment
		attB   fabric.LocalAttachment
		guestA *ovsenv.Netns
	}
	pairs := []*pair{
		{name: "computed MTU", mtu: mtu, a: a, b: b,
			attA: fabric.LocalAttachment{VNI: 7, IP: netip.MustParseAddr("10.7.0.1")},
			attB: fabric.LocalAttachment{VNI: 7, IP: netip.MustParseAddr("10.7.0.2")}},
		{name: "the underlay's MTU", mtu: underlayMTU, a: a1500, b: b1500,
			attA: fabric.LocalAttachment{VNI: 8, IP: netip.MustParseAddr("10.8.0.1")},
			attB: fabric.LocalAttachment{VNI: 8, IP: netip.MustParseAddr("10.8.0.2")}},
	}
	for _, p := range pairs {
		p.guestA = p.a.attachGuest(t, ctx, p.attA)
		guestB := p.b.attachGuest(t, ctx, p.attB)
		if got := deviceMTU(t, guestB, p.attB.InterfaceName()); got != p.mtu {
			t.Errorf("%s: MTU of %s = %d, want %d", p.name, p.attB.InterfaceName(), got, p.mtu)
		}
		if err := p.a.fabric.CreateRemote(ctx, fabric.RemoteAttachment{VNI: p.attB.VNI, IP: p.attB.IP, HostIP: b.hostIP}); err != nil {
			t.Fatal(err)
		}
		if err := p.b.fabric.CreateRemote(ctx, fabric.RemoteAttachment{VNI: p.attA.VNI, IP: p.attA.IP, HostIP: a.hostIP}); err != nil {
			t.Fatal(err)
		}
	}

	const count = 3
	for _, p := range pairs {
		// Small packets cross either way; the first also settles ARP.
		if got, err := p.guestA.Ping(ctx, p.attB.IP, count, time.Second); err != nil || got != count {
			t.Errorf("%s: small ping: %d of %d replies (%v), want all", p.name, got, count, err)
		}
	}
	fullSize := mtu - 28 // the IPv4 and ICMP headers
	if got, err := pingDF(ctx, pairs[0].guestA, pairs[0].attB.IP, fullSize, count); err != nil || got != count {
		t.Errorf("%s: ping of %d bytes: %d of %d replies (%v), want all", pairs[0].name, fullSize, got, count, err)
	}
	fullSize1500 := underlayMTU - 28
	if got, err := pingDF(ctx, pairs[1].guestA, pairs[1].attB.IP, fullSize1500, count); err != nil || got != 0 {
		t.Errorf("%s: ping of %d bytes: %d of %d replies (%v), want none", pairs[1].name, fullSize1500, got, count, err)
	}
}
