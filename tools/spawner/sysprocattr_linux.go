package spawner

import "syscall"

// sysProcAttr puts a child in its own process group, so that a Ctrl-C aimed
// at the caller's group does not kill it before Stop can stop the processes
// in order. An owned child also gets SIGKILL when its parent dies, however
// that happens; a detached one gets a session of its own instead.
func sysProcAttr(detach bool) *syscall.SysProcAttr {
	if detach {
		return &syscall.SysProcAttr{Setsid: true}
	}
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
