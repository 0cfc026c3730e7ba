package golden

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// fakeT records what Check reports instead of failing the test; a fatal
// ends the goroutine, as testing.T's does.
type fakeT struct {
	testing.TB
	errors, fatals int
}

func (f *fakeT) Helper()               {}
func (f *fakeT) Errorf(string, ...any) { f.errors++ }
func (f *fakeT) Fatalf(string, ...any) { f.fatals++; runtime.Goexit() }
func (f *fakeT) Fatal(...any)          { f.fatals++; runtime.Goexit() }

// inGoroutine runs fn on a goroutine of its own, which a fatal of fakeT
// may end, and waits for it.
func inGoroutine(fn func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	<-done
}

func TestCheck(t *testing.T) {
	t.Chdir(t.TempDir())
	if err := os.MkdirAll("testdata", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join("testdata", "a.golden"), []byte("one\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, file, got       string
		wantErrors, wantFatal int
	}{
		{"same", "a.golden", "one\n", 0, 0},
		{"different", "a.golden", "two\n", 1, 0},
		{"missing", "b.golden", "one\n", 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeT{TB: t}
			inGoroutine(func() { Check(f, tt.file, tt.got) })
			if f.errors != tt.wantErrors || f.fatals != tt.wantFatal {
				t.Errorf("Check(%s, %q): %d errors and %d fatals, want %d and %d", tt.file, tt.got, f.errors, f.fatals, tt.wantErrors, tt.wantFatal)
			}
		})
	}
	f := &fakeT{TB: t}
	inGoroutine(func() { CheckJSON(f, "a.golden", map[string]int{"a": 1}) })
	if f.errors != 1 {
		t.Errorf("CheckJSON of other content: %d errors, want 1", f.errors)
	}
}
