package debugserver

import (
	"net"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

func TestFormatRoute(t *testing.T) {
	_, sub, _ := net.ParseCIDR("10.1.0.0/24")
	_, host, _ := net.ParseCIDR("10.1.0.5/32")
	names := func(i int) string { return map[int]string{2: "eth0", 3: "br-ul"}[i] }
	tests := []struct {
		route netlink.Route
		want  string
	}{
		{netlink.Route{Gw: net.ParseIP("10.1.0.1"), LinkIndex: 3, Table: unix.RT_TABLE_MAIN}, "default via 10.1.0.1 dev br-ul"},
		{netlink.Route{Dst: sub, LinkIndex: 2, Src: net.ParseIP("10.1.0.5"), Table: unix.RT_TABLE_MAIN, Priority: 100}, "10.1.0.0/24 dev eth0 src 10.1.0.5 metric 100"},
		{netlink.Route{Dst: host, Type: unix.RTN_LOCAL, LinkIndex: 2, Table: unix.RT_TABLE_LOCAL}, "local 10.1.0.5 dev eth0 table local"},
		{netlink.Route{Dst: sub, LinkIndex: 2, Table: 100}, "10.1.0.0/24 dev eth0 table 100"},
	}
	for _, tt := range tests {
		if got := formatRoute(tt.route, names); got != tt.want {
			t.Errorf("formatRoute(%+v) = %q, want %q", tt.route, got, tt.want)
		}
	}
}
