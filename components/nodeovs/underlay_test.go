package nodeovs

import (
	"net"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

func cidr(s string) *net.IPNet {
	_, n, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	return n
}

// TestMovableRoutes checks which routes move with the addresses, and that
// the record gives back the same routes through the new interface.
func TestMovableRoutes(t *testing.T) {
	gw := net.ParseIP("192.168.1.1").To4()
	routes := []netlink.Route{
		// The default route, as netlink lists it (no destination).
		{LinkIndex: 2, Gw: gw, Table: unix.RT_TABLE_MAIN, Protocol: unix.RTPROT_DHCP, Priority: 100, Type: unix.RTN_UNICAST},
		{LinkIndex: 2, Dst: cidr("10.96.0.0/12"), Gw: gw, Src: net.ParseIP("192.168.1.2").To4(), Table: unix.RT_TABLE_MAIN, Protocol: unix.RTPROT_STATIC, Type: unix.RTN_UNICAST},
		{LinkIndex: 2, Dst: cidr("172.16.0.0/16"), Gw: gw, Table: 100, Protocol: unix.RTPROT_BOOT, Flags: unix.RTNH_F_ONLINK, Type: unix.RTN_UNICAST},
		// Made by the kernel for the address: it follows the address.
		{LinkIndex: 2, Dst: cidr("192.168.1.0/24"), Table: unix.RT_TABLE_MAIN, Protocol: unix.RTPROT_KERNEL, Scope: netlink.SCOPE_LINK, Type: unix.RTN_UNICAST},
		// The local table belongs to the kernel.
		{LinkIndex: 2, Dst: cidr("192.168.1.2/32"), Table: unix.RT_TABLE_LOCAL, Protocol: unix.RTPROT_KERNEL, Type: unix.RTN_LOCAL},
		{LinkIndex: 2, Dst: cidr("10.1.0.0/16"), Table: unix.RT_TABLE_MAIN, Protocol: unix.RTPROT_STATIC, Type: unix.RTN_BLACKHOLE},
		{LinkIndex: 2, Dst: cidr("10.2.0.0/16"), Table: unix.RT_TABLE_MAIN, MultiPath: []*netlink.NexthopInfo{{LinkIndex: 2, Gw: gw}}},
	}
	got := movableRoutes(routes)
	want := []savedRoute{
		{Dst: "0.0.0.0/0", Gateway: "192.168.1.1", Priority: 100, Protocol: unix.RTPROT_DHCP},
		{Dst: "10.96.0.0/12", Gateway: "192.168.1.1", Source: "192.168.1.2", Protocol: unix.RTPROT_STATIC},
		{Dst: "172.16.0.0/16", Gateway: "192.168.1.1", Table: 100, Protocol: unix.RTPROT_BOOT, OnLink: true},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("movableRoutes (-want +got):\n%s", diff)
	}

	rec := &underlayRecord{Interface: "eth0", Addresses: []string{"192.168.1.2/24"}, Routes: got}
	back, err := rec.routes(7)
	if err != nil {
		t.Fatal(err)
	}
	wantBack := []netlink.Route{
		{LinkIndex: 7, Dst: cidr("0.0.0.0/0"), Gw: net.ParseIP("192.168.1.1"), Priority: 100, Protocol: unix.RTPROT_DHCP},
		{LinkIndex: 7, Dst: cidr("10.96.0.0/12"), Gw: net.ParseIP("192.168.1.1"), Src: net.ParseIP("192.168.1.2"), Protocol: unix.RTPROT_STATIC},
		{LinkIndex: 7, Dst: cidr("172.16.0.0/16"), Gw: net.ParseIP("192.168.1.1"), Table: 100, Protocol: unix.RTPROT_BOOT, Flags: unix.RTNH_F_ONLINK},
	}
	if diff := cmp.Diff(wantBack, back); diff != "" {
		t.Errorf("routes (-want +got):\n%s", diff)
	}
}
