// Package cmdline holds what KOS's commands share about their command line:
// an error for a command used wrongly, which each command's Main turns into
// exit code 2, as kubectl and most Unix tools do.
package cmdline

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
)

// The exit codes every command shares; a command may add its own above
// them (kos-etcd-backup's 3 for a partial save).
const (
	// ExitOK is the exit code of a command that did what it was asked.
	ExitOK = 0
	// ExitError is the exit code of a command that failed.
	ExitError = 1
	// ExitUsage is the exit code of a command used wrongly.
	ExitUsage = 2
)

// Exit writes err to w as one line, "error: <message>", and returns the
// exit code of a command that ended with it: ExitOK for nil (writing
// nothing), ExitUsage for a UsageError, ExitError otherwise. It is what
// each command's Main does with the error of its cobra command.
func Exit(w io.Writer, err error) int {
	if err == nil {
		return ExitOK
	}
	fmt.Fprintln(w, "error: "+OneLine(err.Error()))
	if IsUsage(err) {
		return ExitUsage
	}
	return ExitError
}

// OneLine folds a message of several lines (errors.Join writes one error
// a line) into one, the lines trimmed and joined by "; ", so that each
// error is printed once, on one line.
func OneLine(msg string) string {
	lines := strings.Split(strings.TrimSpace(msg), "\n")
	for i := range lines {
		lines[i] = strings.TrimSpace(lines[i])
	}
	return strings.Join(lines, "; ")
}

// UsageError is a command used wrongly: an unknown subcommand, a missing
// argument, a flag out of range.
type UsageError struct {
	err  error
	path string
}

// Error says what was wrong and, when the command is known, where its help
// is.
func (e *UsageError) Error() string {
	if e.path == "" {
		return e.err.Error()
	}
	return fmt.Sprintf("%v (see '%s --help')", e.err, e.path)
}

// Unwrap returns the error that made the command line wrong.
func (e *UsageError) Unwrap() error { return e.err }

// UsageErrorf returns a UsageError of cmd, which names cmd's help.
func UsageErrorf(cmd *cobra.Command, format string, args ...any) error {
	return &UsageError{err: fmt.Errorf(format, args...), path: cmd.CommandPath()}
}

// Usage marks err as a wrong command line, without naming a command's help
// (for flag errors, whose message already says which flag). It returns nil
// for nil.
func Usage(err error) error {
	if err == nil {
		return nil
	}
	return &UsageError{err: err}
}

// IsUsage reports whether err, or an error it wraps, is a UsageError.
func IsUsage(err error) bool {
	var u *UsageError
	return errors.As(err, &u)
}

// NoArgs is the cobra.PositionalArgs of a command that takes no
// arguments. A command that groups subcommands names the unknown one
// (cobra runs a group's Args for a word that names no subcommand); any
// other says it takes none. Either is a UsageError naming cmd's help.
func NoArgs(cmd *cobra.Command, args []string) error {
	switch {
	case len(args) == 0:
		return nil
	case cmd.HasSubCommands():
		return UsageErrorf(cmd, "unknown command %q for %q", args[0], cmd.CommandPath())
	default:
		return UsageErrorf(cmd, "%s takes no arguments, got %q", cmd.CommandPath(), args)
	}
}
