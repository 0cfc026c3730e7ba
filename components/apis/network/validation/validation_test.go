package validation

import (
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kos-sdn/kos/components/apis/network"
)

// errorStrings renders errs as "<path>: <type>: <value>: <message>" lines, which
// show both the field paths and the messages users see.
func errorStrings(errs field.ErrorList) []string {
	var out []string
	for _, err := range errs {
		out = append(out, err.Error())
	}
	return out
}

func subnet(ns, name, cidr string, vni uint32) *network.Subnet {
	return &network.Subnet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       network.SubnetSpec{IPv4: cidr, VNI: vni},
	}
}

func TestValidateVNI(t *testing.T) {
	tests := []struct {
		vni  uint32
		want []string
	}{
		{0, []string{"spec.vni: Invalid value: 0: must be in [1,2097151]"}},
		{1, nil},
		{2097151, nil},
		{2097152, []string{"spec.vni: Invalid value: 2097152: must be in [1,2097151]"}},
		{4294967295, []string{"spec.vni: Invalid value: 4294967295: must be in [1,2097151]"}},
	}
	for _, tc := range tests {
		t.Run(strconv.FormatUint(uint64(tc.vni), 10), func(t *testing.T) {
			got := errorStrings(ValidateVNI(tc.vni, field.NewPath("spec", "vni")))
			if diff := cmp.Diff(got, tc.want); diff != "" {
				t.Errorf("ValidateVNI(%d) mismatch (-got +want):\n%s", tc.vni, diff)
			}
		})
	}
}

func TestValidateCIDR(t *testing.T) {
	const inside = "must lie inside one RFC 1918 range (10.0.0.0/8, 172.16.0.0/12 or 192.168.0.0/16)"
	tests := []struct {
		name string
		cidr string
		want []string
	}{
		{"all of 10/8", "10.0.0.0/8", nil},
		{"inside 10/8", "10.1.0.0/16", nil},
		{"all of 172.16/12", "172.16.0.0/12", nil},
		{"inside 172.16/12", "172.31.255.0/24", nil},
		{"inside 192.168/16", "192.168.5.0/24", nil},
		{"single address", "192.168.255.255/32", nil},
		{"public", "8.8.8.0/24", []string{`spec.ipv4: Invalid value: "8.8.8.0/24": ` + inside}},
		{"just past 172.16/12", "172.32.0.0/16", []string{`spec.ipv4: Invalid value: "172.32.0.0/16": ` + inside}},
		{"just before 10/8", "9.255.255.0/24", []string{`spec.ipv4: Invalid value: "9.255.255.0/24": ` + inside}},
		{"larger than 10/8", "10.0.0.0/7", []string{`spec.ipv4: Invalid value: "10.0.0.0/7": ` + inside}},
		{"larger than 172.16/12", "172.0.0.0/8", []string{`spec.ipv4: Invalid value: "172.0.0.0/8": ` + inside}},
		{"spanning two ranges", "128.0.0.0/1", []string{`spec.ipv4: Invalid value: "128.0.0.0/1": spans 172.16.0.0/12 and 192.168.0.0/16; ` + inside}},
		{"spanning all ranges", "0.0.0.0/0", []string{`spec.ipv4: Invalid value: "0.0.0.0/0": spans 10.0.0.0/8 and 172.16.0.0/12 and 192.168.0.0/16; ` + inside}},
		{"empty", "", []string{"spec.ipv4: Required value: an IPv4 CIDR block such as 10.1.0.0/16"}},
		{"no prefix length", "10.0.0.0", []string{`spec.ipv4: Invalid value: "10.0.0.0": must be an IPv4 CIDR block such as 10.1.0.0/16`}},
		{"prefix too long", "10.0.0.0/33", []string{`spec.ipv4: Invalid value: "10.0.0.0/33": must be an IPv4 CIDR block such as 10.1.0.0/16`}},
		{"bad octet", "10.0.0.256/24", []string{`spec.ipv4: Invalid value: "10.0.0.256/24": must be an IPv4 CIDR block such as 10.1.0.0/16`}},
		{"words", "banana", []string{`spec.ipv4: Invalid value: "banana": must be an IPv4 CIDR block such as 10.1.0.0/16`}},
		{"IPv6", "fd00::/8", []string{`spec.ipv4: Invalid value: "fd00::/8": must be an IPv4 CIDR block, not IPv6`}},
		{"host bits set", "10.0.0.5/24", []string{`spec.ipv4: Invalid value: "10.0.0.5/24": must have no host bits set (the block is 10.0.0.0/24)`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := errorStrings(ValidateCIDR(tc.cidr, field.NewPath("spec", "ipv4")))
			if diff := cmp.Diff(got, tc.want); diff != "" {
				t.Errorf("ValidateCIDR(%q) mismatch (-got +want):\n%s", tc.cidr, diff)
			}
		})
	}
}

func TestValidateSubnet(t *testing.T) {
	tests := []struct {
		name   string
		subnet *network.Subnet
		want   []string
	}{
		{"valid", subnet("ns", "s1", "10.0.0.0/24", 7), nil},
		{
			name:   "every problem at once",
			subnet: subnet("", "Bad_Name", "8.8.8.0/24", 0),
			want: []string{
				`metadata.name: Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`,
				"metadata.namespace: Required value",
				"spec.vni: Invalid value: 0: must be in [1,2097151]",
				`spec.ipv4: Invalid value: "8.8.8.0/24": must lie inside one RFC 1918 range (10.0.0.0/8, 172.16.0.0/12 or 192.168.0.0/16)`,
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := errorStrings(ValidateSubnet(tc.subnet))
			if diff := cmp.Diff(got, tc.want); diff != "" {
				t.Errorf("ValidateSubnet mismatch (-got +want):\n%s", diff)
			}
		})
	}
}

func TestValidateSubnetUpdate(t *testing.T) {
	old := subnet("ns", "s1", "10.0.0.0/24", 7)
	old.ResourceVersion = "5"
	tests := []struct {
		name   string
		mutate func(*network.Subnet)
		want   []string
	}{
		{"labels may change", func(s *network.Subnet) { s.Labels = map[string]string{"a": "b"} }, nil},
		{"cidr is immutable", func(s *network.Subnet) { s.Spec.IPv4 = "10.0.1.0/24" }, []string{`spec.ipv4: Invalid value: "10.0.1.0/24": field is immutable`}},
		{"vni is immutable", func(s *network.Subnet) { s.Spec.VNI = 8 }, []string{"spec.vni: Invalid value: 8: field is immutable"}},
		{"both at once", func(s *network.Subnet) { s.Spec = network.SubnetSpec{IPv4: "10.9.0.0/16", VNI: 9} }, []string{
			`spec.ipv4: Invalid value: "10.9.0.0/16": field is immutable`,
			"spec.vni: Invalid value: 9: field is immutable",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			updated := old.DeepCopy()
			tc.mutate(updated)
			got := errorStrings(ValidateSubnetUpdate(updated, old))
			if diff := cmp.Diff(got, tc.want); diff != "" {
				t.Errorf("ValidateSubnetUpdate mismatch (-got +want):\n%s", diff)
			}
		})
	}
}

func TestValidateSubnetStatusUpdate(t *testing.T) {
	tests := []struct {
		name     string
		old, new bool
		want     []string
	}{
		{"false to true", false, true, nil},
		{"true stays true", true, true, nil},
		{"false stays false", false, false, nil},
		{"true to false", true, false, []string{"status.validated: Invalid value: false: may not change from true to false"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			old := subnet("ns", "s1", "10.0.0.0/24", 7)
			old.ResourceVersion = "5"
			old.Status.Validated = tc.old
			updated := old.DeepCopy()
			updated.Status.Validated = tc.new
			got := errorStrings(ValidateSubnetStatusUpdate(updated, old))
			if diff := cmp.Diff(got, tc.want); diff != "" {
				t.Errorf("ValidateSubnetStatusUpdate mismatch (-got +want):\n%s", diff)
			}
		})
	}
}

func TestValidateSubnetConflicts(t *testing.T) {
	tests := []struct {
		name   string
		subnet *network.Subnet
		rivals []*network.Subnet
		want   []string
	}{
		{"no rivals", subnet("ns", "s1", "10.0.0.0/24", 7), nil, nil},
		{
			name:   "disjoint blocks on one VNI",
			subnet: subnet("ns", "s1", "10.0.0.0/24", 7),
			rivals: []*network.Subnet{subnet("ns", "s2", "10.0.1.0/24", 7)},
		},
		{
			name:   "overlap on another VNI",
			subnet: subnet("ns", "s1", "10.0.0.0/24", 7),
			rivals: []*network.Subnet{subnet("other", "s2", "10.0.0.0/16", 8)},
		},
		{
			name:   "itself",
			subnet: subnet("ns", "s1", "10.0.0.0/24", 7),
			rivals: []*network.Subnet{subnet("ns", "s1", "10.0.0.0/24", 7)},
		},
		{
			name:   "overlapping block",
			subnet: subnet("ns", "s1", "10.0.0.0/24", 7),
			rivals: []*network.Subnet{subnet("ns", "big", "10.0.0.0/16", 7)},
			want:   []string{`spec.ipv4: Invalid value: "10.0.0.0/24": CIDR overlaps with ns/big's (10.0.0.0/16)`},
		},
		{
			name:   "other namespace",
			subnet: subnet("ns", "s1", "10.0.0.0/24", 7),
			rivals: []*network.Subnet{subnet("other", "s2", "10.0.1.0/24", 7)},
			want:   []string{"spec.vni: Invalid value: 7: same VNI but different namespace wrt other/s2"},
		},
		{
			name:   "every conflict at once",
			subnet: subnet("ns", "s1", "10.0.0.0/24", 7),
			rivals: []*network.Subnet{
				subnet("ns", "a", "10.0.0.128/25", 7),
				subnet("other", "b", "10.0.0.0/24", 7),
				subnet("ns", "c", "10.0.0.0/8", 7),
				subnet("ns", "malformed", "10.0.0", 7),
			},
			want: []string{
				`spec.ipv4: Invalid value: "10.0.0.0/24": CIDR overlaps with ns/a's (10.0.0.128/25)`,
				"spec.vni: Invalid value: 7: same VNI but different namespace wrt other/b",
				`spec.ipv4: Invalid value: "10.0.0.0/24": CIDR overlaps with ns/c's (10.0.0.0/8)`,
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := errorStrings(ValidateSubnetConflicts(tc.subnet, tc.rivals))
			if diff := cmp.Diff(got, tc.want); diff != "" {
				t.Errorf("ValidateSubnetConflicts mismatch (-got +want):\n%s", diff)
			}
		})
	}
}

func attachment(node, subnet string) *network.NetworkAttachment {
	return &network.NetworkAttachment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a1", ResourceVersion: "3"},
		Spec:       network.NetworkAttachmentSpec{Node: node, Subnet: subnet},
	}
}

func withSpecIPv4(att *network.NetworkAttachment, ipv4 string) *network.NetworkAttachment {
	att.Spec.IPv4 = ipv4
	return att
}

func TestValidateNetworkAttachment(t *testing.T) {
	tests := []struct {
		name string
		att  *network.NetworkAttachment
		want []string
	}{
		{"valid", attachment("node-1", "s1"), nil},
		{"missing node and subnet", attachment("", ""), []string{
			"spec.node: Required value: the name of a node",
			"spec.subnet: Required value: the name of a Subnet",
		}},
		{"bad subnet name", attachment("node-1", "S1"), []string{
			`spec.subnet: Invalid value: "S1": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`,
		}},
		{"asks for an address", withSpecIPv4(attachment("node-1", "s1"), "10.0.0.7"), nil},
		{"asks for an address with a prefix length", withSpecIPv4(attachment("node-1", "s1"), "10.0.0.7/24"), []string{
			`spec.ipv4: Invalid value: "10.0.0.7/24": must be an IPv4 address such as 10.1.0.7`,
		}},
		{"asks for an IPv6 address", withSpecIPv4(attachment("node-1", "s1"), "fd00::7"), []string{
			`spec.ipv4: Invalid value: "fd00::7": must be an IPv4 address such as 10.1.0.7`,
		}},
		{"asks for an IPv4-mapped IPv6 address", withSpecIPv4(attachment("node-1", "s1"), "::ffff:10.0.0.7"), []string{
			`spec.ipv4: Invalid value: "::ffff:10.0.0.7": must be an IPv4 address such as 10.1.0.7`,
		}},
		{"asks for an address with leading zeros", withSpecIPv4(attachment("node-1", "s1"), "10.0.0.07"), []string{
			`spec.ipv4: Invalid value: "10.0.0.07": must be an IPv4 address such as 10.1.0.7`,
		}},
		{"asks for a name", withSpecIPv4(attachment("node-1", "s1"), "db-0"), []string{
			`spec.ipv4: Invalid value: "db-0": must be an IPv4 address such as 10.1.0.7`,
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := errorStrings(ValidateNetworkAttachment(tc.att))
			if diff := cmp.Diff(got, tc.want); diff != "" {
				t.Errorf("ValidateNetworkAttachment mismatch (-got +want):\n%s", diff)
			}
		})
	}
}

func TestValidateNetworkAttachmentUpdate(t *testing.T) {
	old := attachment("node-1", "s1")
	tests := []struct {
		name   string
		mutate func(*network.NetworkAttachment)
		want   []string
	}{
		{"exec commands may change", func(a *network.NetworkAttachment) { a.Spec.PostCreateExec = []string{"/bin/true"} }, nil},
		{"exec commands stay bounded", func(a *network.NetworkAttachment) { a.Spec.PostDeleteExec = []string{"true"} }, []string{
			`spec.postDeleteExec[0]: Invalid value: "true": must be the absolute, clean path of a program, such as /usr/sbin/ip`,
		}},
		{"node is immutable", func(a *network.NetworkAttachment) { a.Spec.Node = "node-2" }, []string{`spec.node: Invalid value: "node-2": field is immutable`}},
		{"subnet is immutable", func(a *network.NetworkAttachment) { a.Spec.Subnet = "s2" }, []string{`spec.subnet: Invalid value: "s2": field is immutable`}},
		{"ipv4 may not be set", func(a *network.NetworkAttachment) { a.Spec.IPv4 = "10.0.0.7" }, []string{`spec.ipv4: Invalid value: "10.0.0.7": field is immutable`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			updated := old.DeepCopy()
			tc.mutate(updated)
			got := errorStrings(ValidateNetworkAttachmentUpdate(updated, old))
			if diff := cmp.Diff(got, tc.want); diff != "" {
				t.Errorf("ValidateNetworkAttachmentUpdate mismatch (-got +want):\n%s", diff)
			}
		})
	}
}

func TestValidateNetworkAttachmentStatusUpdate(t *testing.T) {
	old := attachment("node-1", "s1")
	tests := []struct {
		name   string
		status network.NetworkAttachmentStatus
		want   []string
	}{
		{"empty", network.NetworkAttachmentStatus{}, nil},
		{"complete", network.NetworkAttachmentStatus{IPv4: "10.0.0.5", AddressVNI: 1, MACAddress: "06:00:00:05:00:01", HostIP: "192.0.2.1", IfcName: "kos060000050001", MTU: 1450}, nil},
		{"the smallest MTU", network.NetworkAttachmentStatus{MTU: 68}, nil},
		{"the largest MTU", network.NetworkAttachmentStatus{MTU: 65535}, nil},
		{"malformed addresses", network.NetworkAttachmentStatus{IPv4: "fd00::1", MACAddress: "06:00", HostIP: "node-1"}, []string{
			`status.ipv4: Invalid value: "fd00::1": must be an IPv4 address`,
			`status.hostIP: Invalid value: "node-1": must be an IP address`,
			`status.macAddress: Invalid value: "06:00": must be a MAC address`,
		}},
		{"MTU too small", network.NetworkAttachmentStatus{MTU: 67}, []string{`status.mtu: Invalid value: 67: must be between 68 and 65535`}},
		{"MTU too large", network.NetworkAttachmentStatus{MTU: 65536}, []string{`status.mtu: Invalid value: 65536: must be between 68 and 65535`}},
		{"negative MTU", network.NetworkAttachmentStatus{MTU: -1}, []string{`status.mtu: Invalid value: -1: must be between 68 and 65535`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			updated := old.DeepCopy()
			updated.Status = tc.status
			got := errorStrings(ValidateNetworkAttachmentStatusUpdate(updated, old))
			if diff := cmp.Diff(got, tc.want); diff != "" {
				t.Errorf("ValidateNetworkAttachmentStatusUpdate mismatch (-got +want):\n%s", diff)
			}
		})
	}
}

// TestValidateNetworkAttachmentStatusUpdateAddress checks that the address of
// a live attachment never changes: set, kept or cleared, never replaced, and
// the one spec.ipv4 asks for.
func TestValidateNetworkAttachmentStatusUpdateAddress(t *testing.T) {
	addressed := func(ipv4 string, vni uint32) network.NetworkAttachmentStatus {
		return network.NetworkAttachmentStatus{IPv4: ipv4, AddressVNI: vni, LockUID: "u1"}
	}
	noAddress := network.NetworkAttachmentStatus{Errors: network.NetworkAttachmentErrors{IPAM: []string{"Referenced subnet does not exist"}}}
	tests := []struct {
		name        string
		specIPv4    string
		old, status network.NetworkAttachmentStatus
		want        []string
	}{
		{"set", "", network.NetworkAttachmentStatus{}, addressed("10.0.0.5", 1), nil},
		{"set after a problem", "", noAddress, addressed("10.0.0.5", 1), nil},
		{"kept, with a new lock and other fields", "", addressed("10.0.0.5", 1),
			network.NetworkAttachmentStatus{IPv4: "10.0.0.5", AddressVNI: 1, LockUID: "u2", HostIP: "192.0.2.1"}, nil},
		{"cleared", "", addressed("10.0.0.5", 1), noAddress, nil},
		{"changed", "", addressed("10.0.0.5", 1), addressed("10.0.0.6", 1), []string{
			`status.ipv4: Invalid value: "10.0.0.6": may not change from 10.0.0.5 to another address; clear it first`,
		}},
		{"moved to another VNI", "", addressed("10.0.0.5", 1), addressed("10.0.0.5", 2), []string{
			`status.addressVNI: Invalid value: 2: may not change from 1 while status.ipv4 is set; clear the address first`,
		}},
		{"the address asked for", "10.0.0.7", network.NetworkAttachmentStatus{}, addressed("10.0.0.7", 1), nil},
		{"another than the address asked for", "10.0.0.7", network.NetworkAttachmentStatus{}, addressed("10.0.0.5", 1), []string{
			`status.ipv4: Invalid value: "10.0.0.5": must be spec.ipv4 (10.0.0.7), the address asked for`,
		}},
		{"no address while asking for one", "10.0.0.7", addressed("10.0.0.7", 1), noAddress, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			old := withSpecIPv4(attachment("node-1", "s1"), tc.specIPv4)
			old.Status = tc.old
			updated := old.DeepCopy()
			updated.Status = tc.status
			got := errorStrings(ValidateNetworkAttachmentStatusUpdate(updated, old))
			if diff := cmp.Diff(got, tc.want); diff != "" {
				t.Errorf("ValidateNetworkAttachmentStatusUpdate mismatch (-got +want):\n%s", diff)
			}
		})
	}
}

func TestValidateIPLock(t *testing.T) {
	lock := func(subnet string) *network.IPLock {
		return &network.IPLock{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "v1-1-10-0-0-5", ResourceVersion: "4"},
			Spec:       network.IPLockSpec{SubnetName: subnet},
		}
	}
	if got := errorStrings(ValidateIPLock(lock("s1"))); got != nil {
		t.Errorf("ValidateIPLock(valid) = %q, want no errors", got)
	}
	got := errorStrings(ValidateIPLock(lock("")))
	if diff := cmp.Diff(got, []string{"spec.subnetName: Required value: the name of a Subnet"}); diff != "" {
		t.Errorf("ValidateIPLock(no subnet) mismatch (-got +want):\n%s", diff)
	}
	got = errorStrings(ValidateIPLockUpdate(lock("s2"), lock("s1")))
	if diff := cmp.Diff(got, []string{`spec.subnetName: Invalid value: "s2": field is immutable`}); diff != "" {
		t.Errorf("ValidateIPLockUpdate mismatch (-got +want):\n%s", diff)
	}
}

func TestValidateExec(t *testing.T) {
	long := strings.Repeat("x", MaxExecArgLength+1)
	tests := []struct {
		name    string
		command []string
		want    []string
	}{
		{"none", nil, nil},
		{"program and arguments", []string{"/usr/sbin/ip", "link", "set", "${ifname}", "up"}, nil},
		{"as many elements as allowed", append([]string{"/bin/echo"}, make([]string, MaxExecArgs-1)...), nil},
		{"relative program", []string{"ip", "link"}, []string{`spec.postCreateExec[0]: Invalid value: "ip": must be the absolute, clean path of a program, such as /usr/sbin/ip`}},
		{"unclean program", []string{"/usr/sbin/../sbin/ip"}, []string{`spec.postCreateExec[0]: Invalid value: "/usr/sbin/../sbin/ip": must be the absolute, clean path of a program, such as /usr/sbin/ip`}},
		{"a variable as program", []string{"${ifname}"}, []string{`spec.postCreateExec[0]: Invalid value: "${ifname}": must be the absolute, clean path of a program, such as /usr/sbin/ip`}},
		{"too many elements", append([]string{"/bin/echo"}, make([]string, MaxExecArgs)...), []string{`spec.postCreateExec: Too many: 33: must have at most 32 items`}},
		{"too long", []string{"/bin/echo", long}, []string{`spec.postCreateExec[1]: Too long: may not be more than 1024 bytes`}},
		{"NUL", []string{"/bin/echo", "a\x00b"}, []string{`spec.postCreateExec[1]: Invalid value: "a\x00b": must not contain a NUL byte`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := errorStrings(ValidateExec(tc.command, field.NewPath("spec", "postCreateExec")))
			if diff := cmp.Diff(got, tc.want); diff != "" {
				t.Errorf("ValidateExec mismatch (-got +want):\n%s", diff)
			}
		})
	}
}
