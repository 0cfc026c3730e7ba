package ovsenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/kos-sdn/kos/tools/lane"
	"github.com/kos-sdn/kos/tools/spawner"
)

// netnsDir is where ip-netns keeps named network namespaces.
const netnsDir = "/run/netns"

// netnsSeq numbers the namespaces this program names itself.
var netnsSeq atomic.Int64

// ownedName matches the names this package gives the namespaces and folders
// that belong to a process: ovsenv-<pid>-<suffix>. Those of a detached
// instance are named ovsenv-d<pid>-<suffix> and never match, so sweeping
// leaves them alone.
var ownedNamePattern = regexp.MustCompile(`^ovsenv-([0-9]+)-[0-9]+$`)

// ownedName is the start of the names of what this process creates.
func ownedName(detach bool) string {
	if detach {
		return fmt.Sprintf("ovsenv-d%d", os.Getpid())
	}
	return fmt.Sprintf("ovsenv-%d", os.Getpid())
}

// ownerGone reports whether name is owned by a process that no longer runs.
func ownerGone(name string) bool {
	m := ownedNamePattern.FindStringSubmatch(name)
	if m == nil {
		return false
	}
	pid, err := strconv.Atoi(m[1])
	return err == nil && !spawner.Alive(pid, "")
}

// Netns is a named network namespace (as ip-netns makes them).
type Netns struct {
	// Name is the namespace's name under /run/netns.
	Name string
}

// NewNetns creates a network namespace with its loopback interface up.
// When name is empty it makes one up that no other process uses, and first
// deletes the namespaces such names left behind by processes that died
// before they could clean up.
func NewNetns(ctx context.Context, name string) (*Netns, error) {
	return newNetns(ctx, name, false)
}

func newNetns(ctx context.Context, name string, detach bool) (*Netns, error) {
	if err := lane.Require(lane.Integration, "network namespace"); err != nil {
		return nil, err
	}
	if name == "" {
		sweepNetns(ctx)
		name = fmt.Sprintf("%s-%d", ownedName(detach), netnsSeq.Add(1))
	}
	if _, err := run(exec.CommandContext(ctx, "ip", "netns", "add", name)); err != nil {
		return nil, fmt.Errorf("creating network namespace: %w", err)
	}
	n := &Netns{Name: name}
	if _, err := n.Run(ctx, "ip", "link", "set", "lo", "up"); err != nil {
		_ = n.Delete()
		return nil, err
	}
	return n, nil
}

// sweepNetns deletes the namespaces named for processes that no longer run.
// Errors are ignored: another process may be sweeping the same ones.
func sweepNetns(ctx context.Context) {
	entries, err := os.ReadDir(netnsDir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if ownerGone(e.Name()) {
			_ = exec.CommandContext(ctx, "ip", "netns", "delete", e.Name()).Run()
		}
	}
}

// Delete deletes the namespace and with it every interface inside it. The
// namespace lives on, unnamed, while processes still run in it.
func (n *Netns) Delete() error {
	if _, err := run(exec.Command("ip", "netns", "delete", n.Name)); err != nil {
		if _, statErr := os.Stat(filepath.Join(netnsDir, n.Name)); errors.Is(statErr, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("deleting network namespace: %w", err)
	}
	return nil
}

// Command returns a command that runs name with args inside the namespace.
func (n *Netns) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.Name, name}, args...)...)
}

// Run runs name with args inside the namespace and returns its standard
// output, trimmed; the error holds its standard error.
func (n *Netns) Run(ctx context.Context, name string, args ...string) (string, error) {
	return run(n.Command(ctx, name, args...))
}

// Do calls fn on a thread that is inside the namespace. Sockets that fn
// opens belong to the namespace and stay there after Do returns. The thread
// never serves another goroutine: it exits with the one Do starts.
func (n *Netns) Do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		// Deliberately never unlocked: the runtime ends the thread when
		// this goroutine returns, so no other goroutine runs in the
		// namespace by accident.
		runtime.LockOSThread()
		f, err := os.Open(filepath.Join(netnsDir, n.Name))
		if err != nil {
			errc <- fmt.Errorf("opening network namespace %s: %w", n.Name, err)
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("entering network namespace %s: %w", n.Name, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// AddVethPair creates a veth pair with end aName in namespace a and end
// bName in namespace b, both down.
func AddVethPair(ctx context.Context, a *Netns, aName string, b *Netns, bName string) error {
	cmd := exec.CommandContext(ctx, "ip", "link", "add", aName, "netns", a.Name, "type", "veth", "peer", "name", bName, "netns", b.Name)
	if _, err := run(cmd); err != nil {
		return fmt.Errorf("creating veth pair %s/%s: %w", aName, bName, err)
	}
	return nil
}

// run runs cmd and returns its standard output, trimmed. A failure's error
// names the command and holds what it said on standard error.
func run(cmd *exec.Cmd) (string, error) {
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := strings.Join(cmd.Args, " ")
		if said := strings.TrimSpace(stderr.String()); said != "" {
			msg += " (" + said + ")"
		}
		return "", fmt.Errorf("%s: %w", msg, err)
	}
	return strings.TrimSpace(string(out)), nil
}
