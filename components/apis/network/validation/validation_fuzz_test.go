package validation

import (
	"net/netip"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kos-sdn/kos/components/apis/network"
)

// FuzzValidateCIDR checks ValidateCIDR against its definition: it accepts
// exactly the IPv4 blocks without host bits that lie inside one RFC 1918
// range, and never panics.
func FuzzValidateCIDR(f *testing.F) {
	for _, s := range []string{"10.0.0.0/8", "10.1.0.0/16", "172.16.0.0/11", "192.168.1.1/24", "::/0", "10.0.0.0/33", "", "10.0.0.0/08", "010.0.0.0/8"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, cidr string) {
		errs := ValidateCIDR(cidr, field.NewPath("spec", "ipv4"))
		p, err := netip.ParsePrefix(cidr)
		want := err == nil && p.Addr().Is4() && p.Masked() == p && inOneRange(p)
		if (len(errs) == 0) != want {
			t.Fatalf("ValidateCIDR(%q) = %v, want valid=%t", cidr, errs.ToAggregate(), want)
		}
	})
}

func inOneRange(p netip.Prefix) bool {
	for _, r := range privateRanges {
		if r.Bits() <= p.Bits() && r.Contains(p.Addr()) {
			return true
		}
	}
	return false
}

// FuzzSubnetConflict checks that the conflict rule is symmetric: a conflicts
// with b exactly when b conflicts with a, whenever both blocks parse.
func FuzzSubnetConflict(f *testing.F) {
	f.Add("ns", "a", uint32(1), "10.0.0.0/24", "ns", "b", uint32(1), "10.0.0.128/25")
	f.Add("ns", "a", uint32(1), "10.0.0.0/24", "other", "b", uint32(1), "10.1.0.0/24")
	f.Add("ns", "a", uint32(2), "10.0.0.0/24", "ns", "a", uint32(2), "10.0.0.0/24")
	f.Fuzz(func(t *testing.T, ns1, n1 string, vni1 uint32, c1, ns2, n2 string, vni2 uint32, c2 string) {
		a := SubnetPlacement{Namespace: ns1, Name: n1, VNI: vni1, IPv4: c1}
		b := SubnetPlacement{Namespace: ns2, Name: n2, VNI: vni2, IPv4: c2}
		ab, ba := SubnetConflict(a, b), SubnetConflict(b, a)
		_, e1 := netip.ParsePrefix(c1)
		_, e2 := netip.ParsePrefix(c2)
		if e1 == nil && e2 == nil && (ab == nil) != (ba == nil) {
			t.Fatalf("conflict is not symmetric: %+v vs %+v: %v / %v", a, b, ab, ba)
		}
	})
}

// FuzzValidateExec checks the bounds of postCreateExec: never a panic, and
// a command passes exactly when it is empty or has at most MaxExecArgs
// elements, none longer than MaxExecArgLength or holding a NUL, the first an
// absolute clean path. The command is given as NUL-free fields separated by
// the byte 0x1f.
func FuzzValidateExec(f *testing.F) {
	f.Add("/usr/sbin/ip\x1flink\x1fset\x1f${ifname}\x1fup")
	f.Add("ip\x1faddr")
	f.Add("/usr/sbin/../sbin/ip")
	f.Add("/bin/true\x1fa\x00b")
	f.Add(strings.Repeat("/x\x1f", MaxExecArgs+1))
	f.Fuzz(func(t *testing.T, joined string) {
		var command []string
		if joined != "" {
			command = strings.Split(joined, "\x1f")
		}
		errs := ValidateExec(command, field.NewPath("spec", "postCreateExec"))
		want := len(command) == 0
		if !want && len(command) <= MaxExecArgs {
			want = true
			for i, a := range command {
				if len(a) > MaxExecArgLength || strings.ContainsRune(a, 0) || i == 0 && (!strings.HasPrefix(a, "/") || cleanPath(a) != a) {
					want = false
				}
			}
		}
		if (len(errs) == 0) != want {
			t.Fatalf("ValidateExec(%q) = %v, want valid=%t", command, errs.ToAggregate(), want)
		}
		att := &network.NetworkAttachment{Spec: network.NetworkAttachmentSpec{PostCreateExec: command, PostDeleteExec: command}}
		ValidateNetworkAttachment(att)
		ValidateNetworkAttachmentUpdate(att, att.DeepCopy())
	})
}

// cleanPath is path.Clean written out for absolute paths, so the test does
// not check the code with itself.
func cleanPath(p string) string {
	var out []string
	for _, s := range strings.Split(p, "/") {
		switch s {
		case "", ".":
		case "..":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
		default:
			out = append(out, s)
		}
	}
	return "/" + strings.Join(out, "/")
}
