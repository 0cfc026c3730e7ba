package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"testing"
	"time"
)

// shared is the control plane Shared starts for a test program on first use
// and Main stops at its end.
var shared struct {
	once    sync.Once
	mu      sync.Mutex
	env     *Env
	err     error
	stopped bool
}

// Shared returns the test program's shared control plane (etcd and
// kube-apiserver), starting it the first time a test asks, so that a
// package's unit tests run without one. Tests keep apart by namespace. When
// the control plane cannot start, Shared fails the test (and every later one
// that asks) with the reason: it never skips. Main stops it when the tests
// end; a package that calls Shared uses Main from TestMain:
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
//
//	func TestIntegrationX(t *testing.T) {
//		env := testenv.Shared(t)
//		...
//	}
func Shared(t testing.TB) *Env {
	t.Helper()
	shared.once.Do(func() {
		began := time.Now()
		e, err := Start(context.Background(), Options{})
		shared.mu.Lock()
		defer shared.mu.Unlock()
		if err != nil {
			shared.err = fmt.Errorf("the control plane did not start: %w", err)
			return
		}
		if shared.stopped {
			// Main has already ended the tests (an interrupt).
			shared.err = errStopped
			_ = e.Stop()
			return
		}
		shared.env = e
		fmt.Fprintf(os.Stderr, "testenv: Kubernetes %s at %s, started in %s\n", e.Version, e.APIServerURL, time.Since(began).Round(10*time.Millisecond))
	})
	if shared.err != nil {
		t.Fatalf("testenv: %v", shared.err)
	}
	return shared.env
}

var errStopped = errors.New("the test program is stopping")

// afterTests are the functions AfterTests registered.
var afterTests struct {
	mu  sync.Mutex
	fns []func() error
}

// AfterTests registers f to run once when the tests of a program Main runs
// have ended, or an interrupt ends them, before the control plane of Shared
// stops: for what a package's tests share beyond one test and build on the
// shared control plane's own, such as a cluster. The last registered runs
// first. An error fails the program.
func AfterTests(f func() error) {
	afterTests.mu.Lock()
	defer afterTests.mu.Unlock()
	afterTests.fns = append(afterTests.fns, f)
}

// runAfterTests runs what AfterTests registered, each once.
func runAfterTests() error {
	afterTests.mu.Lock()
	fns := afterTests.fns
	afterTests.fns = nil
	afterTests.mu.Unlock()
	var errs []error
	for i := len(fns) - 1; i >= 0; i-- {
		errs = append(errs, fns[i]())
	}
	return errors.Join(errs...)
}

// Main runs the tests of a package and then stops the control plane Shared
// started, if a test asked for it, and removes the commands Build built. An
// interrupt does both before the program exits, so that no etcd or
// kube-apiserver outlives the tests.
func Main(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	builds.mu.Lock()
	builds.main = true
	builds.mu.Unlock()
	// The children would die with this program anyway; stopping them here
	// also removes the working folder.
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	go func() {
		sig := <-signals
		fmt.Fprintf(os.Stderr, "testenv: %s: stopping the control plane\n", sig)
		_ = runAfterTests()
		_ = stopShared()
		_ = removeBuilds()
		os.Exit(1)
	}()

	code := m.Run()
	signal.Stop(signals)
	if err := runAfterTests(); err != nil {
		fmt.Fprintf(os.Stderr, "testenv: after the tests: %v\n", err)
		code = max(code, 1)
	}
	if err := stopShared(); err != nil {
		fmt.Fprintf(os.Stderr, "testenv: stopping the control plane: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	if err := removeBuilds(); err != nil {
		fmt.Fprintf(os.Stderr, "testenv: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// stopShared stops the shared control plane if it runs, and keeps a later
// Shared from starting another.
func stopShared() error {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	shared.stopped = true
	if shared.env == nil {
		return nil
	}
	return shared.env.Stop()
}
