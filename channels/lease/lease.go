// Package lease keeps two channels runs apart: a run that writes to the
// cluster holds the Lease kube-system/channels while it does, and another
// run waits for it. It is leader election with two differences: a run
// that cannot ever take the lease (forbidden, unauthorized) stops waiting
// with that error, and the holder writes the lease every renewPeriod
// rather than every retry.
package lease

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// The Lease that keeps two runs apart.
const (
	Namespace = "kube-system"
	Name      = "channels"
)

// Lease timing. A run that waits for the lease tries to take it every
// retryPeriod; a run that holds it writes it every renewPeriod, a third of
// leaseDuration, as leader election's renewals are a fraction of the lease
// (a run of a few seconds writes it only to take and release it); a run
// that died holding it blocks others for at most leaseDuration.
//
// A holder that cannot write the lease stops once RenewDeadline has passed
// since its first failed renewal, which comes at most renewPeriod plus a
// retryPeriod after its last write: 10 + 1 + 18 = 29 s, before another run,
// which counts leaseDuration (30 s) from when it saw that last write, may
// take the lease. The deadline is long because a run's writes go to a
// kube-apiserver that is often busiest while channels runs (a cluster
// rolling out what it applied): with 8 s, runs on loaded two-core clusters
// gave up on a lease nobody else wanted.
const (
	leaseDuration = 30 * time.Second
	renewPeriod   = leaseDuration / 3
	RenewDeadline = 18 * time.Second
	retryPeriod   = time.Second
)

// NewIdentity returns a lease holder identity unique to this run: the host
// name and a random suffix.
func NewIdentity() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "channels"
	}
	return host + "_" + rand.String(8)
}

// Hooks are told what Hold does, for a run's progress; nil hooks are not
// called. Waiting is called once per holder waited on, from leader
// election's goroutines, and never after Hold returns.
type Hooks struct {
	// Acquired is called once the lease is taken, before fn runs.
	Acquired func()
	// Waiting is called when another run, holder, holds the lease.
	Waiting func(holder string)
	// Released is called once the lease taken is released.
	Released func()
}

// Hold runs fn while holding the channels Lease (Namespace/Name) as
// identity, waiting for it as long as another run holds it; it creates the
// namespace when creating the lease finds it missing. fn's context is
// cancelled if the lease is lost. The lease is released when fn returns,
// before Hold does.
//
// Errors the lease cannot recover from by waiting (such as being forbidden to
// read or write Leases) end the wait with that error instead of retrying
// forever, as leader election would.
func Hold(ctx context.Context, kube kubernetes.Interface, identity string, hooks Hooks, fn func(context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	lock := &watchedLock{
		Interface: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: Namespace, Name: Name},
			Client:     kube.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
		},
		abort:           cancel,
		now:             time.Now,
		createNamespace: func(ctx context.Context) error { return createNamespace(ctx, kube) },
	}
	var (
		workErr  error
		workDone = make(chan struct{})
		waitMu   sync.Mutex
		waitedOn = map[string]bool{}
		finished bool
	)
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:          lock,
		Name:          Name,
		LeaseDuration: leaseDuration,
		RenewDeadline: RenewDeadline,
		RetryPeriod:   retryPeriod,
		// Released below by release, which writes without reading first.
		ReleaseOnCancel: false,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(leading context.Context) {
				defer close(workDone)
				// Cancelling ends the renew loop, and Run returns.
				defer cancel()
				if hooks.Acquired != nil {
					hooks.Acquired()
				}
				workErr = fn(leading)
				if workErr != nil && leading.Err() != nil && ctx.Err() == nil {
					workErr = lostError(lock.holder(), identity, workErr)
				}
			},
			OnStoppedLeading: func() {},
			OnNewLeader: func(holder string) {
				// Called from its own goroutine on every change of holder.
				waitMu.Lock()
				defer waitMu.Unlock()
				if finished || holder == "" || holder == identity || waitedOn[holder] {
					return
				}
				waitedOn[holder] = true
				if hooks.Waiting != nil {
					hooks.Waiting(holder)
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("configuring lease: %w", err)
	}
	elector.Run(ctx)
	// Leader election reports new holders from goroutines of their own,
	// which may run late: none may report after this point.
	waitMu.Lock()
	finished = true
	waitMu.Unlock()
	if lock.acquired() {
		// Run launched fn in a goroutine and returned once fn was done or
		// the lease lost; fn is done or about to see its context cancelled.
		<-workDone
		// As leader election's release, with a context of its own so that
		// a cancelled run still gives the lease up.
		releaseCtx, cancelRelease := context.WithTimeout(context.Background(), RenewDeadline)
		defer cancelRelease()
		if err := lock.release(releaseCtx); err != nil {
			// The lease then expires after leaseDuration; fn's result is
			// what the caller needs to know.
			klog.FromContext(ctx).Error(err, "Releasing the lease failed", "lease", Namespace+"/"+Name)
		}
		if hooks.Released != nil {
			hooks.Released()
		}
		return workErr
	}
	if err := lock.fatal(); err != nil {
		return fmt.Errorf("taking lease %s/%s: %w", Namespace, Name, err)
	}
	return fmt.Errorf("waiting for lease %s/%s: %w", Namespace, Name, context.Cause(ctx))
}

// lostError says why a run lost the lease it held: another run took it,
// or this run could not renew it in time (holder is the last holder it
// read).
func lostError(holder, identity string, err error) error {
	if holder != "" && holder != identity {
		return fmt.Errorf("lost lease %s/%s to another run (%s): %w", Namespace, Name, holder, err)
	}
	return fmt.Errorf("could not renew lease %s/%s for %s: the kube-apiserver answered too slowly or not at all, and no other run holds it; run again once it answers: %w", Namespace, Name, RenewDeadline, err)
}

// createNamespace creates the lease's namespace, which a cluster normally
// has (kube-system); another run may have created it meanwhile.
func createNamespace(ctx context.Context, kube kubernetes.Interface) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}
	_, err := kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{FieldManager: "channels"})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", Namespace, err)
	}
	return nil
}

// watchedLock wraps the lease lock to learn what leader election does not
// tell: whether this run ever wrote the lease as its holder, and whether an
// error means waiting is pointless. It also spaces the holder's renewals:
// leader election renews every retryPeriod, which is also how often a
// waiting run tries; a renewal within renewPeriod of the last write is
// taken as done without writing. It creates the lease's namespace when
// creating the lease finds none, and releases the lease without reading it
// first (release).
type watchedLock struct {
	resourcelock.Interface
	abort           func()
	now             func() time.Time
	createNamespace func(context.Context) error

	mu   sync.Mutex
	held bool
	err  error
	// written is when this run last wrote the lease as its holder; zero
	// once it released it or a write failed.
	written time.Time
	// seen is the holder the lease last named when read.
	seen string
	// transitions is the lease's count of holder changes as this run
	// last wrote it.
	transitions int
}

// Get reads the lease.
func (l *watchedLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	rec, raw, err := l.Interface.Get(ctx)
	if err == nil && rec != nil {
		l.mu.Lock()
		l.seen = rec.HolderIdentity
		l.mu.Unlock()
	}
	l.observe(err)
	return rec, raw, err
}

// holder returns the holder the lease named when last read.
func (l *watchedLock) holder() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seen
}

// Create creates the lease, holding it. When the lease's namespace does not
// exist it creates that, then the lease: a cluster always has kube-system,
// so a run does not read the namespace before every lease.
func (l *watchedLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	err := l.Interface.Create(ctx, ler)
	if apierrors.IsNotFound(err) && l.createNamespace != nil {
		if err = l.createNamespace(ctx); err == nil {
			err = l.Interface.Create(ctx, ler)
		}
	}
	l.observeWrite(ler, err)
	return err
}

// release gives the lease up as leader election does (no holder, a
// duration of one second, so that a waiting run takes it at its next try),
// but without reading it first: the write carries the resourceVersion of
// this run's last read or write of the lease, so it fails with a conflict
// when the lease was written since (a renewal whose answer was lost,
// another run that took it). Only then is the lease read, and released if
// it still names this run.
func (l *watchedLock) release(ctx context.Context) error {
	for attempt := 0; ; attempt++ {
		l.mu.Lock()
		transitions := l.transitions
		l.mu.Unlock()
		now := metav1.NewTime(l.now())
		err := l.Update(ctx, resourcelock.LeaderElectionRecord{LeaderTransitions: transitions, LeaseDurationSeconds: 1, RenewTime: now, AcquireTime: now})
		if !apierrors.IsConflict(err) || attempt == 2 {
			return err
		}
		rec, _, err := l.Get(ctx)
		if err != nil {
			return err
		}
		if rec.HolderIdentity != l.Identity() {
			return nil
		}
		l.mu.Lock()
		l.transitions = rec.LeaderTransitions
		l.mu.Unlock()
	}
}

// Update writes the lease: taking, renewing or releasing it. A renewal
// within renewPeriod of the last write is not written.
func (l *watchedLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	if l.skipRenewal(ler) {
		return nil
	}
	err := l.Interface.Update(ctx, ler)
	l.observeWrite(ler, err)
	return err
}

// skipRenewal reports whether a write renews the lease this run holds
// within renewPeriod of its last write.
func (l *watchedLock) skipRenewal(ler resourcelock.LeaderElectionRecord) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return ler.HolderIdentity == l.Identity() && !l.written.IsZero() && l.now().Sub(l.written) < renewPeriod
}

func (l *watchedLock) observeWrite(ler resourcelock.LeaderElectionRecord, err error) {
	l.mu.Lock()
	if err == nil && ler.HolderIdentity == l.Identity() {
		l.held = true
		l.written = l.now()
		l.transitions = ler.LeaderTransitions
	} else {
		// Released, or not written: the next renewal writes.
		l.written = time.Time{}
	}
	l.mu.Unlock()
	l.observe(err)
}

// observe aborts the wait on errors that retrying cannot cure.
func (l *watchedLock) observe(err error) {
	if err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
		return
	}
	if !apierrors.IsForbidden(err) && !apierrors.IsUnauthorized(err) && !apierrors.IsInvalid(err) && !apierrors.IsMethodNotSupported(err) {
		klog.V(2).InfoS("Lease request failed, retrying", "err", err)
		return
	}
	l.mu.Lock()
	if l.err == nil {
		l.err = err
	}
	l.mu.Unlock()
	if !l.acquired() {
		l.abort()
	}
}

func (l *watchedLock) acquired() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held
}

func (l *watchedLock) fatal() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}
