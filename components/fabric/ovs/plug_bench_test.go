package ovs

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kos-sdn/kos/components/fabric"
	"github.com/kos-sdn/kos/tools/ovsenv"
)

// BenchmarkPlugLocal measures PlugLocal of pods' veths on one real Open
// vSwitch (userspace datapath), each plug one veth, the way a node's CNI
// ADDs call it: one at a time, and ten callers at once (which share
// transactions and bundles). Each runs with the ports added over the kept
// OVSDB connection and, for comparison, with ovs-vsctl (the database
// socket made unreachable, so the fabric falls back to it), in two
// alternating rounds so that the machine's load falls on both alike. It
// reports the p50 and p99 of the plugs (p50-ms, p99-ms) and logs the load
// average.
//
//	go test -run '^$' -bench PlugLocal -benchtime 100x ./components/fabric/ovs
func BenchmarkPlugLocal(b *testing.B) {
	inst := ovsenv.StartT(b, ovsenv.Options{})
	f := New(Config{RunDir: inst.RunDir, DatapathType: "netdev"})
	ctx := b.Context()
	if _, err := f.Ensure(ctx); err != nil {
		b.Fatal(err)
	}
	socket := f.ovs.db.socket
	var next int
	for round := 1; round <= 2; round++ {
		for _, callers := range []int{1, 10} {
			for _, path := range []string{"ovs-vsctl", "ovsdb"} {
				b.Run(fmt.Sprintf("%s/callers=%d/round=%d", path, callers, round), func(b *testing.B) {
					f.ovs.db.close()
					f.ovs.db.socket = socket
					if path == "ovs-vsctl" {
						f.ovs.db.socket = filepath.Join(b.TempDir(), "none.sock")
					}
					plugs := make([]fabric.Plug, b.N)
					for i := range plugs {
						next++
						att := fabric.LocalAttachment{VNI: 7, IP: netip.AddrFrom4([4]byte{10, 7, byte(next >> 8), byte(next)})}
						newGuest(b, ctx, inst, att)
						plugs[i] = fabric.Plug{LocalAttachment: att, Owner: fmt.Sprintf("c%d/net1", next)}
					}
					took := make([]time.Duration, b.N)
					b.ResetTimer()
					var wg sync.WaitGroup
					for c := range callers {
						wg.Go(func() {
							for i := c; i < b.N; i += callers {
								began := time.Now()
								if err := f.PlugLocal(ctx, plugs[i]); err != nil {
									b.Errorf("PlugLocal of %v: %v", plugs[i], err)
								}
								took[i] = time.Since(began)
							}
						})
					}
					wg.Wait()
					b.StopTimer()
					slices.Sort(took)
					b.ReportMetric(msec(took[len(took)/2]), "p50-ms")
					b.ReportMetric(msec(took[(len(took)*99)/100]), "p99-ms")
					b.Logf("%d plugs, %d callers: p50 %s, p99 %s; load average %s", b.N, callers,
						took[len(took)/2].Round(time.Millisecond), took[(len(took)*99)/100].Round(time.Millisecond), loadAverage())
				})
			}
		}
	}
}

func msec(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// loadAverage returns the machine's load averages over 1, 5 and 15
// minutes, as uptime prints them.
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(data))[:3], " ")
}
