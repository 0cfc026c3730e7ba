package channels

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kos-sdn/kos/tools/testenv"
)

// kopsVersion is the kOps release whose channels command the interop tests
// run: tools/kops/go.mod pins it. The Go module proxy here serves v1.32.0 but
// refuses v1.33 and later; v1.32.0's channels has the same apply, prune,
// record and managed-fields code as later releases.
const kopsVersion = "v1.32.0"

// kopsChannels returns kOps's own channels command, built from the Go module
// proxy by tools/kops/build.sh (cached in .cache/kops/<version>/), or taken
// from $KOS_KOPS_BIN_DIR when tools/test.sh built it already.
func kopsChannels(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("KOS_KOPS_BIN_DIR")
	if dir == "" {
		root, err := testenv.RepoRoot()
		if err != nil {
			t.Fatal(err)
		}
		var stderr bytes.Buffer
		cmd := exec.Command(filepath.Join(root, "tools", "kops", "build.sh"))
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("building kOps channels %s with tools/kops/build.sh: %v\n%s", kopsVersion, err, stderr.String())
		}
		dir = strings.TrimSpace(string(out))
	}
	if !strings.Contains(dir, kopsVersion) {
		t.Fatalf("kOps channels in %s is not %s: update kopsVersion with tools/kops/go.mod", dir, kopsVersion)
	}
	bin := filepath.Join(dir, "channels")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("kOps channels: %v", err)
	}
	return bin
}

// tool is one channels command run against one cluster.
type tool struct {
	name       string
	bin        string
	kubeconfig string
	home       string
}

// run runs the command with args and returns its output (stdout, then
// stderr) and exit code. kOps's channels reads the cluster from KUBECONFIG;
// ours is given --kubeconfig too. HOME is a folder of the test, so that no
// discovery cache is shared with the user's.
func (tl tool) run(t *testing.T, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if tl.name == "ours" {
		args = append(args, "--kubeconfig", tl.kubeconfig)
	}
	cmd := exec.CommandContext(ctx, tl.bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+tl.kubeconfig, "HOME="+tl.home)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("%s channels %s: %v", tl.name, strings.Join(args, " "), err)
		}
		code = ee.ExitCode()
	}
	return stdout.String() + stderr.String(), code
}

// mustRun runs the command and fails the test unless it exits 0.
func (tl tool) mustRun(t *testing.T, args ...string) string {
	t.Helper()
	out, code := tl.run(t, args...)
	if code != 0 {
		t.Fatalf("%s channels %s: exit %d:\n%s", tl.name, strings.Join(args, " "), code, out)
	}
	return out
}
