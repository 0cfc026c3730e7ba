// Package spawner starts and supervises the child processes of the test
// environments (tools/testenv, tools/cluster, tools/ovsenv): Run starts one
// with its output in a log, reaps it, and Process waits until it is ready
// (WaitReady), stops it (SIGTERM, then SIGKILL) or, found again from a state
// file (WriteState, ReadState), tells whether it still runs.
//
// Every child starts from one thread that lives as long as the program, so
// that a child's parent-death signal fires only when the program dies.
//
// Linux sends the parent-death signal (SysProcAttr.Pdeathsig) when the thread
// that started the child exits, not when the process does
// (go.dev/issue/27505), and the Go runtime ends a thread whenever a goroutine
// locked to it returns, which is how code that enters network namespaces
// works. Started from an arbitrary goroutine, a child could be killed while
// the program still runs. Start hands every command to one goroutine locked
// to its thread for the life of the program instead; that thread never exits
// before the program does.
package spawner

import (
	"os/exec"
	"runtime"
	"sync"
)

var (
	once     sync.Once
	requests chan request
)

type request struct {
	cmd  *exec.Cmd
	errc chan error
}

// Start starts cmd, as cmd.Start does, from the spawner thread. The caller
// waits for cmd as usual.
func Start(cmd *exec.Cmd) error {
	once.Do(func() {
		requests = make(chan request)
		go func() {
			runtime.LockOSThread()
			// Never unlocked and never returns: see the package comment.
			for req := range requests {
				req.errc <- req.cmd.Start()
			}
		}()
	})
	errc := make(chan error, 1)
	requests <- request{cmd: cmd, errc: errc}
	return <-errc
}
