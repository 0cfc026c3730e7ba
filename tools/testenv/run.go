package testenv

import (
	"context"
	"errors"
	"fmt"
)

// StartProcess runs binary with args as a process of the environment named
// name: its log and pid file live in Dir, it is detached when the
// environment is, and Stop (or `localenv down`) stops it with the rest. When
// ready is not nil, StartProcess waits until it returns nil, and stops the
// process if it exits first or never does.
func (e *Env) StartProcess(ctx context.Context, name, binary string, args []string, ready func(context.Context) error) error {
	if !etcdNamePattern.MatchString(name) {
		return fmt.Errorf("process name %q: want lowercase letters, digits and inner dashes", name)
	}
	e.mu.Lock()
	if e.stopped {
		e.mu.Unlock()
		return errors.New("the environment is stopped")
	}
	for _, p := range e.procs {
		if p.Name == name && p.Running() {
			e.mu.Unlock()
			return fmt.Errorf("%s already runs (pid %d)", name, p.PID)
		}
	}
	p, err := startProcess(e.Dir, name, binary, args, e.detached)
	if err == nil {
		err = e.track(p)
	}
	e.mu.Unlock()
	if err != nil {
		return err
	}
	if ready == nil {
		return nil
	}
	if err := p.WaitReady(ctx, e.timeout, ready); err != nil {
		return errors.Join(err, p.Stop(stopGrace))
	}
	return nil
}
