package channels

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestUnifiedDiff(t *testing.T) {
	long := func(change map[int]string, drop ...int) string {
		var b strings.Builder
		for i := 1; i <= 30; i++ {
			if len(drop) > 0 && drop[0] == i {
				drop = drop[1:]
				continue
			}
			if s, ok := change[i]; ok {
				b.WriteString(s + "\n")
				continue
			}
			b.WriteString("line " + string(rune('a'+i%26)) + "\n")
		}
		return b.String()
	}
	tests := []struct {
		name string
		a, b string
	}{
		{name: "equal", a: "x\ny\n", b: "x\ny\n"},
		{name: "created", a: "", b: "a: 1\nb: 2\n"},
		{name: "deleted", a: "a: 1\nb: 2\n", b: ""},
		{name: "one change", a: long(nil), b: long(map[int]string{15: "changed"})},
		{name: "two hunks", a: long(nil), b: long(map[int]string{3: "first", 25: "second"})},
		{name: "close changes share a hunk", a: long(nil), b: long(map[int]string{10: "first", 15: "second"})},
		{name: "insertions and deletions", a: long(nil, 2, 20), b: long(map[int]string{1: "new first", 29: "x"}, 7)},
	}
	dir := t.TempDir()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := UnifiedDiff("a", "b", splitLines(tt.a), splitLines(tt.b))
			// diff(1) is the reference.
			fa, fb := filepath.Join(dir, "a"), filepath.Join(dir, "b")
			if err := os.WriteFile(fa, []byte(tt.a), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(fb, []byte(tt.b), 0o644); err != nil {
				t.Fatal(err)
			}
			out, _ := exec.Command("diff", "-u", "--label", "a", "--label", "b", fa, fb).Output()
			if diff := cmp.Diff(got, string(out)); diff != "" {
				t.Errorf("UnifiedDiff (-got +diff -u):\n%s", diff)
			}
		})
	}
}

func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	lines := strings.SplitAfter(s, "\n")
	return lines[:len(lines)-1]
}
