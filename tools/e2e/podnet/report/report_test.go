package report

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestSum(t *testing.T) {
	got := Sum(
		Chat{Opened: 2, Alive: 2, Sent: 10, Echoed: 9, LongestStallMS: 300, StalledNowMS: 100},
		Chat{Opened: 2, Alive: 1, Errors: []string{"a -> b: receiving: EOF"}, Sent: 7, Echoed: 7, LongestStallMS: 1200},
	)
	want := Chat{Opened: 4, Alive: 3, Errors: []string{"a -> b: receiving: EOF"}, Sent: 17, Echoed: 16, LongestStallMS: 1200, StalledNowMS: 100}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Sum (-want +got):\n%s", diff)
	}
	if got.LongestStall() != 1200*time.Millisecond {
		t.Errorf("LongestStall = %v, want 1.2s", got.LongestStall())
	}
}

func TestSettled(t *testing.T) {
	tests := []struct {
		name string
		r    Chat
		want bool
	}{
		{"nothing yet", Chat{}, false},
		{"open, no echo on one", Chat{Opened: 2, Alive: 2, Sent: 2, Echoed: 1}, false},
		{"one ended", Chat{Opened: 2, Alive: 1, Sent: 9, Echoed: 9}, false},
		{"every one echoed", Chat{Opened: 2, Alive: 2, Sent: 4, Echoed: 3}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.r.Settled() == nil; got != tt.want {
				t.Errorf("Settled() == nil is %t, want %t (%v)", got, tt.want, tt.r.Settled())
			}
		})
	}
}

// TestChatJSON pins the JSON names of a report, as podnet prints it and
// the tests and the demo read it.
func TestChatJSON(t *testing.T) {
	in := `{"opened":2,"alive":2,"sent":5,"echoed":5,"longestStallMS":120,"stalledNowMS":0}`
	var r Chat
	if err := json.Unmarshal([]byte(in), &r); err != nil {
		t.Fatal(err)
	}
	if want := (Chat{Opened: 2, Alive: 2, Sent: 5, Echoed: 5, LongestStallMS: 120}); !cmp.Equal(r, want) {
		t.Errorf("decoded %+v, want %+v", r, want)
	}
	out, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != in {
		t.Errorf("encoded %s, want %s", out, in)
	}
}
