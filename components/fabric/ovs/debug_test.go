package ovs

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kos-sdn/kos/components/fabric"
)

func TestTraceFlow(t *testing.T) {
	from := fabric.LocalAttachment{VNI: 4097, IP: netip.MustParseAddr("10.240.0.2")}
	to := netip.MustParseAddr("10.240.0.3")
	tests := []struct {
		name    string
		packet  Packet
		port    int
		want    string
		wantErr bool
	}{{
		name:   "icmp",
		packet: Packet{From: from, To: to, Protocol: TraceICMP},
		port:   7,
		want:   "icmp,in_port=7,dl_src=06:f0:00:02:10:01,dl_dst=06:f0:00:03:10:01,nw_src=10.240.0.2,nw_dst=10.240.0.3,nw_ttl=64,icmp_type=8,icmp_code=0",
	}, {
		name:   "tcp",
		packet: Packet{From: from, To: to, Protocol: TraceTCP, Port: 443},
		port:   7,
		want:   "tcp,in_port=7,dl_src=06:f0:00:02:10:01,dl_dst=06:f0:00:03:10:01,nw_src=10.240.0.2,nw_dst=10.240.0.3,nw_ttl=64,tp_src=40000,tp_dst=443",
	}, {
		name:   "udp",
		packet: Packet{From: from, To: to, Protocol: TraceUDP, Port: 53},
		port:   1,
		want:   "udp,in_port=1,dl_src=06:f0:00:02:10:01,dl_dst=06:f0:00:03:10:01,nw_src=10.240.0.2,nw_dst=10.240.0.3,nw_ttl=64,tp_src=40000,tp_dst=53",
	}, {
		name:   "arp",
		packet: Packet{From: from, To: to, Protocol: TraceARP},
		port:   7,
		want:   "arp,in_port=7,dl_src=06:f0:00:02:10:01,dl_dst=ff:ff:ff:ff:ff:ff,arp_op=1,arp_sha=06:f0:00:02:10:01,arp_spa=10.240.0.2,arp_tha=00:00:00:00:00:00,arp_tpa=10.240.0.3",
	}, {
		name:    "tcp without a port",
		packet:  Packet{From: from, To: to, Protocol: TraceTCP},
		port:    7,
		wantErr: true,
	}, {
		name:    "port out of range",
		packet:  Packet{From: from, To: to, Protocol: TraceUDP, Port: 65536},
		port:    7,
		wantErr: true,
	}, {
		name:    "unknown protocol",
		packet:  Packet{From: from, To: to, Protocol: "icmp,actions=drop"},
		port:    7,
		wantErr: true,
	}, {
		name:    "IPv6 destination",
		packet:  Packet{From: from, To: netip.MustParseAddr("fd00::1"), Protocol: TraceICMP},
		port:    7,
		wantErr: true,
	}, {
		name:    "no port",
		packet:  Packet{From: from, To: to, Protocol: TraceICMP},
		wantErr: true,
	}, {
		name:    "invalid attachment",
		packet:  Packet{From: fabric.LocalAttachment{VNI: 0, IP: from.IP}, To: to, Protocol: TraceICMP},
		port:    7,
		wantErr: true,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := traceFlow(tt.packet, tt.port)
			if (err != nil) != tt.wantErr {
				t.Fatalf("traceFlow(%+v, %d): error %v, want error %t", tt.packet, tt.port, err, tt.wantErr)
			}
			if diff := cmp.Diff(got, tt.want); diff != "" {
				t.Errorf("traceFlow(%+v, %d) (-got +want):\n%s", tt.packet, tt.port, diff)
			}
		})
	}
}

func TestParseFlowCount(t *testing.T) {
	tests := []struct {
		out     string
		want    int
		wantErr bool
	}{
		{out: "OFPST_AGGREGATE reply (OF1.4) (xid=0x2): packet_count=12 byte_count=1000 flow_count=4\n", want: 4},
		{out: "NXST_AGGREGATE reply (xid=0x4): packet_count=0 byte_count=0 flow_count=0\n", want: 0},
		{out: "ovs-ofctl: kos is not a bridge or a socket\n", wantErr: true},
	}
	for _, tt := range tests {
		got, err := parseFlowCount([]byte(tt.out))
		if (err != nil) != tt.wantErr {
			t.Errorf("parseFlowCount(%q): error %v, want error %t", tt.out, err, tt.wantErr)
		}
		if got != tt.want {
			t.Errorf("parseFlowCount(%q) = %d, want %d", tt.out, got, tt.want)
		}
	}
}

func TestRunDir(t *testing.T) {
	tests := []struct {
		env  []string
		want string
	}{
		{env: []string{"PATH=/bin"}, want: defaultRunDir},
		{env: []string{"OVS_RUNDIR=/a", "PATH=/bin", "OVS_RUNDIR=/b"}, want: "/b"},
		{env: []string{"OVS_RUNDIR=/a", "OVS_RUNDIR="}, want: "/a"},
	}
	for _, tt := range tests {
		if got := (&ovsClient{env: tt.env}).runDir(); got != tt.want {
			t.Errorf("runDir of %q = %q, want %q", tt.env, got, tt.want)
		}
	}
}
