// Package exechook runs the commands of attachments' postCreateExec and
// postDeleteExec for kos-agent, as root on the node, but only those an
// allow-list permits: programs that may run with any arguments
// (--allowed-programs) and programs with argument patterns (Rule,
// --exec-allow-file). A command's ${ifname}, ${ipv4} and ${mac} are
// expanded before it is checked; no shell ever sees it. What ran, or why
// it did not, is an ExecReport for the attachment's status.
package exechook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/yaml"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
)

// maxExecOutput bounds how much of a command's standard output and of its
// standard error the report keeps, so that a chatty command cannot bloat
// the attachment.
const maxExecOutput = 4096

// Vars are the values a command's arguments may name: ${ifname}, ${ipv4}
// and ${mac}.
type Vars struct {
	IfName, IPv4, MAC string
}

// expand returns the command with ${ifname}, ${ipv4} and ${mac} replaced
// in every argument. Anything else, such as $HOME or ${other}, stays as it
// is: no shell ever sees the command.
func expand(command []string, vars Vars) []string {
	r := strings.NewReplacer("${ifname}", vars.IfName, "${ipv4}", vars.IPv4, "${mac}", vars.MAC)
	out := make([]string, len(command))
	for i, arg := range command {
		out[i] = r.Replace(arg)
	}
	return out
}

// Rule allows one form of command: the program at Path with exactly
// len(Args) arguments, argument i matching the regular expression Args[i]
// as a whole (each is anchored at both ends). Arguments are matched after
// ${ifname}, ${ipv4} and ${mac} are expanded, so a rule sees what would run.
type Rule struct {
	// Path is the absolute, clean path of the program.
	Path string `json:"path"`
	// Args are the patterns of the arguments, in order (RE2 syntax).
	Args []string `json:"args"`
}

// AllowList is the content of --exec-allow-file: the command forms
// postCreateExec and postDeleteExec may take. A command runs when any rule
// allows it.
type AllowList struct {
	Rules []Rule `json:"rules"`
}

// LoadAllowFile reads and checks an allow-list file (YAML or JSON, as
// AllowList). Unknown fields, relative program paths and patterns that
// do not compile are errors. A file that does not exist allows nothing: the
// DaemonSet mounts it from a ConfigMap that the operator may not have made.
func LoadAllowFile(path string) ([]Rule, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the exec allow-list: %w", err)
	}
	var list AllowList
	if err := yaml.UnmarshalStrict(data, &list); err != nil {
		return nil, fmt.Errorf("exec allow-list %s: %w", path, err)
	}
	if _, err := compileRules(list.Rules); err != nil {
		return nil, fmt.Errorf("exec allow-list %s: %w", path, err)
	}
	return list.Rules, nil
}

// compiledRule is an Rule with its patterns compiled and anchored.
type compiledRule struct {
	args []*regexp.Regexp
}

// compileRules compiles rules by program path, returning every problem at
// once.
func compileRules(rules []Rule) (map[string][]compiledRule, error) {
	out := map[string][]compiledRule{}
	var errs []error
	for i, r := range rules {
		if !AbsClean(r.Path) {
			errs = append(errs, fmt.Errorf("rules[%d].path %q: want an absolute, clean path", i, r.Path))
		}
		c := compiledRule{args: make([]*regexp.Regexp, len(r.Args))}
		for j, a := range r.Args {
			re, err := regexp.Compile(`^(?:` + a + `)$`)
			if err != nil {
				errs = append(errs, fmt.Errorf("rules[%d].args[%d]: %w", i, j, err))
				continue
			}
			c.args[j] = re
		}
		out[r.Path] = append(out[r.Path], c)
	}
	return out, errors.Join(errs...)
}

// matches reports whether args, expanded, are the arguments rule allows.
func (c compiledRule) matches(args []string) bool {
	if len(args) != len(c.args) {
		return false
	}
	for i, a := range args {
		if !c.args[i].MatchString(a) {
			return false
		}
	}
	return true
}

// Policy runs the commands of attachments' postCreateExec and
// postDeleteExec, but only those its allow-list permits.
type Policy struct {
	// allowed holds the absolute, clean paths of the programs that may run
	// with any arguments (--allowed-programs).
	allowed sets.Set[string]
	// rules holds, by program path, the argument forms a program may run
	// with (--exec-allow-file).
	rules   map[string][]compiledRule
	timeout time.Duration
	now     func() time.Time
}

// NewPolicy returns the policy that lets the programs allowed run with any
// arguments and those of rules with the arguments they allow, each for at
// most timeout. It returns every problem with them at once.
func NewPolicy(allowed []string, rules []Rule, timeout time.Duration) (*Policy, error) {
	var errs []error
	for _, p := range allowed {
		if !AbsClean(p) {
			errs = append(errs, fmt.Errorf("allowed program %q is not an absolute, clean path", p))
		}
	}
	compiled, err := compileRules(rules)
	if err != nil {
		errs = append(errs, fmt.Errorf("exec rules: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &Policy{allowed: sets.New(allowed...), rules: compiled, timeout: timeout, now: time.Now}, nil
}

// ErrNotAllowed says a command is not one the allow-list permits.
var ErrNotAllowed = errors.New("command is not on the agent's allow-list")

// Check returns an error unless the command may run: it names, verbatim, a
// program on the allow-list, and its arguments, expanded with vars, match
// one of that program's rules (a program of --allowed-programs takes any
// arguments). The program is not expanded, looked up in PATH or resolved
// through symbolic links.
func (p *Policy) Check(command []string, vars Vars) error {
	if len(command) == 0 {
		return errors.New("empty command")
	}
	prog := command[0]
	if !AbsClean(prog) {
		return fmt.Errorf("%q: %w", prog, ErrNotAllowed)
	}
	if p.allowed.Has(prog) {
		return nil
	}
	rules, ok := p.rules[prog]
	if !ok {
		return fmt.Errorf("program %q: %w", prog, ErrNotAllowed)
	}
	args := expand(command[1:], vars)
	for _, r := range rules {
		if r.matches(args) {
			return nil
		}
	}
	return fmt.Errorf("%q with arguments %q: %w (no rule of the program matches)", prog, args, ErrNotAllowed)
}

// Run runs command, expanded with vars, when the allow-list permits it, and
// reports the run. A command that cannot run is reported with a negative
// exit status and the reason in StdErr.
func (p *Policy) Run(ctx context.Context, command []string, vars Vars) *v1alpha1.ExecReport {
	expanded := expand(command, vars)
	start := p.now()
	report := &v1alpha1.ExecReport{Command: expanded, ExitStatus: -1, StartTime: metav1.NewTime(start)}
	if err := p.Check(command, vars); err != nil {
		report.StopTime = report.StartTime
		report.StdErr = err.Error()
		return report
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, expanded[0], expanded[1:]...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &limitedWriter{buf: &stdout, left: maxExecOutput}
	cmd.Stderr = &limitedWriter{buf: &stderr, left: maxExecOutput}
	// Children that keep the output pipes open must not hold us forever.
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	report.StopTime = metav1.NewTime(p.now())
	report.StdOut, report.StdErr = stdout.String(), stderr.String()
	var exitErr *exec.ExitError
	switch {
	case err == nil:
		report.ExitStatus = 0
	case ctx.Err() != nil:
		report.StdErr += fmt.Sprintf("\nkilled after %s", p.timeout)
	case errors.As(err, &exitErr):
		report.ExitStatus = int32(exitErr.ExitCode())
	default:
		report.StdErr += "\n" + err.Error()
	}
	report.StdErr = strings.TrimPrefix(report.StdErr, "\n")
	return report
}

// Results of a command's run, for metrics and events.
const (
	ResultOK      = "ok"
	ResultFailed  = "failed"
	ResultRefused = "refused"
)

// Result classifies the run of command that r reports.
func (p *Policy) Result(command []string, vars Vars, r *v1alpha1.ExecReport) string {
	switch {
	case p.Check(command, vars) != nil:
		return ResultRefused
	case r.ExitStatus == 0:
		return ResultOK
	default:
		return ResultFailed
	}
}

// limitedWriter keeps the first left bytes written to it and drops the
// rest, without failing the writer.
type limitedWriter struct {
	buf  *bytes.Buffer
	left int
}

func (w *limitedWriter) Write(p []byte) (int, error) {
	n := min(len(p), w.left)
	w.buf.Write(p[:n])
	w.left -= n
	return len(p), nil
}

// AbsClean reports whether path is absolute and clean, as allow-list
// entries must be.
func AbsClean(path string) bool {
	return filepath.IsAbs(path) && filepath.Clean(path) == path
}
