package spawner

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestWaitReady(t *testing.T) {
	tests := []struct {
		name    string
		script  string
		timeout time.Duration
		// ready reports whether the process is ready, given its folder.
		ready func(dir string) error
		// wantErr holds what the error says, in order; none means ready.
		wantErr []string
	}{
		{
			name:    "ready once the file is there",
			script:  "sleep 0.3; touch ready; exec sleep 60",
			timeout: time.Minute,
			ready:   fileReady,
		},
		{
			name:    "exits first",
			script:  "echo cannot bind; exit 3",
			timeout: time.Minute,
			ready:   fileReady,
			wantErr: []string{"child exited while starting (exit status 3)", "child.log:\ncannot bind"},
		},
		{
			name:    "never ready",
			script:  "echo still thinking; exec sleep 60",
			timeout: 300 * time.Millisecond,
			ready:   fileReady,
			wantErr: []string{"child not ready after 300ms (last check: ", "no such file", "child.log:\nstill thinking"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			p, err := Run(Options{Name: "child", Dir: dir, Binary: "/bin/sh", Args: []string{"-c", tt.script}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Stop(0) })
			err = p.WaitReady(t.Context(), tt.timeout, func(context.Context) error { return tt.ready(dir) })
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatalf("WaitReady: %v, want ready", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("WaitReady succeeded, want an error saying %q", tt.wantErr)
			}
			rest := err.Error()
			for _, want := range tt.wantErr {
				i := strings.Index(rest, want)
				if i < 0 {
					t.Fatalf("WaitReady: %v\nwant it to say, in order, %q", err, tt.wantErr)
				}
				rest = rest[i+len(want):]
			}
		})
	}
}

// TestWaitReadyContext checks that WaitReady gives up when its context ends,
// and says why.
func TestWaitReadyContext(t *testing.T) {
	p, err := Run(Options{Name: "child", Dir: t.TempDir(), Binary: "/bin/sh", Args: []string{"-c", "exec sleep 60"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop(0) })
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	err = p.WaitReady(ctx, time.Minute, func(context.Context) error { return errors.New("not yet") })
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "not yet") {
		t.Errorf("WaitReady = %v, want the context's error and the last check's", err)
	}
}

func fileReady(dir string) error {
	_, err := os.Stat(filepath.Join(dir, "ready"))
	return err
}

func TestExited(t *testing.T) {
	tests := []struct {
		script   string
		wantCode int
	}{
		{script: "exit 0", wantCode: 0},
		{script: "exit 4", wantCode: 4},
	}
	for _, tt := range tests {
		p, err := Run(Options{Name: "child", Dir: t.TempDir(), Binary: "/bin/sh", Args: []string{"-c", tt.script}})
		if err != nil {
			t.Fatal(err)
		}
		if !p.WaitGone(10 * time.Second) {
			t.Fatalf("%q still runs after 10s", tt.script)
		}
		exited, err := p.Exited()
		code := 0
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		} else if err != nil {
			t.Errorf("%q: Exited error %v, want an *exec.ExitError or nil", tt.script, err)
		}
		if !exited || code != tt.wantCode {
			t.Errorf("%q: Exited() = %t, exit code %d; want true, %d", tt.script, exited, code, tt.wantCode)
		}
	}
	if exited, err := (&Process{Name: "other", PID: os.Getpid()}).Exited(); exited || err != nil {
		t.Errorf("Exited of a process another program started = %t, %v; want false, nil", exited, err)
	}
}
