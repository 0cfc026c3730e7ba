package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
)

// maxExecOutput bounds how much of a command's standard output and of its
// standard error the report keeps, so that a chatty command cannot bloat
// the attachment.
const maxExecOutput = 4096

// execVars are the values a command's arguments may name: ${ifname},
// ${ipv4} and ${mac}.
type execVars struct {
	ifname, ipv4, mac string
}

// expand returns the command with ${ifname}, ${ipv4} and ${mac} replaced
// in every argument. Anything else, such as $HOME or ${other}, stays as it
// is: no shell ever sees the command.
func expand(command []string, vars execVars) []string {
	r := strings.NewReplacer("${ifname}", vars.ifname, "${ipv4}", vars.ipv4, "${mac}", vars.mac)
	out := make([]string, len(command))
	for i, arg := range command {
		out[i] = r.Replace(arg)
	}
	return out
}

// execPolicy runs the commands of attachments' postCreateExec and
// postDeleteExec, but only programs on its allow-list.
type execPolicy struct {
	// allowed holds the absolute, clean paths of the programs that may run.
	allowed sets.Set[string]
	timeout time.Duration
	now     func() time.Time
}

// errNotAllowed says a command names a program off the allow-list.
var errNotAllowed = errors.New("program is not on the agent's allow-list")

// check returns an error unless the command may run: it names, verbatim, a
// program on the allow-list. The program is not expanded, looked up in PATH
// or resolved through symbolic links.
func (p *execPolicy) check(command []string) error {
	if len(command) == 0 {
		return errors.New("empty command")
	}
	prog := command[0]
	if !isAbsClean(prog) || !p.allowed.Has(prog) {
		return fmt.Errorf("%q: %w", prog, errNotAllowed)
	}
	return nil
}

// run runs command, expanded with vars, when the allow-list permits it, and
// reports the run. A command that cannot run is reported with a negative
// exit status and the reason in StdErr.
func (p *execPolicy) run(ctx context.Context, command []string, vars execVars) *v1alpha1.ExecReport {
	expanded := expand(command, vars)
	start := p.now()
	report := &v1alpha1.ExecReport{Command: expanded, ExitStatus: -1, StartTime: metav1.NewTime(start)}
	if err := p.check(command); err != nil {
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
	execOK      = "ok"
	execFailed  = "failed"
	execRefused = "refused"
)

// result classifies the run of command that r reports.
func (p *execPolicy) result(command []string, r *v1alpha1.ExecReport) string {
	switch {
	case p.check(command) != nil:
		return execRefused
	case r.ExitStatus == 0:
		return execOK
	default:
		return execFailed
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

// isAbsClean reports whether path is absolute and clean, as allow-list
// entries must be.
func isAbsClean(path string) bool {
	return filepath.IsAbs(path) && filepath.Clean(path) == path
}
