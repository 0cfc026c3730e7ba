// Package cmdline holds what KOS's commands share about their command line:
// an error for a command used wrongly, which each command's Main turns into
// exit code 2, as kubectl and most Unix tools do.
package cmdline

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"
)

// ExitUsage is the exit code of a command used wrongly.
const ExitUsage = 2

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
