package figures

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestRecordAppendsLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "figures.jsonl")
	t.Setenv(Env, path)
	Duration(t, "install", 1500*time.Millisecond)
	Count(t, "pings-lost", 3, "packets")
	t.Run("sub", func(t *testing.T) { Count(t, "connections", 6, "of 6") })

	file, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	got, err := Read(file)
	if err != nil {
		t.Fatal(err)
	}
	want := []Figure{
		{Test: t.Name(), Name: "install", Value: 1.5, Unit: "s"},
		{Test: t.Name(), Name: "pings-lost", Value: 3, Unit: "packets"},
		{Test: t.Name() + "/sub", Name: "connections", Value: 6, Unit: "of 6"},
	}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(Figure{}, "Time", "Load")); diff != "" {
		t.Errorf("figures file (-want +got):\n%s", diff)
	}
	for _, f := range got {
		if f.Time.IsZero() {
			t.Errorf("figure %s has no time", f.Name)
		}
	}
}

func TestRecordWithoutFileOnlyLogs(t *testing.T) {
	t.Setenv(Env, "")
	dir := t.TempDir()
	t.Chdir(dir)
	Count(t, "n", 1, "things")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Errorf("recording without %s wrote %d files", Env, len(entries))
	}
}

func TestReadNamesBadLine(t *testing.T) {
	_, err := Read(strings.NewReader(`{"name":"a","value":1}` + "\n" + "{not json\n"))
	if err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("Read of a bad second line: got %v, want an error naming line 2", err)
	}
}
