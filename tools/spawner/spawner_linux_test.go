package spawner

import (
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// TestStartOutlivesThread starts a child with a parent-death signal from a
// goroutine whose thread then exits, as a goroutine that entered a network
// namespace does: the child must live on.
func TestStartOutlivesThread(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	errc := make(chan error, 1)
	for started := false; !started; {
		onMain := make(chan bool, 1)
		go func() {
			runtime.LockOSThread()
			// The runtime never ends the main thread: the test needs
			// another one.
			if syscall.Gettid() == syscall.Getpid() {
				runtime.UnlockOSThread()
				onMain <- true
				return
			}
			onMain <- false
			// Returning while locked makes the runtime end this thread.
			errc <- Start(cmd)
		}()
		started = !<-onMain
	}
	if err := <-errc; err != nil {
		t.Fatalf("Start: %v", err)
	}
	var waitErr error
	exited := make(chan struct{})
	go func() {
		waitErr = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	select {
	case <-exited:
		t.Fatalf("the child died when the starting goroutine's thread ended: %v", waitErr)
	case <-time.After(500 * time.Millisecond):
	}
}

func TestCPUTime(t *testing.T) {
	before, err := CPUTime("self")
	if err != nil {
		t.Fatal(err)
	}
	// Burn some CPU: the process's time must grow.
	deadline := time.Now().Add(50 * time.Millisecond)
	for x := 0; time.Now().Before(deadline); x++ {
		_ = x * x
	}
	after, err := CPUTime("self")
	if err != nil {
		t.Fatal(err)
	}
	if after <= before {
		t.Errorf("CPU time went from %s to %s across 50 ms of spinning, want it to grow", before, after)
	}
	if _, err := CPUTime("0"); err == nil {
		t.Error("CPUTime of pid 0 succeeded, want an error")
	}
}
