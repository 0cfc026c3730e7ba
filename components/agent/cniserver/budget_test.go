package cniserver

import (
	"testing"
	"time"
)

// TestBudgets walks the ADDs of sandboxes through time: each ADD waits
// its own wait at most, and the ADDs of one sandbox the total together.
func TestBudgets(t *testing.T) {
	const wait, total = 60 * time.Second, 90 * time.Second
	t0 := time.Unix(1000, 0)
	var b budgets
	steps := []struct {
		name      string
		sandbox   string
		at        time.Duration // since t0
		del       bool
		want      time.Duration
		wantError bool
	}{
		{name: "first ADD of c1 waits its wait", sandbox: "c1", want: wait},
		{name: "second ADD of c1, 60 s on, gets what is left", sandbox: "c1", at: 60 * time.Second, want: 30 * time.Second},
		{name: "another sandbox has its own", sandbox: "c2", at: 60 * time.Second, want: wait},
		{name: "third ADD of c1 after the total fails at once", sandbox: "c1", at: 90 * time.Second, wantError: true},
		{name: "DEL of c1 ends its budget", sandbox: "c1", at: 91 * time.Second, del: true},
		{name: "c1 starts anew after its DEL", sandbox: "c1", at: 92 * time.Second, want: wait},
		{name: "an old entry goes: c2 starts anew", sandbox: "c2", at: 60*time.Second + 2*total + time.Second, want: wait},
	}
	for _, st := range steps {
		if st.del {
			b.end(st.sandbox)
			continue
		}
		got, err := b.wait(st.sandbox, wait, total, t0.Add(st.at))
		if (err != nil) != st.wantError {
			t.Fatalf("%s: error %v, want one: %t", st.name, err, st.wantError)
		}
		if err == nil && got != st.want {
			t.Errorf("%s: wait %s, want %s", st.name, got, st.want)
		}
	}
}
