package channels

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
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
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

func TestObjectChangeDiffMasksSecrets(t *testing.T) {
	secret := func(fields map[string]any) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1",
			"kind":       "Secret",
			"metadata":   map[string]any{"name": "s", "namespace": "ns"},
			"type":       "Opaque",
		}}
		for k, v := range fields {
			u.Object[k] = v
		}
		return u
	}
	data := func(kv ...string) map[string]any {
		m := map[string]any{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	tests := []struct {
		name         string
		kind         schema.GroupKind
		live, merged *unstructured.Unstructured
		// want are lines the diff holds; secrets are strings it must not.
		want, secrets []string
	}{{
		name:    "secret created",
		merged:  secret(map[string]any{"data": data("password", "czNjcjN0", "user", "YWRtaW4=")}),
		want:    []string{"+  password: '(sensitive: added)'\n", "+  user: '(sensitive: added)'\n"},
		secrets: []string{"czNjcjN0", "YWRtaW4="},
	}, {
		name:    "key added",
		live:    secret(map[string]any{"data": data("user", "YWRtaW4=")}),
		merged:  secret(map[string]any{"data": data("password", "czNjcjN0", "user", "YWRtaW4=")}),
		want:    []string{"+  password: '(sensitive: added)'\n", "   user: '(sensitive: unchanged)'\n"},
		secrets: []string{"czNjcjN0", "YWRtaW4="},
	}, {
		name:   "value changed",
		live:   secret(map[string]any{"data": data("password", "b2xk", "user", "YWRtaW4=")}),
		merged: secret(map[string]any{"data": data("password", "bmV3", "user", "YWRtaW4=")}),
		want: []string{
			"-  password: '(sensitive: changed, before)'\n",
			"+  password: '(sensitive: changed, after)'\n",
			"   user: '(sensitive: unchanged)'\n",
		},
		secrets: []string{"b2xk", "bmV3", "YWRtaW4="},
	}, {
		name:    "value unchanged, other field changed",
		live:    secret(map[string]any{"data": data("password", "czNjcjN0")}),
		merged:  secret(map[string]any{"data": data("password", "czNjcjN0"), "kind": "Secret", "metadata": map[string]any{"name": "s", "labels": map[string]any{"a": "b"}}}),
		want:    []string{"   password: '(sensitive: unchanged)'\n", "+  labels:\n"},
		secrets: []string{"czNjcjN0"},
	}, {
		name:    "key removed",
		live:    secret(map[string]any{"data": data("password", "czNjcjN0", "user", "YWRtaW4=")}),
		merged:  secret(map[string]any{"data": data("user", "YWRtaW4=")}),
		want:    []string{"-  password: '(sensitive: removed)'\n", "   user: '(sensitive: unchanged)'\n"},
		secrets: []string{"czNjcjN0", "YWRtaW4="},
	}, {
		name:    "secret pruned",
		live:    secret(map[string]any{"data": data("password", "czNjcjN0")}),
		want:    []string{"-  password: '(sensitive: removed)'\n"},
		secrets: []string{"czNjcjN0"},
	}, {
		name:   "stringData",
		live:   secret(map[string]any{"stringData": data("token", "hunter2", "host", "db.example")}),
		merged: secret(map[string]any{"stringData": data("token", "hunter3", "host", "db.example", "port", "5432")}),
		want: []string{
			"-  token: '(sensitive: changed, before)'\n",
			"+  token: '(sensitive: changed, after)'\n",
			"   host: '(sensitive: unchanged)'\n",
			"+  port: '(sensitive: added)'\n",
		},
		secrets: []string{"hunter2", "hunter3", "db.example", "5432"},
	}, {
		name: "last-applied-configuration",
		live: func() *unstructured.Unstructured {
			u := secret(map[string]any{"data": data("password", "b2xk")})
			u.SetAnnotations(map[string]string{lastApplied: `{"data":{"password":"b2xk"}}`, "team": "a"})
			return u
		}(),
		merged: func() *unstructured.Unstructured {
			u := secret(map[string]any{"data": data("password", "bmV3")})
			u.SetAnnotations(map[string]string{lastApplied: `{"data":{"password":"b2xk"}}`, "team": "b"})
			return u
		}(),
		want: []string{
			"     kubectl.kubernetes.io/last-applied-configuration: '(sensitive: unchanged)'\n",
			"+    team: b\n",
			"+  password: '(sensitive: changed, after)'\n",
		},
		secrets: []string{"b2xk", "bmV3"},
	}, {
		name:    "data not a map",
		live:    secret(map[string]any{"data": "b2xk"}),
		merged:  secret(map[string]any{"data": data("password", "bmV3")}),
		want:    []string{"-data: '(sensitive: changed, before)'\n", "+data: '(sensitive: changed, after)'\n"},
		secrets: []string{"b2xk", "bmV3"},
	}, {
		name:   "configmap shows values",
		kind:   schema.GroupKind{Kind: "ConfigMap"},
		live:   diffConfigMap(map[string]any{"data": data("mode", "old")}),
		merged: diffConfigMap(map[string]any{"data": data("mode", "new")}),
		want:   []string{"-  mode: old\n", "+  mode: new\n"},
	}, {
		name:   "a Secret of another group shows values",
		kind:   schema.GroupKind{Group: "example.com", Kind: "Secret"},
		live:   secret(map[string]any{"data": data("mode", "old")}),
		merged: secret(map[string]any{"data": data("mode", "new")}),
		want:   []string{"-  mode: old\n", "+  mode: new\n"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ch := ObjectChange{Kind: schema.GroupKind{Kind: "Secret"}, Namespace: "ns", Name: "s", Live: tt.live, Merged: tt.merged}
			if tt.kind != (schema.GroupKind{}) {
				ch.Kind = tt.kind
			}
			var before, after *unstructured.Unstructured
			if tt.live != nil {
				before = tt.live.DeepCopy()
			}
			if tt.merged != nil {
				after = tt.merged.DeepCopy()
			}
			got, err := ch.Diff()
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("diff lacks %q:\n%s", w, got)
				}
			}
			for _, s := range tt.secrets {
				if strings.Contains(got, s) {
					t.Errorf("diff shows the secret value %q:\n%s", s, got)
				}
			}
			// Masking works on copies: the change keeps its objects.
			if diff := cmp.Diff(ch.Live, before); diff != "" {
				t.Errorf("Live changed by Diff (-got +want):\n%s", diff)
			}
			if diff := cmp.Diff(ch.Merged, after); diff != "" {
				t.Errorf("Merged changed by Diff (-got +want):\n%s", diff)
			}
		})
	}
}

func diffConfigMap(fields map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1",
		"kind":       "ConfigMap",
		"metadata":   map[string]any{"name": "s", "namespace": "ns"},
	}}
	for k, v := range fields {
		u.Object[k] = v
	}
	return u
}

// TestDiffLinesMinimal checks the edit scripts of diffLines against a
// quadratic longest common subsequence on random inputs over few distinct
// lines, where the search meets the edges of the edit graph most often:
// each script must turn a into b and be as short as can be.
func TestDiffLinesMinimal(t *testing.T) {
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

// BenchmarkUnifiedDiff diffs two 100,000-line inputs that differ in one
// line in a hundred (changed, dropped or added), and two that share no
// line, where the cost limit bounds the search. B/op is the memory of the
// whole diff, its text included; the table of common subsequences the diff
// used before would need 8·10^10 bytes for the first.
func BenchmarkUnifiedDiff(b *testing.B) {
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
				if UnifiedDiff("a", "b", a, bb.b) == "" {
					b.Fatal("no diff")
				}
			}
		})
	}
}
