package figures

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestBenchParser(t *testing.T) {
	t.Parallel()
	output := `goos: linux
goarch: amd64
pkg: github.com/kos-sdn/kos/tools/bench
BenchmarkNoOpRequests-2   	       3	   4417337 ns/op	         2.000 requests/op	         0 writes/op	  123 B/op	       4 allocs/op
BenchmarkDriftPass/no_drift
    daemon_test.go:90: a log line
BenchmarkDriftPass/no_drift-2         	      20	  50123456 ns/op	        10.00 requests/op
BenchmarkVersusKubectl
    channels_test.go:300: cold install 0.57 s
        	       3	 2.5e+09 ns/op	        15.70 cold-ratio
PASS
ok  	github.com/kos-sdn/kos/tools/bench	12.3s
`
	var p BenchParser
	var got []Figure
	for line := range strings.SplitSeq(output, "\n") {
		got = append(got, p.Line(line)...)
	}
	f := func(test, unit string, v float64) Figure { return Figure{Test: test, Name: unit, Value: v, Unit: unit} }
	want := []Figure{
		f("BenchmarkNoOpRequests", "ns/op", 4417337),
		f("BenchmarkNoOpRequests", "requests/op", 2),
		f("BenchmarkNoOpRequests", "writes/op", 0),
		f("BenchmarkNoOpRequests", "B/op", 123),
		f("BenchmarkNoOpRequests", "allocs/op", 4),
		f("BenchmarkDriftPass/no_drift", "ns/op", 50123456),
		f("BenchmarkDriftPass/no_drift", "requests/op", 10),
		f("BenchmarkVersusKubectl", "ns/op", 2.5e9),
		f("BenchmarkVersusKubectl", "cold-ratio", 15.7),
	}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("figures (-got +want):\n%s", diff)
	}
}
