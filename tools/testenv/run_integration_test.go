package testenv

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kos-sdn/kos/tools/spawner"
)

// TestIntegrationStartProcess runs extra processes in an environment: one
// that becomes ready, one that exits while starting, and one that never
// becomes ready. Stop stops what still runs.
func TestIntegrationStartProcess(t *testing.T) {
	ctx := t.Context()
	env, err := Start(ctx, Options{})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })

	calls := 0
	ready := func(context.Context) error {
		if calls++; calls < 3 {
			return errors.New("not yet")
		}
		return nil
	}
	if err := env.StartProcess(ctx, "sleeper", "/bin/sleep", []string{"600"}, ready); err != nil {
		t.Fatalf("StartProcess: %v", err)
	}
	if calls != 3 {
		t.Errorf("readiness checked %d times, want 3", calls)
	}
	if err := env.StartProcess(ctx, "sleeper", "/bin/sleep", []string{"600"}, nil); err == nil {
		t.Error("a second process of the same name started; want an error")
	}

	err = env.StartProcess(ctx, "quitter", "/bin/false", nil, func(context.Context) error { return errors.New("never") })
	if err == nil || !strings.Contains(err.Error(), "exited while starting") {
		t.Errorf("a process that exits: got error %v, want one saying it exited while starting", err)
	}
	// The environment waits minutes for readiness; a deadline ends the wait
	// sooner, and the process with it.
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	err = env.StartProcess(short, "laggard", "/bin/sleep", []string{"600"}, func(context.Context) error { return errors.New("never") })
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a process that never gets ready: got error %v, want the deadline's", err)
	}

	status := map[string]bool{}
	pids := map[string]int{}
	for _, p := range env.Processes() {
		status[p.Name] = p.Running
		pids[p.Name] = p.PID
	}
	if !status["sleeper"] || status["quitter"] || status["laggard"] {
		t.Errorf("running: sleeper=%v quitter=%v laggard=%v, want only sleeper", status["sleeper"], status["quitter"], status["laggard"])
	}
	if err := env.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if spawner.Alive(pids["sleeper"], "/bin/sleep") {
		t.Errorf("sleeper (pid %d) still runs after Stop", pids["sleeper"])
	}
}
