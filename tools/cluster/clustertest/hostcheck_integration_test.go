package clustertest

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestIntegrationHostCheckFails shows that the host check is no formality:
// a kernel setting left changed, as a node that did not restore the host
// would leave it, fails the test that checks, and the same host restored
// passes it.
func TestIntegrationHostCheckFails(t *testing.T) {
	const name = "kernel.keys.root_maxkeys"
	path := "/proc/sys/" + strings.ReplaceAll(name, ".", "/")
	before := snapshotHost(t)
	was, err := strconv.Atoi(before.Sysctls[name])
	if err != nil {
		t.Fatalf("reading %s: %v", name, err)
	}
	restore := func() error { return os.WriteFile(path, []byte(strconv.Itoa(was)), 0o644) }
	t.Cleanup(func() {
		if err := restore(); err != nil {
			t.Errorf("restoring %s to %d: %v", name, was, err)
		}
	})
	if err := os.WriteFile(path, []byte(strconv.Itoa(was+1)), 0o644); err != nil {
		t.Fatalf("changing %s: %v", name, err)
	}

	changed := runCheck(before)
	if !changed.failed || !strings.Contains(changed.log, name) {
		t.Errorf("with %s changed, the host check passed or did not name it; it said:\n%s", name, changed.log)
	}

	if err := restore(); err != nil {
		t.Fatalf("restoring %s: %v", name, err)
	}
	if restored := runCheck(before); restored.failed {
		t.Errorf("with the host restored, the host check failed:\n%s", restored.log)
	}
}

// checkResult is what a check did to the test it was given.
type checkResult struct {
	failed bool
	log    string
}

// runCheck runs checkHostSettings against a recording test and reports
// whether it failed the test, and what it said.
func runCheck(before hostState) checkResult {
	rec := &recorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		checkHostSettings(rec, before, 2*time.Second)
	}()
	<-done
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return checkResult{failed: rec.failed, log: rec.log.String()}
}

// recorder is a testing.TB that records failures instead of reporting
// them; Fatal ends the calling goroutine as testing.T's does.
type recorder struct {
	testing.TB
	mu     sync.Mutex
	failed bool
	log    strings.Builder
}

func (r *recorder) Helper() {}

func (r *recorder) Context() context.Context { return context.Background() }

func (r *recorder) Logf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(&r.log, format+"\n", args...)
}

func (r *recorder) Errorf(format string, args ...any) {
	r.Logf(format, args...)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = true
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	runtime.Goexit()
}

func (r *recorder) Fatal(args ...any) { r.Fatalf("%s", fmt.Sprint(args...)) }

func (r *recorder) Error(args ...any) { r.Errorf("%s", fmt.Sprint(args...)) }

func (r *recorder) Log(args ...any) { r.Logf("%s", fmt.Sprint(args...)) }
