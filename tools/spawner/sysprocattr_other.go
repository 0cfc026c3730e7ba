//go:build !linux

package spawner

import "syscall"

// sysProcAttr puts a child in its own process group or, detached, its own
// session. Only Linux kills owned children when their parent dies.
func sysProcAttr(detach bool) *syscall.SysProcAttr {
	if detach {
		return &syscall.SysProcAttr{Setsid: true}
	}
	return &syscall.SysProcAttr{Setpgid: true}
}
