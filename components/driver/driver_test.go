package driver

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/kos-sdn/kos/components/agent/exechook"
	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
)

func TestParseSizes(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		spec     string
		min, max int
	}{
		{"5", 5, 5},
		{"uniform:2-4", 2, 4},
		{"geometric:3", 1, 1 << 30},
		{"zipf:1.5,50", 1, 50},
	} {
		d, err := ParseSizes(tc.spec)
		if err != nil {
			t.Fatalf("ParseSizes(%q): %v", tc.spec, err)
		}
		sum := 0
		for range 1000 {
			n := d.Sample(r)
			if n < tc.min || n > tc.max {
				t.Fatalf("%s: sample %d outside [%d,%d]", tc.spec, n, tc.min, tc.max)
			}
			sum += n
		}
		if tc.spec == "geometric:3" && (sum < 2500 || sum > 3500) {
			t.Errorf("geometric:3: mean %g, want about 3", float64(sum)/1000)
		}
	}
	for _, bad := range []string{"0", "x", "uniform:4-2", "uniform:3", "geometric:0.5", "zipf:1,10", "normal:3"} {
		if _, err := ParseSizes(bad); err == nil {
			t.Errorf("ParseSizes(%q) succeeded, want an error", bad)
		}
	}
}

func TestPrefixAndCIDRs(t *testing.T) {
	for size, want := range map[int]int{1: 29, 2: 29, 6: 28, 30: 26, 1000: 21} {
		if got := prefixFor(size); got != want {
			t.Errorf("prefixFor(%d) = %d, want %d", size, got, want)
		}
	}
	var c cidrAllocator
	var got []string
	for _, p := range []int{29, 24, 29, 8} {
		got = append(got, c.next(p).String())
	}
	if want := "10.0.0.0/29 10.0.1.0/24 10.0.2.0/29 10.0.0.0/8"; strings.Join(got, " ") != want {
		t.Errorf("CIDRs %v, want %s", got, want)
	}
}

func TestQuantile(t *testing.T) {
	v := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for q, want := range map[float64]float64{0.5: 5, 0.9: 9, 0.99: 10, 0: 1} {
		if got := quantile(v, q); got != want {
			t.Errorf("quantile(%g) = %g, want %g", q, got, want)
		}
	}
}

// TestExecAllowList checks that the agent accepts the allow-list and that
// its rules allow the driver's commands, as the agent expands them, and
// nothing with another shape.
func TestExecAllowList(t *testing.T) {
	data, err := yaml.Marshal(map[string]any{"rules": ExecAllowList("/bin/sh")})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "allow.yaml")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	rules, err := exechook.LoadAllowFile(path)
	if err != nil {
		t.Fatalf("the agent refuses the allow-list: %v", err)
	}
	expand := strings.NewReplacer("${ifname}", "kos06dd000100dd", "${ipv4}", "10.0.0.5").Replace
	allowed := func(cmd []string) bool {
		for _, r := range rules {
			if r.Path != cmd[0] || len(r.Args) != len(cmd)-1 {
				continue
			}
			ok := true
			for i, a := range r.Args {
				if !regexp.MustCompile(`^(?:` + a + `)$`).MatchString(expand(cmd[i+1])) {
					ok = false
				}
			}
			if ok {
				return true
			}
		}
		return false
	}
	for _, cmd := range [][]string{
		postCreateExec("/bin/sh", 24, nil),
		postCreateExec("/bin/sh", 8, []string{"10.0.0.2"}),
		postCreateExec("/bin/sh", 29, []string{"10.0.0.2", "10.0.0.3", "10.0.0.4"}),
		postDeleteExec("/bin/sh"),
	} {
		if !allowed(cmd) {
			t.Errorf("the allow-list refuses %q", cmd)
		}
	}
	for _, cmd := range [][]string{
		{"/bin/sh", "-c", "rm -rf /"},
		postCreateExec("/bin/bash", 24, nil),
		postCreateExec("/bin/sh", 24, []string{"10.0.0.2; rm -rf /"}),
		{"/bin/sh", "-c", strings.Replace(cleanupScript, "${ifname}", "kos06dd000100dd x", 1)},
	} {
		if allowed(cmd) {
			t.Errorf("the allow-list allows %q", cmd)
		}
	}
}

// TestUniqueness feeds the driver's informer handlers attachments as the
// server would show them: an address held by two live attachments of one VNI
// is an error for both, and an address freed by a deletion or a move may be
// taken again.
func TestUniqueness(t *testing.T) {
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	d := &Driver{metrics: m, records: map[string]*record{}, holders: map[string]string{}, errCount: map[string]int{}}
	n := &network{vni: 7}
	for _, name := range []string{"a", "b", "c", "d"} {
		d.records[name] = &record{name: name, network: n, addressed: -1, ready: -1, tested: -1, errKinds: map[string]bool{}}
	}
	att := func(name, ip string, vni uint32) *v1alpha1.NetworkAttachment {
		return &v1alpha1.NetworkAttachment{
			ObjectMeta:       metav1.ObjectMeta{Name: name},
			ExtendedMetadata: v1alpha1.ExtendedObjectMeta{Writes: v1alpha1.WriteSet{{Section: v1alpha1.SectionSpec, ServerTime: metav1.NowMicro()}}},
			Status:           v1alpha1.NetworkAttachmentStatus{IPv4: ip, AddressVNI: vni},
		}
	}
	d.observe(att("a", "10.0.0.2", 7))
	d.observe(att("a", "10.0.0.2", 7)) // an update that changes nothing
	d.observe(att("b", "10.0.0.2", 8)) // another VNI
	d.forget(att("a", "10.0.0.2", 7))
	d.observe(att("c", "10.0.0.2", 7)) // a's address, freed
	d.observe(att("c", "10.0.0.3", 7)) // moves
	d.observe(att("b", "10.0.0.2", 7)) // c's old address
	if d.errCount[ErrDuplicate] != 0 {
		t.Fatalf("duplicates reported: %v", d.errCount)
	}
	d.observe(att("d", "10.0.0.3", 7)) // c's address: a duplicate
	if d.errCount[ErrDuplicate] != 2 || !d.records["c"].hasErr(ErrDuplicate) || !d.records["d"].hasErr(ErrDuplicate) {
		t.Errorf("duplicate of c and d: errors %v", d.errCount)
	}
}
