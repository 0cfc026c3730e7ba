package v1alpha1

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// TestAttachmentName pins the names: the node agents derive them too, so a
// change would strand every attachment made before it.
func TestAttachmentName(t *testing.T) {
	a := func(n int) string { return strings.Repeat("a", n) }
	tests := []struct {
		pod, ifname string
		want        string
	}{
		{"web-0", "net1", "web-0-net1"},
		{"web-0", "eth1", "web-0-eth1"},
		{"web.v1", "net1", "web-v1-net1-fjexq35y"},
		{"web-0", "Data_1", "web-0-data-1-legplqno"},
		{"x", "-", "x-fmk2hwkr"},
		// 58 + 1 + 4 = 63 is still plain; one more is cut to 54 and hashed.
		{a(58), "net1", a(58) + "-net1"},
		{a(59), "net1", a(54) + "-n5smwd43"},
		{a(60), "net1", a(54) + "-yg5edyy5"},
		// A cut that ends on a dash drops it.
		{a(53) + "-" + strings.Repeat("b", 10), "net1", a(53) + "-n2ju45zb"},
	}
	for _, tc := range tests {
		t.Run(tc.pod+"@"+tc.ifname, func(t *testing.T) {
			got := AttachmentName(tc.pod, tc.ifname)
			if got != tc.want {
				t.Errorf("AttachmentName(%q, %q) = %q, want %q", tc.pod, tc.ifname, got, tc.want)
			}
			if msgs := validation.IsDNS1123Label(got); len(msgs) > 0 {
				t.Errorf("%q is not a DNS label: %s", got, msgs)
			}
		})
	}
	// Names that only the hash tells apart.
	if x, y := AttachmentName(a(60)+"x", "net1"), AttachmentName(a(60)+"y", "net1"); x == y {
		t.Errorf("two long pod names both get %s", x)
	}
	if x, y := AttachmentName("web-0", "NET1"), AttachmentName("web-0", "net1"); x == y {
		t.Errorf("interfaces NET1 and net1 both get %s", x)
	}
}
