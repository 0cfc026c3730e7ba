package testenv

import (
	"os/exec"
	"runtime"
	"sync"
)

// Linux sends the parent-death signal when the thread that forked the child
// exits, not when the process does (go.dev/issue/27505), and the Go runtime
// ends a thread whenever a goroutine locked to it returns, which tests that
// enter network namespaces do. So every child is started from one goroutine
// locked to its thread for the life of the program: that thread never exits
// before the program does.
var (
	spawnOnce sync.Once
	spawnReqs chan spawnReq
)

type spawnReq struct {
	cmd  *exec.Cmd
	errc chan error
}

// startCmd starts cmd on the spawner thread.
func startCmd(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawnReqs = make(chan spawnReq)
		go func() {
			runtime.LockOSThread()
			// Never unlocked and never returns: see above.
			for req := range spawnReqs {
				req.errc <- req.cmd.Start()
			}
		}()
	})
	errc := make(chan error, 1)
	spawnReqs <- spawnReq{cmd: cmd, errc: errc}
	return <-errc
}
