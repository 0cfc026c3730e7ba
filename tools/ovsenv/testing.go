package ovsenv

import (
	"testing"
)

// StartT starts an instance for a test and stops it when the test ends,
// first logging the tail of the daemons' logs if the test failed. It fails
// the test at once when Open vSwitch cannot be started: tests that need it
// never skip.
func StartT(t testing.TB, opts Options) *Instance {
	t.Helper()
	i, err := Start(t.Context(), opts)
	if err != nil {
		t.Fatalf("starting Open vSwitch: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs of the OVS instance in %s:\n%s", i.Dir, i.LogTail(30))
		}
		if err := i.Stop(); err != nil {
			t.Errorf("stopping Open vSwitch: %v", err)
		}
	})
	return i
}

// NetnsT creates a network namespace for a test and deletes it when the test
// ends.
func NetnsT(t testing.TB) *Netns {
	t.Helper()
	n, err := NewNetns(t.Context(), "")
	if err != nil {
		t.Fatalf("creating a network namespace: %v", err)
	}
	t.Cleanup(func() {
		if err := n.Delete(); err != nil {
			t.Errorf("deleting network namespace: %v", err)
		}
	})
	return n
}
