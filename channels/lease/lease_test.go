package lease

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// recordingLock is a lease lock that records the holders it writes and the
// reads, and fails the writes it is told to.
type recordingLock struct {
	resourcelock.Interface
	identity string
	fail     bool
	// conflicts is how many updates to come fail with a conflict;
	// noNamespace makes creates fail as in a missing namespace until the
	// namespace is made; holder is who a read finds.
	conflicts   int
	noNamespace bool
	holder      string
	writes      []string
}

func (l *recordingLock) Identity() string { return l.identity }

func (l *recordingLock) Get(context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	l.writes = append(l.writes, "get")
	return &resourcelock.LeaderElectionRecord{HolderIdentity: l.holder, LeaderTransitions: 7}, nil, nil
}

func (l *recordingLock) Create(_ context.Context, ler resourcelock.LeaderElectionRecord) error {
	l.writes = append(l.writes, "create "+ler.HolderIdentity)
	if l.noNamespace {
		return apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, Namespace)
	}
	return nil
}

func (l *recordingLock) Update(_ context.Context, ler resourcelock.LeaderElectionRecord) error {
	l.writes = append(l.writes, fmt.Sprintf("update %s %d", ler.HolderIdentity, ler.LeaderTransitions))
	if l.conflicts > 0 {
		l.conflicts--
		return apierrors.NewConflict(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, Name, errors.New("the object has been modified"))
	}
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
	mine := resourcelock.LeaderElectionRecord{HolderIdentity: "me", LeaderTransitions: 3}
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

	want := []string{"create me", "update me 3", "update me 3", "update me 3", "update  0", "update other 0"}
	if diff := cmp.Diff(inner.writes, want); diff != "" {
		t.Errorf("writes (-got +want):\n%s", diff)
	}
	if !l.acquired() {
		t.Error("acquired() = false after this run wrote the lease as its holder")
	}
}

func TestWatchedLockRelease(t *testing.T) {
	for _, tc := range []struct {
		name      string
		conflicts int
		holder    string
		want      []string
	}{
		// The lease as this run last wrote it: one write, no read.
		{name: "unchanged", want: []string{"create me", "update  3"}},
		// Written since (a renewal whose answer was lost): read, and
		// released as it now is.
		{name: "renewed meanwhile", conflicts: 1, holder: "me", want: []string{"create me", "update  3", "get", "update  7"}},
		// Another run took it: read, and left alone.
		{name: "taken", conflicts: 1, holder: "other", want: []string{"create me", "update  3", "get"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inner := &recordingLock{identity: "me", conflicts: tc.conflicts, holder: tc.holder}
			l := &watchedLock{Interface: inner, abort: func() {}, now: time.Now}
			ctx := context.Background()
			if err := l.Create(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: "me", LeaderTransitions: 3}); err != nil {
				t.Fatal(err)
			}
			inner.conflicts = tc.conflicts
			if err := l.release(ctx); err != nil {
				t.Errorf("release: %v", err)
			}
			if diff := cmp.Diff(inner.writes, tc.want); diff != "" {
				t.Errorf("requests (-got +want):\n%s", diff)
			}
		})
	}
}

func TestWatchedLockCreatesNamespace(t *testing.T) {
	inner := &recordingLock{identity: "me", noNamespace: true}
	created := 0
	l := &watchedLock{Interface: inner, abort: func() {}, now: time.Now, createNamespace: func(context.Context) error {
		created++
		inner.noNamespace = false
		return nil
	}}
	if err := l.Create(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: "me"}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	if diff := cmp.Diff(inner.writes, []string{"create me", "create me"}); diff != "" {
		t.Errorf("requests (-got +want):\n%s", diff)
	}
	if created != 1 || !l.acquired() {
		t.Errorf("namespace created %d times, acquired %v; want once, true", created, l.acquired())
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
