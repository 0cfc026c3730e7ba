package ovs

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	goovs "github.com/digitalocean/go-openvswitch/ovs"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/kos-sdn/kos/components/apis/network"
)

// FuzzParseInterfaces feeds arbitrary output to the parser of
// `ovs-vsctl --format=json list Interface`. It must never panic, and the
// rows it accepts, written back as an OVSDB JSON table, parse to the same
// rows.
func FuzzParseInterfaces(f *testing.F) {
	data, err := os.ReadFile(filepath.Join("testdata", "interfaces.json"))
	if err != nil {
		f.Fatalf("reading seed: %v", err)
	}
	f.Add(data)
	f.Add([]byte(`{"data":[],"headings":["name"]}`))
	f.Add([]byte(`{"data":[["a",["map",[["k","v"],["k","w"]]]]],"headings":["name","external_ids"]}`))
	f.Add([]byte(`{"data":[[1]],"headings":["ofport"]}`))
	f.Add([]byte(`{"data":[[["set",[1]]]],"headings":["ofport"]}`))
	f.Add([]byte(`{"data":[[["map"]]],"headings":["external_ids"]}`))
	f.Fuzz(func(t *testing.T, out []byte) {
		rows, err := parseInterfaces(out)
		if err != nil {
			return
		}
		again, err := parseInterfaces(encodeInterfaces(t, rows))
		if err != nil {
			t.Fatalf("rows written back do not parse: %v", err)
		}
		if diff := cmp.Diff(rows, again, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("rows change when written back (-first +again):\n%s", diff)
		}
	})
}

// encodeInterfaces writes rows as ovs-vsctl's JSON table, absent values
// as the empty set.
func encodeInterfaces(t *testing.T, rows []interfaceRow) []byte {
	t.Helper()
	str := func(s string) any {
		if s == "" {
			return []any{"set", []any{}}
		}
		return s
	}
	table := struct {
		Headings []string `json:"headings"`
		Data     [][]any  `json:"data"`
	}{Headings: []string{"name", "type", "mac", "ofport", "mtu_request", "error", "external_ids"}, Data: [][]any{}}
	for _, r := range rows {
		pairs := [][2]string{}
		for k, v := range r.ExternalIDs {
			pairs = append(pairs, [2]string{k, v})
		}
		slices.SortFunc(pairs, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
		table.Data = append(table.Data, []any{str(r.Name), str(r.Type), str(r.MAC), r.OFPort, r.MTURequest, str(r.Error), []any{"map", pairs}})
	}
	out, err := json.Marshal(table)
	if err != nil {
		t.Fatalf("writing rows: %v", err)
	}
	return out
}

// FuzzDumpedFlow feeds arbitrary lines of `ovs-ofctl dump-flows` output
// through the parser the fabric reads the switch with and then through the
// fabric's own readers of a flow (its cookie, its tunnel destination, its
// canonical text). None may panic (the library's parser does, on unbalanced
// parentheses: parseFlow and dumpFlows recover); a flow whose text can be written reads
// back, from that text, as the same flow.
func FuzzDumpedFlow(f *testing.F) {
	for _, name := range []string{"dump-created.golden", "dump-updated.golden", "flows-local.golden", "flows-remote.golden", "flows-remote-highest-vni.golden"} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatalf("reading seed: %v", err)
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			f.Add(sc.Text())
		}
	}
	f.Add(" cookie=0x6b6000010a000006, duration=0.089s, table=1, n_packets=3, n_bytes=120, priority=100,tun_id=0x1,dl_dst=06:00:00:06:00:01 actions=set_field:192.168.7.2->tun_dst,output:1")
	f.Add("cookie=0x1, table=1, priority=110,arp actions=set_field:->tun_dst,output:1")
	f.Fuzz(func(t *testing.T, line string) {
		fl, err := parseFlow(line)
		if err != nil {
			return
		}
		if kind, vni, ip, ok := parseCookie(fl.Cookie); ok && kind != kindDefault && cookie(kind, vni, ip) != fl.Cookie {
			t.Fatalf("cookie %#x parses to %d/%d/%s, which makes %#x", fl.Cookie, kind, vni, ip, cookie(kind, vni, ip))
		}
		if dst, ok := tunnelDestination(fl); ok && !dst.IsValid() {
			t.Fatalf("tunnel destination of %q is invalid", line)
		}
		text, err := flowText(fl)
		if err != nil {
			return
		}
		b, err := fl.MarshalText()
		if err != nil {
			t.Fatalf("flowText wrote %q but MarshalText fails: %v", text, err)
		}
		back, err := parseFlow(string(b))
		if err != nil {
			return // add-flow syntax the dump parser does not read back; the fabric never does this
		}
		if !sameFlows([]*goovs.Flow{fl}, []*goovs.Flow{back}) {
			t.Fatalf("flow %q written as %q reads back differently", line, b)
		}
	})
}

// FuzzCookie checks that parseCookie inverts cookie for every kind, VNI and
// IPv4 address, and accepts nothing cookie cannot make.
func FuzzCookie(f *testing.F) {
	f.Add(uint64(0x6b4000010a000005), uint8(2), uint32(1), uint32(0x0a000005))
	f.Add(uint64(0x6b20000000000000), uint8(1), uint32(network.MaxVNI), uint32(0xffffffff))
	f.Add(uint64(0), uint8(3), uint32(0), uint32(0))
	f.Fuzz(func(t *testing.T, c uint64, k uint8, vni uint32, ip4 uint32) {
		if kind, v, ip, ok := parseCookie(c); ok {
			if kind == kindDefault && v != 0 {
				t.Fatalf("default cookie %#x carries VNI %d", c, v)
			}
			if got := cookie(kind, v, ip); kind != kindDefault && got != c {
				t.Fatalf("cookie %#x parses to %d/%d/%s, which makes %#x", c, kind, v, ip, got)
			}
		}
		kind := flowKind(k%3 + 1)
		if kind == kindDefault {
			return
		}
		vni &= network.MaxVNI
		ip := netip.AddrFrom4([4]byte{byte(ip4 >> 24), byte(ip4 >> 16), byte(ip4 >> 8), byte(ip4)})
		gk, gv, gip, ok := parseCookie(cookie(kind, vni, ip))
		if !ok || gk != kind || gv != vni || gip != ip {
			t.Fatalf("cookie(%d, %d, %s) parses to %d/%d/%s/%t", kind, vni, ip, gk, gv, gip, ok)
		}
	})
}
