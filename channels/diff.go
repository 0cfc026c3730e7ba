package channels

import (
	"fmt"
	"reflect"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// diffContext is how many unchanged lines a hunk shows around a change.
const diffContext = 3

// UnifiedDiff returns the unified diff (diff -u) from lines a to lines b,
// which keep their trailing newlines, or "" when they are equal.
func UnifiedDiff(nameA, nameB string, a, b []string) string {
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

// diffLines computes a shortest edit script by the longest common
// subsequence of lines. Objects are at most a few thousand lines, so the
// quadratic table is cheap.
func diffLines(a, b []string) []diffOp {
	n, m := len(a), len(b)
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var ops []diffOp
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && a[i] == b[j]:
			ops = append(ops, diffOp{kind: ' ', line: a[i], a: i, b: j})
			i++
			j++
		case j < m && (i == n || lcs[i][j+1] > lcs[i+1][j]):
			ops = append(ops, diffOp{kind: '+', line: b[j], a: i, b: j})
			j++
		default:
			ops = append(ops, diffOp{kind: '-', line: a[i], a: i, b: j})
			i++
		}
	}
	return ops
}

// Masks that stand for a Secret's values in a diff: they tell whether a key
// is added, removed, changed or unchanged, and nothing about the value.
const (
	maskAdded     = "(sensitive: added)"
	maskRemoved   = "(sensitive: removed)"
	maskUnchanged = "(sensitive: unchanged)"
	maskBefore    = "(sensitive: changed, before)"
	maskAfter     = "(sensitive: changed, after)"
)

// lastApplied is the annotation kubectl apply keeps the applied object in,
// a Secret's data included.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// isSecret reports whether gk is the core Secret kind.
func isSecret(gk schema.GroupKind) bool {
	return gk.Group == "" && gk.Kind == "Secret"
}

// maskSecrets returns copies of a Secret as it is live and as it would be
// (either may be nil) with each value under data and stringData, and the
// last-applied-configuration annotation, replaced by a mask that says only
// whether it is added, removed, changed or unchanged, so that a diff of
// the two shows which keys change and never a value.
func maskSecrets(live, merged *unstructured.Unstructured) (*unstructured.Unstructured, *unstructured.Unstructured) {
	var before, after map[string]any
	if live != nil {
		live = live.DeepCopy()
		before = live.Object
	}
	if merged != nil {
		merged = merged.DeepCopy()
		after = merged.Object
	}
	for _, field := range []string{"data", "stringData"} {
		b, bok := before[field]
		a, aok := after[field]
		bm, bIsMap := b.(map[string]any)
		am, aIsMap := a.(map[string]any)
		if bok && !bIsMap || aok && !aIsMap {
			// Not a map, as a valid Secret's is: mask the field whole.
			bv, av := maskPair(b, a, bok, aok)
			if bok {
				before[field] = bv
			}
			if aok {
				after[field] = av
			}
			continue
		}
		for k, v := range bm {
			w, ok := am[k]
			bv, av := maskPair(v, w, true, ok)
			bm[k] = bv
			if ok {
				am[k] = av
			}
		}
		for k := range am {
			if _, ok := bm[k]; !ok {
				am[k] = maskAdded
			}
		}
	}
	ba, bok := annotation(live)
	aa, aok := annotation(merged)
	if bok || aok {
		bm, am := maskPair(ba, aa, bok, aok)
		if bok {
			live.SetAnnotations(withAnnotation(live.GetAnnotations(), bm))
		}
		if aok {
			merged.SetAnnotations(withAnnotation(merged.GetAnnotations(), am))
		}
	}
	return live, merged
}

// maskPair returns the masks for a value before and after, each present or
// not; the mask of an absent value is "".
func maskPair(before, after any, bok, aok bool) (string, string) {
	switch {
	case bok && !aok:
		return maskRemoved, ""
	case !bok && aok:
		return "", maskAdded
	case reflect.DeepEqual(before, after):
		return maskUnchanged, maskUnchanged
	default:
		return maskBefore, maskAfter
	}
}

func annotation(u *unstructured.Unstructured) (string, bool) {
	if u == nil {
		return "", false
	}
	v, ok := u.GetAnnotations()[lastApplied]
	return v, ok
}

func withAnnotation(a map[string]string, v string) map[string]string {
	a[lastApplied] = v
	return a
}
