package cmdline

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

func TestUsageError(t *testing.T) {
	t.Parallel()
	root := &cobra.Command{Use: "kos"}
	sub := &cobra.Command{Use: "get"}
	root.AddCommand(sub)
	cause := errors.New("bad flag")

	tests := []struct {
		name      string
		err       error
		wantMsg   string
		wantUsage bool
	}{
		{"of a command", UsageErrorf(sub, "takes no arguments, got %q", "x"), `takes no arguments, got "x" (see 'kos get --help')`, true},
		{"a flag error", Usage(cause), "bad flag", true},
		{"wrapped", fmt.Errorf("running: %w", UsageErrorf(root, "name a command")), "running: name a command (see 'kos --help')", true},
		{"not usage", cause, "bad flag", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.err.Error(); got != tt.wantMsg {
				t.Errorf("Error() = %q, want %q", got, tt.wantMsg)
			}
			if got := IsUsage(tt.err); got != tt.wantUsage {
				t.Errorf("IsUsage = %t, want %t", got, tt.wantUsage)
			}
		})
	}
	if Usage(nil) != nil {
		t.Error("Usage(nil) is not nil")
	}
	if !errors.Is(Usage(cause), cause) {
		t.Error("Usage(err) does not unwrap to err")
	}
}

func TestNoArgs(t *testing.T) {
	t.Parallel()
	root := &cobra.Command{Use: "kos"}
	get := &cobra.Command{Use: "get"}
	root.AddCommand(get)
	tests := []struct {
		name    string
		cmd     *cobra.Command
		args    []string
		wantErr string
	}{
		{"none", get, nil, ""},
		{"to a command", get, []string{"x", "y"}, `kos get takes no arguments, got ["x" "y"] (see 'kos get --help')`},
		{"to a group", root, []string{"gte"}, `unknown command "gte" for "kos" (see 'kos --help')`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := NoArgs(tt.cmd, tt.args)
			got := ""
			if err != nil {
				got = err.Error()
				if !IsUsage(err) {
					t.Errorf("NoArgs(%q) = %v, not a usage error", tt.args, err)
				}
			}
			if got != tt.wantErr {
				t.Errorf("NoArgs(%q) = %q, want %q", tt.args, got, tt.wantErr)
			}
		})
	}
}

func TestExit(t *testing.T) {
	t.Parallel()
	cmd := &cobra.Command{Use: "kos"}
	tests := []struct {
		name     string
		err      error
		wantCode int
		wantOut  string
	}{
		{"success", nil, ExitOK, ""},
		{"an error", errors.New("reading x: boom"), ExitError, "error: reading x: boom\n"},
		{"joined errors on one line", fmt.Errorf("applying: %w", errors.Join(errors.New("one"), errors.New("  two  "))), ExitError, "error: applying: one; two\n"},
		{"a usage error", UsageErrorf(cmd, "name a command"), ExitUsage, "error: name a command (see 'kos --help')\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out strings.Builder
			code := Exit(&out, tt.err)
			if code != tt.wantCode || out.String() != tt.wantOut {
				t.Errorf("Exit(%v) = %d, wrote %q; want %d, %q", tt.err, code, out.String(), tt.wantCode, tt.wantOut)
			}
		})
	}
}
