package diff

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestUnified(t *testing.T) {
	t.Parallel()
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
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := Unified("a", "b", splitLines(tt.a), splitLines(tt.b))
			// diff(1) is the reference, on files of this case's own.
			dir := t.TempDir()
			fa, fb := filepath.Join(dir, "a"), filepath.Join(dir, "b")
			if err := os.WriteFile(fa, []byte(tt.a), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(fb, []byte(tt.b), 0o644); err != nil {
				t.Fatal(err)
			}
			out, _ := exec.Command("diff", "-u", "--label", "a", "--label", "b", fa, fb).Output()
			if diff := cmp.Diff(got, string(out)); diff != "" {
				t.Errorf("Unified (-got +diff -u):\n%s", diff)
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

// TestDiffLinesMinimal checks the edit scripts of diffLines against a
// quadratic longest common subsequence on random inputs over few distinct
// lines, where the search meets the edges of the edit graph most often:
// each script must turn a into b and be as short as can be.
func TestDiffLinesMinimal(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	random := func(n, alphabet int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = string(rune('a'+rng.IntN(alphabet))) + "\n"
		}
		return out
	}
	for i := range 3000 {
		a, b := random(rng.IntN(25), 1+rng.IntN(4)), random(rng.IntN(25), 1+rng.IntN(4))
		ops := diffLines(a, b)
		var gotA, gotB []string
		edits := 0
		for _, op := range ops {
			if op.kind != '+' {
				gotA = append(gotA, op.line)
			}
			if op.kind != '-' {
				gotB = append(gotB, op.line)
			}
			if op.kind != ' ' {
				edits++
			}
		}
		if !slices.Equal(gotA, a) || !slices.Equal(gotB, b) {
			t.Fatalf("case %d: the script from %q to %q does not rebuild them: %+v", i, a, b, ops)
		}
		if want := len(a) + len(b) - 2*lcsLength(a, b); edits != want {
			t.Fatalf("case %d: %d edits from %q to %q, want %d", i, edits, a, b, want)
		}
	}
}

// lcsLength is the length of a longest common subsequence, by the table.
func lcsLength(a, b []string) int {
	prev, cur := make([]int, len(b)+1), make([]int, len(b)+1)
	for i := range a {
		for j := range b {
			if a[i] == b[j] {
				cur[j+1] = prev[j] + 1
			} else {
				cur[j+1] = max(prev[j+1], cur[j])
			}
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// BenchmarkUnified diffs two 100,000-line inputs that differ in one
// line in a hundred (changed, dropped or added), and two that share no
// line, where the cost limit bounds the search. B/op is the memory of the
// whole diff, its text included; the table of common subsequences the diff
// used before would need 8·10^10 bytes for the first.
func BenchmarkUnified(b *testing.B) {
	const n = 100_000
	a := make([]string, n)
	for i := range a {
		a[i] = fmt.Sprintf("  line-%d: value-%d\n", i, i)
	}
	var near []string
	for i, line := range a {
		switch i % 300 {
		case 0:
			near = append(near, "  changed\n")
		case 100:
		case 200:
			near = append(near, line, "  added\n")
		default:
			near = append(near, line)
		}
	}
	other := make([]string, n)
	for i := range other {
		other[i] = fmt.Sprintf("  other-%d\n", i)
	}
	for _, bb := range []struct {
		name string
		b    []string
	}{{"one line in 100 differs", near}, {"no line in common", other}} {
		b.Run(bb.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if Unified("a", "b", a, bb.b) == "" {
					b.Fatal("no diff")
				}
			}
		})
	}
}
