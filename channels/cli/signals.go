package cli

import (
	"context"
	"errors"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Exit codes after a signal, as a shell reports them: 128 + the signal's
// number.
const (
	exitInterrupted = 130
	exitTerminated  = 143
)

// signalCause is the cause of a context a signal cancelled.
type signalCause struct{ sig os.Signal }

func (s *signalCause) Error() string { return s.sig.String() + " signal received" }

// Run runs channels as a program with args (without the program name):
// SIGINT and SIGTERM cancel the running command, which stops at its next
// request and leaves nothing half-written that the next run does not repair;
// a second signal exits at once. It returns the exit code: that of Main, or
// 130 after SIGINT, or 143 after SIGTERM stopped a command other than a
// daemon (a daemon stops cleanly on SIGTERM and exits 0).
func Run(args []string, stdout, stderr io.Writer) int {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(signals)
	go func() {
		select {
		case sig := <-signals:
			cancel(&signalCause{sig: sig})
		case <-ctx.Done():
			return
		}
		sig := <-signals
		os.Exit(signalExitCode(sig))
	}()
	return Main(ctx, args, stdout, stderr)
}

// signalExitCode is the exit code after a signal.
func signalExitCode(sig os.Signal) int {
	if sig == syscall.SIGTERM {
		return exitTerminated
	}
	return exitInterrupted
}

// stoppedBy returns the signal that cancelled ctx, or nil.
func stoppedBy(ctx context.Context) os.Signal {
	var cause *signalCause
	if errors.As(context.Cause(ctx), &cause) {
		return cause.sig
	}
	return nil
}
