// Package golden compares what a test produced with a golden file in the
// test package's testdata/ folder, and rewrites the file instead when the
// test runs with -update (go test ./pkg/ -run TestX -update).
//
// Only tests import it: it registers the -update flag of the test binary,
// so a test package that imports it declares no -update of its own.
package golden

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// Check compares got with testdata/<file>, or writes got there under
// -update. A missing file fails the test and says how to write it.
func Check(t testing.TB, file, got string) {
	t.Helper()
	path := filepath.Join("testdata", file)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading the golden file (run the test with -update to write it): %v", err)
	}
	if diff := cmp.Diff(got, string(want)); diff != "" {
		t.Errorf("%s differs (-got +want):\n%s", path, diff)
	}
}

// CheckJSON is Check of got encoded as indented JSON, with a final
// newline.
func CheckJSON(t testing.TB, file string, got any) {
	t.Helper()
	data, err := json.MarshalIndent(got, "", "  ")
	if err != nil {
		t.Fatalf("encoding %s: %v", file, err)
	}
	Check(t, file, string(data)+"\n")
}
