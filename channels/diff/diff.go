// Package diff computes unified diffs (diff -u) of lines: the --diff of
// channels plan and drift reports print them.
package diff

import (
	"fmt"
	"strings"
)

// diffContext is how many unchanged lines a hunk shows around a change.
const diffContext = 3

// Unified returns the unified diff (diff -u) from lines a to lines b,
// which keep their trailing newlines, or "" when they are equal.
func Unified(nameA, nameB string, a, b []string) string {
	ops := diffLines(a, b)
	changed := false
	for _, op := range ops {
		if op.kind != ' ' {
			changed = true
			break
		}
	}
	if !changed {
		return ""
	}
	var out strings.Builder
	fmt.Fprintf(&out, "--- %s\n+++ %s\n", nameA, nameB)
	for i := 0; i < len(ops); {
		if ops[i].kind == ' ' {
			i++
			continue
		}
		// A hunk: from diffContext lines before this change to diffContext
		// lines after the last change closer than 2*diffContext lines.
		start := max(i-diffContext, 0)
		end := i
		for j := i; j < len(ops); j++ {
			if ops[j].kind != ' ' {
				end = j
			} else if j-end > 2*diffContext {
				break
			}
		}
		end = min(end+diffContext+1, len(ops))
		aStart, bStart := ops[start].a, ops[start].b
		aLen, bLen := 0, 0
		for _, op := range ops[start:end] {
			if op.kind != '+' {
				aLen++
			}
			if op.kind != '-' {
				bLen++
			}
		}
		fmt.Fprintf(&out, "@@ -%s +%s @@\n", hunkRange(aStart, aLen), hunkRange(bStart, bLen))
		for _, op := range ops[start:end] {
			out.WriteByte(op.kind)
			out.WriteString(op.line)
			if !strings.HasSuffix(op.line, "\n") {
				out.WriteString("\n\\ No newline at end of file\n")
			}
		}
		i = end
	}
	return out.String()
}

// hunkRange formats a hunk's start (1-based) and length as diff -u does.
func hunkRange(start, n int) string {
	if n == 0 {
		return fmt.Sprintf("%d,0", start)
	}
	if n == 1 {
		return fmt.Sprint(start + 1)
	}
	return fmt.Sprintf("%d,%d", start+1, n)
}

// diffOp is one line of an edit script: ' ' kept, '-' removed from a, '+'
// added from b; a and b are the 0-based positions in each before the line.
type diffOp struct {
	kind byte
	line string
	a, b int
}

// diffCostLimit bounds the edit distance the search for one split point
// explores: past it, diffLines splits at the furthest point reached, and
// the edit script may be longer than the shortest, as GNU diff does on
// inputs too costly to compare exactly. Objects in a plan differ by far
// fewer lines, so their diffs stay minimal.
const diffCostLimit = 1024

// diffLines computes an edit script from a to b by Myers's O(ND)
// algorithm in its linear-space form: it finds the middle snake of an
// optimal path, then solves the two halves on either side of it. Memory is
// O(len(a)+len(b)) (two vectors of diagonals, and the script itself), where
// a table of common subsequences would take len(a)*len(b): two 100,000-line
// inputs need megabytes, not 80 GB.
func diffLines(a, b []string) []diffOp {
	n := len(a) + len(b)
	d := &myers{a: a, b: b, ops: make([]diffOp, 0, max(len(a), len(b)))}
	size := 2*min((n+1)/2, diffCostLimit) + 3
	d.forward, d.backward = make([]int, size), make([]int, size)
	d.compare(0, len(a), 0, len(b))
	return deletionsFirst(d.ops)
}

// deletionsFirst reorders each run of changes so that its removed lines come
// before its added ones, as diff(1) prints them.
func deletionsFirst(ops []diffOp) []diffOp {
	var added []diffOp
	for i := 0; i < len(ops); {
		if ops[i].kind == ' ' {
			i++
			continue
		}
		start := i
		a0, b0 := ops[i].a, ops[i].b
		added = added[:0]
		removed := 0
		for ; i < len(ops) && ops[i].kind != ' '; i++ {
			if ops[i].kind == '+' {
				added = append(added, ops[i])
				continue
			}
			ops[start+removed] = diffOp{kind: '-', line: ops[i].line, a: a0 + removed, b: b0}
			removed++
		}
		for j, op := range added {
			ops[start+removed+j] = diffOp{kind: '+', line: op.line, a: a0 + removed, b: b0 + j}
		}
	}
	return ops
}

// myers holds the state of one diff: the inputs, the script so far and the
// vectors of furthest-reaching points, reused by every search.
type myers struct {
	a, b              []string
	ops               []diffOp
	forward, backward []int
}

func (d *myers) keep(i, j int) { d.ops = append(d.ops, diffOp{kind: ' ', line: d.a[i], a: i, b: j}) }

// compare appends the script from a[aLo:aHi] to b[bLo:bHi].
func (d *myers) compare(aLo, aHi, bLo, bHi int) {
	for aLo < aHi && bLo < bHi && d.a[aLo] == d.b[bLo] {
		d.keep(aLo, bLo)
		aLo++
		bLo++
	}
	suffix := 0
	for aLo < aHi && bLo < bHi && d.a[aHi-1] == d.b[bHi-1] {
		aHi--
		bHi--
		suffix++
	}
	switch {
	case aLo == aHi:
		for j := bLo; j < bHi; j++ {
			d.ops = append(d.ops, diffOp{kind: '+', line: d.b[j], a: aLo, b: j})
		}
	case bLo == bHi:
		for i := aLo; i < aHi; i++ {
			d.ops = append(d.ops, diffOp{kind: '-', line: d.a[i], a: i, b: bLo})
		}
	default:
		// With the common ends stripped and both sides non-empty the
		// distance is at least 2, so each half is a smaller problem.
		x0, y0, x1, y1 := d.middleSnake(aLo, aHi, bLo, bHi)
		if (x0 == aHi-aLo && y0 == bHi-bLo) || (x1 == 0 && y1 == 0) {
			// No split that shrinks the problem (the search above
			// guarantees one; this keeps a slip from recursing forever).
			x0, y0, x1, y1 = 1, 0, 1, 0
		}
		d.compare(aLo, aLo+x0, bLo, bLo+y0)
		for i := range x1 - x0 {
			d.keep(aLo+x0+i, bLo+y0+i)
		}
		d.compare(aLo+x1, aHi, bLo+y1, bHi)
	}
	for i := range suffix {
		d.keep(aHi+i, bHi+i)
	}
}

// middleSnake returns the middle snake of an optimal path from a[aLo:aHi]
// to b[bLo:bHi], from (x0, y0) to (x1, y1) relative to (aLo, bLo): it runs
// the greedy search forward from the start and backward from the end, one
// edit at a time, until the two meet. Only points inside the edit graph
// count (-1 marks a diagonal no path reaches yet). Beyond diffCostLimit
// edits it returns the forward point that got furthest, as an empty snake.
func (d *myers) middleSnake(aLo, aHi, bLo, bHi int) (x0, y0, x1, y1 int) {
	n, m := aHi-aLo, bHi-bLo
	delta := n - m
	odd := delta%2 != 0
	limit := min((n+m+1)/2, diffCostLimit)
	off := limit + 1
	vf, vb := d.forward, d.backward
	// The backward search runs forward on the reversed inputs: its point
	// (xr, yr) on diagonal k is (n-xr, m-yr) on diagonal delta-k.
	same := func(x, y int) bool { return d.a[aLo+x] == d.b[bLo+y] }
	sameReversed := func(x, y int) bool { return d.a[aHi-1-x] == d.b[bHi-1-y] }
	for e := 0; e <= limit; e++ {
		for k := -e; k <= e; k += 2 {
			sx, x, ok := step(vf, off, e, k, n, m, same)
			if !ok {
				continue
			}
			if kr := delta - k; odd && kr >= -(e-1) && kr <= e-1 && vb[off+kr] >= 0 && x+vb[off+kr] >= n {
				return sx, sx - k, x, x - k
			}
		}
		for k := -e; k <= e; k += 2 {
			sx, x, ok := step(vb, off, e, k, n, m, sameReversed)
			if !ok {
				continue
			}
			if kf := delta - k; !odd && kf >= -e && kf <= e && vf[off+kf] >= 0 && vf[off+kf]+x >= n {
				return n - x, m - (x - k), n - sx, m - (sx - k)
			}
		}
	}
	// Too costly to find the best split: take the forward point that got
	// furthest.
	best, far := 0, -1
	for k := -limit; k <= limit; k += 2 {
		if x := vf[off+k]; x >= 0 && 2*x-k > far {
			best, far = k, 2*x-k
		}
	}
	x := vf[off+best]
	return x, x - best, x, x - best
}

// step extends the furthest-reaching paths of e-1 edits on the diagonals
// beside k (stored in v, diagonal k at v[off+k]) by one edit onto k, keeping
// inside the n×m graph, then follows the diagonal while same says the lines
// match. It stores the point reached and returns where the snake started
// and ended; ok is false when no path of e edits reaches diagonal k.
func step(v []int, off, e, k, n, m int, same func(x, y int) bool) (start, end int, ok bool) {
	x := -1
	if e == 0 {
		x = 0
	}
	if k+1 <= e-1 { // down from diagonal k+1: one line of b inserted
		if p := v[off+k+1]; p >= 0 && p-k <= m {
			x = p
		}
	}
	if k-1 >= -(e - 1) { // right from diagonal k-1: one line of a deleted
		if p := v[off+k-1]; p >= 0 && p+1 <= n && p+1 > x {
			x = p + 1
		}
	}
	v[off+k] = x
	if x < 0 {
		return 0, 0, false
	}
	start = x
	for x < n && x-k < m && same(x, x-k) {
		x++
	}
	v[off+k] = x
	return start, x, true
}
