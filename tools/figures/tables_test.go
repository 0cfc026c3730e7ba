package figures

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestTables(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	at := func(day int) time.Time { return time.Date(2026, 11, day, 10, 0, 0, 0, time.UTC) }
	if err := Append(filepath.Join(dir, "bench.jsonl"),
		Figure{Test: "BenchmarkDriftPass/repair", Name: "requests/op", Value: 20, Unit: "requests/op", Time: at(24), Load: "3.0 2.0 1.0"},
		Figure{Test: "BenchmarkDriftPass/no_drift", Name: "requests/op", Value: 10, Unit: "requests/op", Time: at(24), Load: "3.0 2.0 1.0"},
		Figure{Test: "BenchmarkOther", Name: "ns/op", Value: 1, Unit: "ns/op", Time: at(24)},
		// A later run: the newest figure wins.
		Figure{Test: "BenchmarkDriftPass/repair", Name: "requests/op", Value: 19, Unit: "requests/op", Time: at(29), Load: "9.1 8.0 7.0"},
		Figure{Test: "BenchmarkDriftPass/repair", Name: "ns/op", Value: 1.2345e8, Unit: "ns/op", Time: at(29), Load: "9.1 8.0 7.0"},
	); err != nil {
		t.Fatal(err)
	}
	page := filepath.Join(dir, "page.md")
	before := "# Page\n\n<!-- figures bench.jsonl ^BenchmarkDriftPass/ requests/op ns/op -->\n| stale |\n<!-- /figures -->\n\nText.\n"
	got, err := Tables(page, []byte(before))
	if err != nil {
		t.Fatal(err)
	}
	want := "# Page\n\n<!-- figures bench.jsonl ^BenchmarkDriftPass/ requests/op ns/op -->\n" +
		"| test | requests/op | s/op | load | recorded |\n" +
		"|---|---|---|---|---|\n" +
		"| `BenchmarkDriftPass/repair` | 19 | 0.123 | 9.1 8.0 7.0 | 2026-11-29 |\n" +
		"| `BenchmarkDriftPass/no_drift` | 10 |  | 3.0 2.0 1.0 | 2026-11-24 |\n" +
		"<!-- /figures -->\n\nText.\n"
	if diff := cmp.Diff(string(got), want); diff != "" {
		t.Errorf("Tables (-got +want):\n%s", diff)
	}
	// Made again, the page does not change.
	again, err := Tables(page, got)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(again), string(got)); diff != "" {
		t.Errorf("Tables of its own output changed it (-got +want):\n%s", diff)
	}

	for name, page := range map[string]string{
		"no closing comment": "<!-- figures bench.jsonl . ns/op -->\n| x |\n",
		"no matching test":   "<!-- figures bench.jsonl ^BenchmarkNone ns/op -->\n<!-- /figures -->\n",
		"no file":            "<!-- figures none.jsonl . ns/op -->\n<!-- /figures -->\n",
	} {
		if _, err := Tables(filepath.Join(dir, "p.md"), []byte(page)); err == nil || !strings.Contains(err.Error(), "p.md:1") {
			t.Errorf("%s: error %v, want one naming p.md:1", name, err)
		}
	}
}
