// Package figures records what tests measure as data. A figure is logged in
// the test's output for a person to read ("figure NAME VALUE UNIT", the form
// scripts have parsed since wave 2) and, when $KOS_FIGURES names a file,
// appended to it as one JSON line, so that the docs cite figures a run wrote
// down, with the command that ran it, instead of numbers copied out of logs.
//
// make test sets $KOS_FIGURES to _output/figures.jsonl and prints how many
// figures the tests wrote; make bench sets it to _output/bench.jsonl and
// pipes the benchmarks' output through `tools/figures/bench`
// (BenchParser), a figure per metric. `go run ./tools/figures/table`
// prints a file as a table; `go run ./tools/figures/doc` makes the docs'
// tables of figures from the files they name (Tables).
package figures

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// Env names the environment variable that holds the path of the file
// figures are appended to; when it is unset, figures are only logged.
const Env = "KOS_FIGURES"

// Figure is one measured value, as a line of the figures file holds it.
type Figure struct {
	// Test is the full name of the test that measured it.
	Test string `json:"test"`
	// Name says what was measured; it is unique within its test.
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	// Unit is "s" for durations, otherwise what was counted ("packets",
	// "of 6").
	Unit string `json:"unit"`
	// Time is when it was recorded, and Load the host's load averages
	// then: a figure of a loaded two-core machine is read differently.
	Time time.Time `json:"time"`
	Load string    `json:"load,omitempty"`
}

// Duration records d, in seconds, as figure name of tb.
func Duration(tb testing.TB, name string, d time.Duration) {
	tb.Helper()
	record(tb, Figure{Name: name, Value: d.Seconds(), Unit: "s"}, fmt.Sprintf("%.1f", d.Seconds()))
}

// Count records n, in unit, as figure name of tb.
func Count(tb testing.TB, name string, n int, unit string) {
	tb.Helper()
	record(tb, Figure{Name: name, Value: float64(n), Unit: unit}, fmt.Sprint(n))
}

// appendMu keeps this process's lines whole; lines of several processes
// (go test runs packages side by side) stay whole because each is one
// write(2) of less than a pipe buffer on a file opened for appending.
var appendMu sync.Mutex

func record(tb testing.TB, f Figure, shown string) {
	tb.Helper()
	tb.Logf("figure %s %s %s", f.Name, shown, f.Unit)
	path := os.Getenv(Env)
	if path == "" {
		return
	}
	f.Test = tb.Name()
	if err := Append(path, f); err != nil {
		// A figure that cannot be written down is a broken run of the
		// test house, not of the product: say so, and fail.
		tb.Errorf("recording figure %s (unset %s to only log figures): %v", f.Name, Env, err)
	}
}

// Append appends figures to the figures file at path, with the time and the
// host's load averages now where a figure has none.
func Append(path string, figs ...Figure) error {
	var lines []byte
	for _, f := range figs {
		if f.Time.IsZero() {
			f.Time, f.Load = time.Now().UTC(), loadAverage()
		}
		line, err := json.Marshal(f)
		if err != nil {
			return fmt.Errorf("encoding figure %s: %w", f.Name, err)
		}
		lines = append(append(lines, line...), '\n')
	}
	appendMu.Lock()
	defer appendMu.Unlock()
	file, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := file.Write(lines); err != nil {
		file.Close()
		return err
	}
	return file.Close()
}

// loadAverage returns the host's 1, 5 and 15 minute load averages, or ""
// where /proc does not say.
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	fields := strings.Fields(string(data))
	if len(fields) < 3 {
		return ""
	}
	return strings.Join(fields[:3], " ")
}
