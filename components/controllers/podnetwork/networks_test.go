package podnetwork

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseNetworks(t *testing.T) {
	tests := []struct {
		name  string
		value string
		want  []Network
		// wantErrs are substrings of the error, in order; none means no
		// error.
		wantErrs []string
	}{
		{"empty", "", nil, nil},
		{"blank", "  ", nil, nil},
		{"one", "blue", []Network{{Namespace: "pods", Name: "blue", Interface: "net1"}}, nil},
		{"several, by position", "blue, other/red@eth9,green", []Network{
			{Namespace: "pods", Name: "blue", Interface: "net1"},
			{Namespace: "other", Name: "red", Interface: "eth9"},
			{Namespace: "pods", Name: "green", Interface: "net3"},
		}, nil},
		{"same definition twice", "blue,blue", []Network{
			{Namespace: "pods", Name: "blue", Interface: "net1"},
			{Namespace: "pods", Name: "blue", Interface: "net2"},
		}, nil},
		{"JSON", `[{"name":"blue","interface":"data0","ips":["10.1.0.5/24"],"mac":"c2:b0:57:49:47:f1"},{"name":"red","namespace":"other"}]`, []Network{
			{Namespace: "pods", Name: "blue", Interface: "data0", IPs: []string{"10.1.0.5/24"}, MAC: "c2:b0:57:49:47:f1"},
			{Namespace: "other", Name: "red", Interface: "net2"},
		}, nil},
		{"empty JSON list", "[]", nil, nil},
		{"JSON object", `{"name":"blue"}`, nil, []string{"must be a list"}},
		{"broken JSON", `[{"name":"blue"`, nil, []string{"parsing the JSON list"}},
		{"JSON of the wrong type", `[{"name":7}]`, nil, []string{"parsing the JSON list"}},
		{"JSON without a name", `[{"interface":"x"}]`, nil, []string{"network 1", "no NetworkAttachmentDefinition name"}},
		{"empty entries", "blue,,red,", nil, []string{`network 2 (""): empty entry`, `network 4 (""): empty entry`}},
		{"empty namespace", "/blue", nil, []string{"empty namespace"}},
		{"empty interface", "blue@", nil, []string{"empty interface name"}},
		{"upper case name", "Blue", nil, []string{`network 1 (pods/Blue@net1): NetworkAttachmentDefinition name "Blue"`}},
		{"two slashes", "a/b/c", nil, []string{`NetworkAttachmentDefinition name "b/c"`}},
		{"bad namespace", "a.b/blue", nil, []string{`namespace "a.b"`}},
		{"long interface", "blue@abcdefghijklmnop", nil, []string{"longer than 15 bytes"}},
		{"interface with a colon", "blue@eth0:1", nil, []string{"holds '/', ':'"}},
		{"interface dot", "blue@.", nil, []string{`interface name "." is not allowed`}},
		{"duplicate interface", "blue@net2,red", nil, []string{"network 2 (pods/red@net2): interface net2 is already network 1's"}},
		{"every problem at once", "Blue,red@,green@a/b", nil, []string{"network 1", "network 2", "network 3"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseNetworks(tc.value, "pods")
			if diff := cmp.Diff(got, tc.want); diff != "" {
				t.Errorf("networks (-got +want):\n%s", diff)
			}
			checkErr(t, err, tc.wantErrs)
		})
	}
}

// checkErr fails unless err holds each of wantErrs in order, or is nil when
// there are none.
func checkErr(t *testing.T, err error, wantErrs []string) {
	t.Helper()
	if len(wantErrs) == 0 {
		if err != nil {
			t.Errorf("error %v, want none", err)
		}
		return
	}
	if err == nil {
		t.Fatalf("no error, want one holding %q", wantErrs)
	}
	rest := err.Error()
	for _, w := range wantErrs {
		i := strings.Index(rest, w)
		if i < 0 {
			t.Fatalf("error %q lacks %q (in order)", err, w)
		}
		rest = rest[i+len(w):]
	}
}

func TestRequestedIPv4(t *testing.T) {
	tests := []struct {
		name     string
		ips      []string
		want     netip.Addr
		wantErrs []string
	}{
		{"none", nil, netip.Addr{}, nil},
		{"address", []string{"10.1.0.5"}, netip.MustParseAddr("10.1.0.5"), nil},
		{"CIDR", []string{"10.1.0.5/24"}, netip.MustParseAddr("10.1.0.5"), nil},
		{"two", []string{"10.1.0.5", "10.1.0.6"}, netip.Addr{}, []string{"asks for 2 addresses"}},
		{"IPv6", []string{"fd00::5/64"}, netip.Addr{}, []string{"not IPv4"}},
		{"garbage", []string{"ten"}, netip.Addr{}, []string{`"ten" is neither an address`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := RequestedIPv4(tc.ips)
			if got != tc.want {
				t.Errorf("address %v, want %v", got, tc.want)
			}
			checkErr(t, err, tc.wantErrs)
		})
	}
}
