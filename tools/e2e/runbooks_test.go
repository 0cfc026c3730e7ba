package e2e

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/kos-sdn/kos/tools/docrun"
	"github.com/kos-sdn/kos/tools/testenv"
)

// The runbooks of docs/ that the cluster tests run as they are written: the
// blocks marked sh run under a heading (tools/docrun), run from the
// repository's root with the admin kubeconfig and the channels command on
// the PATH. make verify fails when a marked block runs in no test.

// runbook returns the blocks to run of the section of a page of the docs
// under heading (docrun.Section).
func (s *standard) runbook(t *testing.T, file, heading string) []docrun.Block {
	t.Helper()
	blocks, err := docrun.Section(file, heading)
	if err != nil {
		t.Fatal(err)
	}
	return blocks
}

// runDoc runs blocks of the docs as an operator pastes them into bash
// (docrun.Runner), from the repository's root, with the admin kubeconfig,
// the channels command on the PATH and vars for the page's documented
// variables, failing the test when a command fails.
func (s *standard) runDoc(t *testing.T, blocks ...docrun.Block) {
	t.Helper()
	s.runDocVars(t, nil, blocks...)
}

// runDocVars is runDoc with the page's documented variables given vars'
// values (docrun.Runner.Vars); it returns the blocks' output.
func (s *standard) runDocVars(t *testing.T, vars map[string]string, blocks ...docrun.Block) string {
	t.Helper()
	channels := testenv.Build(t, "cmd/channels")
	r := &docrun.Runner{
		Dir:  s.root,
		Env:  []string{"KUBECONFIG=" + s.env.Kubeconfig, "PATH=" + filepath.Dir(channels) + ":" + os.Getenv("PATH")},
		Vars: vars,
		Logf: t.Logf,
	}
	out, err := r.Run(t.Context(), blocks...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
