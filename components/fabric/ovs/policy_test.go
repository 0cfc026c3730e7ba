package ovs

import (
	"net"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kos-sdn/kos/components/fabric"
)

func TestParsePolicyDrops(t *testing.T) {
	mac := func(s string) net.HardwareAddr {
		m, err := net.ParseMAC(s)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	// As ovs-ofctl -O OpenFlow14 dump-flows prints policy flows: only
	// the isolated ports' drops count, not the state table's drops nor
	// conjunction flows on the same MAC.
	out := []byte(` cookie=0x6b80000700000000, duration=5.2s, table=2, n_packets=4, n_bytes=264, priority=110,ct_state=+inv+trk,ip,tun_id=0x7 actions=drop
 cookie=0x6b80000700000000, duration=5.2s, table=3, n_packets=7, n_bytes=518, priority=50,ip,tun_id=0x7,dl_src=06:07:00:03:00:07 actions=drop
 cookie=0x6b80000700000000, duration=5.2s, table=4, n_packets=12, n_bytes=888, priority=100,ip,tun_id=0x7,dl_dst=06:07:00:01:00:07 actions=conjunction(14337,1/3)
 cookie=0x6b80000700000000, duration=5.2s, table=4, n_packets=2, n_bytes=148, priority=50,ip,tun_id=0x7,dl_dst=06:07:00:01:00:07 actions=drop
 cookie=0x6b9fffff00000000, duration=1.0s, table=4, n_packets=0, n_bytes=0, priority=50,ip,tun_id=0x1fffff,dl_dst=fe:07:00:01:ff:ff actions=drop
`)
	want := []fabric.PolicyDrop{
		{VNI: 7, MAC: mac("06:07:00:03:00:07"), Egress: true, Packets: 7},
		{VNI: 7, MAC: mac("06:07:00:01:00:07"), Packets: 2},
		{VNI: 0x1fffff, MAC: mac("fe:07:00:01:ff:ff")},
	}
	if diff := cmp.Diff(want, parsePolicyDrops(out)); diff != "" {
		t.Errorf("parsePolicyDrops differs (-want +got):\n%s", diff)
	}
}
