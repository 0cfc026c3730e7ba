package ovs

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	goovs "github.com/digitalocean/go-openvswitch/ovs"
	"github.com/google/go-cmp/cmp"

	"github.com/kos-sdn/kos/components/apis/network"
	"github.com/kos-sdn/kos/components/fabric"
	"github.com/kos-sdn/kos/components/fabric/ovs/policy"
	"github.com/kos-sdn/kos/tools/golden"
)

// flowLines is the text ovs-ofctl add-flows takes, one flow a line.
func flowLines(t *testing.T, flows []*goovs.Flow) string {
	t.Helper()
	var b strings.Builder
	for _, f := range flows {
		text, err := f.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		b.Write(text)
		b.WriteByte('\n')
	}
	return b.String()
}

func TestFlowsGolden(t *testing.T) {
	ip := netip.MustParseAddr
	tests := []struct {
		name  string
		flows []*goovs.Flow
	}{
		{"defaults", defaultFlows(1)},
		{"local", localFlows(fabric.LocalAttachment{VNI: 1, IP: ip("10.0.0.5")}, 5)},
		{"local-highest-vni", localFlows(fabric.LocalAttachment{VNI: network.MaxVNI, IP: ip("172.31.255.254")}, 65279)},
		{"remote", remoteFlows(fabric.RemoteAttachment{VNI: 1, IP: ip("10.0.0.6"), HostIP: ip("192.168.100.2")}, 1)},
		{"remote-highest-vni", remoteFlows(fabric.RemoteAttachment{VNI: network.MaxVNI, IP: ip("192.168.0.1"), HostIP: ip("172.20.0.9")}, 3)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			golden.Check(t, "flows-"+tt.name+".golden", flowLines(t, tt.flows))
		})
	}
}

func TestFlowCounts(t *testing.T) {
	a := fabric.LocalAttachment{VNI: 7, IP: netip.MustParseAddr("10.1.2.3")}
	r := fabric.RemoteAttachment{VNI: 7, IP: netip.MustParseAddr("10.1.2.4"), HostIP: netip.MustParseAddr("192.168.0.4")}
	if got := len(localFlows(a, 3)); got != 4 {
		t.Errorf("local attachment has %d flows, want 4", got)
	}
	if got := len(remoteFlows(r, 1)); got != 3 {
		t.Errorf("remote attachment has %d flows, want 3", got)
	}
	if got := len(defaultFlows(1)); got != 4 {
		t.Errorf("%d default flows, want 4", got)
	}
}

func TestCookie(t *testing.T) {
	ip := netip.MustParseAddr
	tests := []struct {
		name     string
		kind     flowKind
		vni      uint32
		ip       netip.Addr
		want     uint64
		wantBack bool
	}{
		{"default", kindDefault, 0, netip.Addr{}, 0x6b20000000000000, true},
		{"local", kindLocal, 1, ip("10.0.0.5"), 0x6b4000010a000005, true},
		{"remote", kindRemote, 1, ip("10.0.0.5"), 0x6b6000010a000005, true},
		{"highest VNI", kindRemote, network.MaxVNI, ip("192.168.255.255"), 0x6b7fffffc0a8ffff, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := cookie(tt.kind, tt.vni, tt.ip)
			if got != tt.want {
				t.Errorf("cookie = %#x, want %#x", got, tt.want)
			}
			kind, vni, ip, ok := parseCookie(got)
			if !ok || kind != tt.kind || vni != tt.vni || ip != tt.ip {
				t.Errorf("parseCookie(%#x) = %d, %d, %v, %t; want %d, %d, %v, true", got, kind, vni, ip, ok, tt.kind, tt.vni, tt.ip)
			}
		})
	}
	for _, c := range []uint64{0, 0x1, 0x6a4000010a000005, 0x6b0000010a000005, 0x6b8000010a000005, 0x6b20000000000001} {
		if _, _, _, ok := parseCookie(c); ok {
			t.Errorf("parseCookie(%#x) accepted a cookie that is not KOS's", c)
		}
	}
}

// TestPolicyCookie checks the cookies of policy flows, and that the masks
// that select attachments' flows and policy gates tell them apart.
func TestPolicyCookie(t *testing.T) {
	for _, tt := range []struct {
		vni  uint32
		want uint64
	}{{1, 0x6b80000100000000}, {network.MaxVNI, 0x6b9fffff00000000}} {
		got := policyCookie(tt.vni)
		if got != tt.want {
			t.Errorf("policyCookie(%d) = %#x, want %#x", tt.vni, got, tt.want)
		}
		if kind, vni, _, ok := parseCookie(got); !ok || kind != kindPolicy || vni != tt.vni {
			t.Errorf("parseCookie(%#x) = %d, %d, %t; want %d, %d, true", got, kind, vni, ok, kindPolicy, tt.vni)
		}
	}
	selects := func(m *goovs.MatchFlow, c uint64) bool { return c&m.CookieMask == m.Cookie }
	attachments := []uint64{cookie(kindDefault, 0, netip.Addr{}), cookie(kindLocal, 7, netip.MustParseAddr("10.0.0.1")), cookie(kindRemote, network.MaxVNI, netip.MustParseAddr("255.255.255.255"))}
	for _, c := range attachments {
		if !selects(attachmentFlows(), c) || selects(policyGates(), c) {
			t.Errorf("cookie %#x: selected by attachmentFlows %t, by policyGates %t; want true, false", c, selects(attachmentFlows(), c), selects(policyGates(), c))
		}
	}
	for _, c := range []uint64{policyCookie(1), policyCookie(network.MaxVNI)} {
		if selects(attachmentFlows(), c) || !selects(policyGates(), c) {
			t.Errorf("cookie %#x: selected by attachmentFlows %t, by policyGates %t; want false, true", c, selects(attachmentFlows(), c), selects(policyGates(), c))
		}
	}
	// The gate must come before forwarding in forwardTable.
	if policy.GatePriority <= max(macPriority, arpPriority) {
		t.Errorf("policy.GatePriority = %d, want above the forwarding flows' %d and %d", policy.GatePriority, macPriority, arpPriority)
	}
}

// TestFlowsReadBack checks that flows as ovs-ofctl dump-flows prints them
// (OpenFlow 1.4) compare equal to the flows they were made from.
func TestFlowsReadBack(t *testing.T) {
	ip := netip.MustParseAddr
	local := localFlows(fabric.LocalAttachment{VNI: 1, IP: ip("10.0.0.5")}, 2)
	remote := remoteFlows(fabric.RemoteAttachment{VNI: 1, IP: ip("10.0.0.6"), HostIP: ip("192.168.7.2")}, 1)
	dumped := []string{
		" cookie=0x6b4000010a000005, duration=0.089s, table=0, n_packets=0, n_bytes=0, priority=100,ip,in_port=2,dl_src=06:00:00:05:00:01,nw_src=10.0.0.5 actions=set_field:0x1->tun_id,resubmit(,1)",
		" cookie=0x6b4000010a000005, duration=0.089s, table=0, n_packets=0, n_bytes=0, priority=100,arp,in_port=2,dl_src=06:00:00:05:00:01,arp_spa=10.0.0.5,arp_sha=06:00:00:05:00:01 actions=set_field:0x1->tun_id,resubmit(,1)",
		" cookie=0x6b4000010a000005, duration=0.089s, table=1, n_packets=0, n_bytes=0, priority=110,arp,tun_id=0x1,arp_tpa=10.0.0.5 actions=output:2",
		" cookie=0x6b4000010a000005, duration=0.089s, table=1, n_packets=0, n_bytes=0, priority=100,tun_id=0x1,dl_dst=06:00:00:05:00:01 actions=output:2",
		" cookie=0x6b6000010a000006, duration=0.089s, table=0, n_packets=0, n_bytes=0, priority=100,tun_src=192.168.7.2,tun_id=0x1,in_port=1,dl_src=06:00:00:06:00:01 actions=resubmit(,1)",
		" cookie=0x6b6000010a000006, duration=0.089s, table=1, n_packets=3, n_bytes=120, priority=100,tun_id=0x1,dl_dst=06:00:00:06:00:01 actions=set_field:192.168.7.2->tun_dst,output:1",
		" cookie=0x6b6000010a000006, duration=0.089s, table=1, n_packets=0, n_bytes=0, priority=110,arp,tun_id=0x1,arp_tpa=10.0.0.6 actions=set_field:192.168.7.2->tun_dst,output:1",
	}
	var got []*goovs.Flow
	for _, line := range dumped {
		f, err := parseFlow(line)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, f)
	}
	if !sameFlows(got[:4], local) {
		t.Errorf("dumped local flows differ from the ones made")
	}
	if !sameFlows(got[4:], remote) {
		t.Errorf("dumped remote flows differ from the ones made")
	}
	if sameFlows(got[4:], remoteFlows(fabric.RemoteAttachment{VNI: 1, IP: ip("10.0.0.6"), HostIP: ip("192.168.7.3")}, 1)) {
		t.Errorf("flows towards another host compare equal")
	}
	if sameFlows(got[5:], remoteFlows(fabric.RemoteAttachment{VNI: 1, IP: ip("10.0.0.6"), HostIP: ip("192.168.7.3")}, 1)[1:]) {
		t.Errorf("forwarding towards another host compares equal")
	}
	if sameFlows(got[:3], local) {
		t.Errorf("three of four flows compare equal to all four")
	}
	// The tunnel ingress flow's tun_src reads back as what it was made as.
	if !sameFlows(got[4:5], remote[:1]) {
		t.Errorf("dumped tunnel ingress flow differs from the one made")
	}
	if sameFlows(got[4:5], remoteFlows(fabric.RemoteAttachment{VNI: 1, IP: ip("10.0.0.6"), HostIP: ip("192.168.7.3")}, 1)[:1]) {
		t.Errorf("ingress flows from another host compare equal")
	}
	if !sameFlows(nil, nil) {
		t.Errorf("no flows differ from no flows")
	}
	if h, ok := tunnelDestination(got[5]); !ok || h != ip("192.168.7.2") {
		t.Errorf("tunnelDestination = %v, %t; want 192.168.7.2, true", h, ok)
	}
	if h, ok := tunnelDestination(got[0]); ok {
		t.Errorf("tunnelDestination of a local flow = %v, want none", h)
	}
}

func TestParseInterfaces(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "interfaces.json"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := parseInterfaces(data)
	if err != nil {
		t.Fatal(err)
	}
	want := []interfaceRow{
		{Name: "kos060000050001", Type: "internal", MAC: "06:00:00:05:00:01", OFPort: 2, MTURequest: 1450, ExternalIDs: map[string]string{"kos-ip": "10.0.0.5", "kos-vni": "1"}},
		{Name: "kos", Type: "internal", OFPort: 65534, ExternalIDs: map[string]string{}},
		{Name: "vtep", Type: "vxlan", OFPort: 1, ExternalIDs: map[string]string{}},
		{Name: "broken", Type: "internal", OFPort: -1, Error: "could not open network device broken (No such device)", ExternalIDs: map[string]string{}},
		{Name: "new", Type: "internal", ExternalIDs: map[string]string{}},
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(interfaceRow{})); diff != "" {
		t.Errorf("parseInterfaces differs (-want +got):\n%s", diff)
	}
	for _, bad := range []string{`not json`, `{"headings":["name"],"data":[["a","b"]]}`, `{"headings":["ofport"],"data":[[["set",[1]]]]}`} {
		if _, err := parseInterfaces([]byte(bad)); err == nil {
			t.Errorf("parseInterfaces(%s) succeeded, want an error", bad)
		}
	}
}

// TestParseFlowUnbalanced keeps what FuzzDumpedFlow found: the library's
// parser panics on an unbalanced parenthesis in the actions; parseFlow
// reports it as an error instead.
func TestParseFlowUnbalanced(t *testing.T) {
	for _, line := range []string{"actions=)0000000000000000", "cookie=0x1, table=1, priority=1 actions=resubmit(,1))"} {
		if _, err := parseFlow(line); err == nil {
			t.Errorf("parseFlow(%q) succeeded, want an error", line)
		}
	}
	if _, err := parseFlow("cookie=0x6b20000000000000, table=1, priority=0 actions=drop"); err != nil {
		t.Errorf("parseFlow of a good flow: %v", err)
	}
}
