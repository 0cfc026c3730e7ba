package agent

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// TestRelevance drives the bookkeeping through local attachments that come,
// move between networks and go, and checks after each step which network
// became relevant, which stopped being, and which are.
func TestRelevance(t *testing.T) {
	n1 := network{"ns", 1}
	n2 := network{"ns", 2}
	// other has n1's VNI in another namespace: a network of its own here.
	other := network{"other", 1}
	none := network{}
	steps := []struct {
		name         string
		key          string
		n            network
		in           bool
		gained, lost network
		relevant     []network
	}{
		{"first local attachment in n1", "ns/a", n1, true, n1, none, []network{n1}},
		{"second in n1", "ns/b", n1, true, none, none, []network{n1}},
		{"same again", "ns/b", n1, true, none, none, []network{n1}},
		{"one without an address yet", "ns/c", none, false, none, none, []network{n1}},
		{"first in n2", "ns/c", n2, true, n2, none, []network{n1, n2}},
		{"same VNI, other namespace", "other/a", other, true, other, none, []network{n1, n2, other}},
		{"one of two leaves n1", "ns/a", none, false, none, none, []network{n1, n2, other}},
		{"a removal of what is not there", "ns/zzz", none, false, none, none, []network{n1, n2, other}},
		{"the last of n1 moves to n2", "ns/b", n2, true, none, n1, []network{n2, other}},
		{"other loses its only one", "other/a", none, false, none, other, []network{n2}},
		{"n1 is back", "ns/a", n1, true, n1, none, []network{n1, n2}},
		{"n2 loses one", "ns/c", none, false, none, none, []network{n1, n2}},
		{"n2 loses its last", "ns/b", none, false, none, n2, []network{n1}},
		{"n1 loses its last", "ns/a", none, false, none, n1, nil},
	}
	r := newRelevance()
	for _, s := range steps {
		gained, lost := r.set(s.key, s.n, s.in)
		if gained != s.gained || lost != s.lost {
			t.Errorf("%s: set(%q, %v, %t) = gained %v, lost %v; want gained %v, lost %v", s.name, s.key, s.n, s.in, gained, lost, s.gained, s.lost)
		}
		if diff := cmp.Diff(r.networks(), s.relevant, cmpopts.EquateEmpty(), cmp.AllowUnexported(network{})); diff != "" {
			t.Errorf("%s: relevant networks (-got +want):\n%s", s.name, diff)
		}
		for _, n := range s.relevant {
			if !r.relevant(n) {
				t.Errorf("%s: relevant(%v) = false", s.name, n)
			}
		}
	}
	if len(r.of) != 0 || len(r.members) != 0 {
		t.Errorf("bookkeeping left behind: of %v, members %v", r.of, r.members)
	}
}
