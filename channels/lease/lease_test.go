package lease

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// recordingLock is a lease lock that records the holders it writes, and
// fails the writes it is told to.
type recordingLock struct {
	resourcelock.Interface
	identity string
	fail     bool
	writes   []string
}

func (l *recordingLock) Identity() string { return l.identity }

func (l *recordingLock) Create(_ context.Context, ler resourcelock.LeaderElectionRecord) error {
	l.writes = append(l.writes, "create "+ler.HolderIdentity)
	return nil
}

func (l *recordingLock) Update(_ context.Context, ler resourcelock.LeaderElectionRecord) error {
	l.writes = append(l.writes, "update "+ler.HolderIdentity)
	if l.fail {
		return errors.New("etcd is away")
	}
	return nil
}

func TestWatchedLockSpacesRenewals(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	now := start
	inner := &recordingLock{identity: "me"}
	l := &watchedLock{Interface: inner, abort: func() {}, now: func() time.Time { return now }}
	ctx := context.Background()
	mine := resourcelock.LeaderElectionRecord{HolderIdentity: "me"}
	step := func(at time.Duration, ler resourcelock.LeaderElectionRecord, fail bool) {
		t.Helper()
		now, inner.fail = start.Add(at), fail
		_ = l.Update(ctx, ler)
	}

	if err := l.Create(ctx, mine); err != nil {
		t.Fatal(err)
	}
	step(1*time.Second, mine, false)                                              // renewal within renewPeriod: not written
	step(4*time.Second, mine, false)                                              // still within
	step(renewPeriod, mine, false)                                                // due: written
	step(renewPeriod+time.Second, mine, false)                                    // within again
	step(2*renewPeriod+time.Second, mine, true)                                   // due, and fails
	step(2*renewPeriod+2*time.Second, mine, false)                                // after a failure every renewal writes
	step(2*renewPeriod+3*time.Second, mine, false)                                // within the last write
	step(2*renewPeriod+4*time.Second, resourcelock.LeaderElectionRecord{}, false) // release: always written
	step(2*renewPeriod+5*time.Second, resourcelock.LeaderElectionRecord{HolderIdentity: "other"}, false)

	want := []string{"create me", "update me", "update me", "update me", "update ", "update other"}
	if diff := cmp.Diff(inner.writes, want); diff != "" {
		t.Errorf("writes (-got +want):\n%s", diff)
	}
	if !l.acquired() {
		t.Error("acquired() = false after this run wrote the lease as its holder")
	}
}

func TestLostError(t *testing.T) {
	t.Parallel()
	cause := errors.New("context canceled")
	for _, tc := range []struct {
		holder string
		want   string
	}{
		{"other_x1", "lost lease kube-system/channels to another run (other_x1): context canceled"},
		{"me", "could not renew lease kube-system/channels for 18s: the kube-apiserver answered too slowly or not at all, and no other run holds it; run again once it answers: context canceled"},
		{"", "could not renew lease kube-system/channels for 18s: the kube-apiserver answered too slowly or not at all, and no other run holds it; run again once it answers: context canceled"},
	} {
		err := lostError(tc.holder, "me", cause)
		if err.Error() != tc.want {
			t.Errorf("lostError(%q): %q, want %q", tc.holder, err, tc.want)
		}
		if !errors.Is(err, cause) {
			t.Errorf("lostError(%q) does not wrap its cause", tc.holder)
		}
	}
}
