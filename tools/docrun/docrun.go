// Package docrun runs a runbook as its Markdown page writes it, so that
// the cluster tests execute the docs' commands instead of retyping them in
// Go, and a page whose commands stop working fails a test.
//
// A block runs when its fence says so: a fenced block whose info string is
// "sh run" (Markdown renders it as any "sh" block). Blocks without "run"
// are examples, alternatives or output, and never run. Section returns the
// blocks to run under a heading; a Runner runs them with bash, -euo
// pipefail, from the repository's root, where the pages' relative paths
// (docs/examples/...) resolve.
//
// Documented variables: a page writes what a reader sets for their
// cluster as an assignment on a line of its own, at the start of the block
// that uses it (KOS_AGENT_IMAGE=kos.example.com/kos-agent:0.3.0 # the
// image of the release that ran); Runner.Vars replaces the value of each
// such assignment, and running blocks that assign none of a Var fails, so
// that a page that drops a variable does not silently run with its own
// value.
//
// A block marked to run must run in a test: make verify fails when no test
// names one of the headings it is under (tools/docrun/check).
//
// When $KOS_DOCRUN names a file, every block run is appended to it as one
// JSON line (Record): which headings of which pages a run executed.
package docrun

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
)

// Env names the environment variable that holds the path of the file
// each block run is recorded in; when it is unset, nothing is recorded.
const Env = "KOS_DOCRUN"

// Block is one fenced block to run.
type Block struct {
	// File is the page, as given to Section.
	File string
	// Heading is the section's heading line; Line the opening fence's
	// line number (from 1).
	Heading string
	Line    int
	// Script is the block's text, each line ending in a newline.
	Script string
}

// String names the block for a reader: file:line under its heading.
func (b Block) String() string { return fmt.Sprintf("%s:%d (%s)", b.File, b.Line, b.Heading) }

// runInfo is the info string of a block to run.
const runInfo = "sh run"

// Section returns the blocks to run of file's section under heading (the
// whole heading line, such as "## Uninstalling"), up to the next heading
// of the same or a higher level: its subsections' blocks are included. It
// fails when the heading is missing or has no block to run.
func Section(file, heading string) ([]Block, error) {
	if headingLevel(heading) == 0 {
		return nil, fmt.Errorf("%q is not a Markdown heading", heading)
	}
	all, headings, err := scan(file)
	if err != nil {
		return nil, err
	}
	if !slices.Contains(headings, heading) {
		return nil, fmt.Errorf("%s has no heading %q", file, heading)
	}
	var blocks []Block
	for _, m := range all {
		if slices.Contains(m.Headings, heading) {
			blocks = append(blocks, m.Block)
		}
	}
	if len(blocks) == 0 {
		return nil, fmt.Errorf("%s has no block marked %q under %q", file, "```"+runInfo, heading)
	}
	return blocks, nil
}

// Marked is a block to run with the headings it is under, the outermost
// first (Block.Heading is the last).
type Marked struct {
	Block
	Headings []string
}

// All returns every block to run of file.
func All(file string) ([]Marked, error) {
	all, _, err := scan(file)
	return all, err
}

// scan returns the blocks to run of file, and its headings.
func scan(file string) ([]Marked, []string, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, nil, err
	}
	var (
		blocks   []Marked
		headings []string
		open     []string // the headings the next line is under, outermost first
		fence    string   // the open block's fence, "" outside blocks
		indent   int      // the open fence's indentation
		run      bool     // whether the open block runs
		start    int      // the open fence's line
		text     strings.Builder
	)
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case fence != "" && trimmed == fence:
			if run && len(open) > 0 {
				blocks = append(blocks, Marked{
					Block:    Block{File: file, Heading: open[len(open)-1], Line: start, Script: text.String()},
					Headings: slices.Clone(open),
				})
			}
			fence = ""
			text.Reset()
		case fence != "":
			// A block in a list item is indented as its fence is; that
			// indentation is not the script's.
			text.WriteString(strings.TrimPrefix(line, indentOf(line, indent)) + "\n")
		case strings.HasPrefix(trimmed, "```"):
			info := strings.TrimLeft(trimmed, "`")
			fence = trimmed[:len(trimmed)-len(info)]
			indent = len(line) - len(strings.TrimLeft(line, " "))
			run, start = strings.TrimSpace(info) == runInfo, n
		case headingLevel(line) > 0:
			l := headingLevel(line)
			for len(open) > 0 && headingLevel(open[len(open)-1]) >= l {
				open = open[:len(open)-1]
			}
			open = append(open, line)
			headings = append(headings, line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, nil, fmt.Errorf("reading %s: %w", file, err)
	}
	return blocks, headings, nil
}

// indentOf returns line's leading spaces, at most n of them.
func indentOf(line string, n int) string {
	i := 0
	for i < len(line) && i < n && line[i] == ' ' {
		i++
	}
	return line[:i]
}

// headingLevel returns the level of an ATX heading line (1 for "# X"), or
// 0 when line is none.
func headingLevel(line string) int {
	l := len(line) - len(strings.TrimLeft(line, "#"))
	if l == 0 || l > 6 || len(line) == l || line[l] != ' ' {
		return 0
	}
	return l
}

// Runner runs blocks.
type Runner struct {
	// Dir is the folder the blocks run in: the repository's root, where
	// the pages' relative paths resolve.
	Dir string
	// Env is added to the process's environment (KUBECONFIG=..., a PATH
	// with the commands the page names).
	Env []string
	// Vars are the documented variables' values, by name.
	Vars map[string]string
	// Logf, when set, gets each block with its output.
	Logf func(format string, args ...any)
}

// assignment matches a line that assigns a variable: its indentation, the
// name, the value (a word, or a quoted string) and the rest (a comment).
var assignment = regexp.MustCompile(`^(\s*)([A-Za-z_][A-Za-z0-9_]*)=("[^"]*"|'[^']*'|[^\s#]*)(.*)$`)

// Substitute returns script with each assignment of a name in vars given
// vars' value instead of its own, and the names it assigned.
func Substitute(script string, vars map[string]string) (string, []string) {
	var b strings.Builder
	var assigned []string
	for _, line := range strings.SplitAfter(script, "\n") {
		m := assignment.FindStringSubmatch(strings.TrimSuffix(line, "\n"))
		if m != nil {
			if v, ok := vars[m[2]]; ok {
				line = m[1] + m[2] + "=" + quote(v) + m[4] + "\n"
				assigned = append(assigned, m[2])
			}
		}
		b.WriteString(line)
	}
	return b.String(), assigned
}

// quote quotes s for the shell, unless it needs none.
func quote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:@=+,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Run runs blocks in turn, each as its own bash script, and returns their
// output. It stops at the first that fails, with an error naming it. It
// fails before running any when one of r.Vars is assigned in none of
// them.
func (r *Runner) Run(ctx context.Context, blocks ...Block) (string, error) {
	scripts := make([]string, len(blocks))
	var assigned []string
	for i, b := range blocks {
		var names []string
		scripts[i], names = Substitute(b.Script, r.Vars)
		assigned = append(assigned, names...)
	}
	var missing []string
	for name := range r.Vars {
		if !slices.Contains(assigned, name) {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return "", fmt.Errorf("no block of %s assigns %s: the page no longer documents it", blocks[0].Heading, strings.Join(missing, ", "))
	}
	var all strings.Builder
	for i, b := range blocks {
		began := time.Now()
		cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", scripts[i])
		cmd.Dir = r.Dir
		cmd.Env = append(os.Environ(), r.Env...)
		out, err := cmd.CombinedOutput()
		all.Write(out)
		if r.Logf != nil {
			r.Logf("%s:\n$ %s\n%s", b, strings.ReplaceAll(strings.TrimSpace(scripts[i]), "\n", "\n$ "), out)
		}
		if recErr := record(Record{File: b.File, Heading: b.Heading, Line: b.Line, Passed: err == nil, Seconds: time.Since(began).Seconds()}); recErr != nil {
			err = errors.Join(err, recErr)
		}
		if err != nil {
			return all.String(), fmt.Errorf("the block at %s failed: %w", b, err)
		}
	}
	return all.String(), nil
}

// Record is one block run, as a line of $KOS_DOCRUN's file holds it.
type Record struct {
	File    string  `json:"file"`
	Heading string  `json:"heading"`
	Line    int     `json:"line"`
	Passed  bool    `json:"passed"`
	Seconds float64 `json:"seconds"`
}

// recordMu keeps this process's lines whole (each is one write(2) to a
// file opened for appending, so those of other processes stay whole too).
var recordMu sync.Mutex

func record(rec Record) error {
	path := os.Getenv(Env)
	if path == "" {
		return nil
	}
	line, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	recordMu.Lock()
	defer recordMu.Unlock()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("recording the block run (unset %s to record none): %w", Env, err)
	}
	defer f.Close()
	_, err = f.Write(append(line, '\n'))
	return err
}
