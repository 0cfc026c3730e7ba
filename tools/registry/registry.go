// Package registry runs a real OCI registry for tests and the demo: Debian's
// docker-registry (the distribution registry 2.8), storing its blobs in a
// folder, serving plain http on an address the caller chooses. Nodes of a
// tools/cluster pull from it; tools/kosimages pushes to it.
//
// A registry started with Options.Detach outlives the program that started
// it (as `localenv up` leaves a cluster running); its address and process
// are recorded in its folder, where Attach finds them again so that a later
// program can use or stop it.
//
// It is not a registry for anything but tests: no TLS, no authentication,
// listening only where the caller says (loopback, or an address inside
// namespaces a test made).
package registry

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kos-sdn/kos/tools/lane"
	"github.com/kos-sdn/kos/tools/spawner"
)

// Binary is the program Start runs; tools/deps.sh installs its package.
const Binary = "docker-registry"

// startTimeout bounds the wait for GET /v2/; the registry answers in well
// under a second.
const startTimeout = 30 * time.Second

// Options say where a registry keeps its files and listens.
type Options struct {
	// Dir holds the registry's config (config.yml), its storage (data/) and
	// its log (docker-registry.log). It is created when missing.
	Dir string
	// Address is an IP, or IP:port, to listen on. Without a port, or with
	// port 0, Start picks a free one below 32768 (where Linux's ephemeral
	// range starts, so that no outgoing connection takes it meanwhile).
	// "" means 127.0.0.1.
	Address string
	// Detach lets the registry outlive this program: it runs in a session
	// of its own instead of dying with its parent, and Attach finds it
	// again from Dir. Either way Dir/registry.json records it.
	Detach bool
}

// Registry is a running registry. Unless started with Options.Detach it
// dies with the program that started it (parent-death signal); it stops on
// Stop.
type Registry struct {
	host string
	dir  string
	proc *spawner.Process
}

// stateFile names the file in Dir that records a started registry, for
// Attach.
const stateFile = "registry.json"

// state is what the state file holds.
type state struct {
	Host     string           `json:"host"`
	Detached bool             `json:"detached"`
	Process  *spawner.Process `json:"process"`
}

// Start writes the registry's config into opts.Dir, starts docker-registry
// and waits until GET /v2/ answers.
func Start(ctx context.Context, opts Options) (*Registry, error) {
	if err := lane.Require(lane.Integration, "registry"); err != nil {
		return nil, err
	}
	binary, err := exec.LookPath(Binary)
	if err != nil {
		return nil, fmt.Errorf("finding %s (install Debian's docker-registry package, tools/deps.sh does): %w", Binary, err)
	}
	ip, port, err := splitAddress(opts.Address)
	if err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("resolving %s: %w", opts.Dir, err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
		return nil, fmt.Errorf("creating the registry's folder: %w", err)
	}
	if prev, err := Attach(dir); err == nil && prev.Running() {
		return nil, fmt.Errorf("the registry of an earlier start still runs in %s (pid %d, %s): stop it first", dir, prev.PID(), prev.Host())
	}
	// A port found free may be taken before the registry binds it: try
	// another, unless the caller chose it.
	for attempt := 1; ; attempt++ {
		p := port
		if p == 0 {
			if p, err = freePort(ip); err != nil {
				return nil, err
			}
		}
		r, err := start(ctx, binary, dir, net.JoinHostPort(ip, strconv.Itoa(p)), opts.Detach)
		if err == nil {
			return r, nil
		}
		if attempt == 3 || port != 0 || r == nil || !addressTaken(r.proc) {
			return nil, err
		}
	}
}

// StartT starts a registry for test t in a folder of t's and stops it when
// t ends; it fails t when the registry cannot start.
func StartT(t testing.TB, opts Options) *Registry {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	r, err := Start(t.Context(), opts)
	if err != nil {
		t.Fatalf("starting a registry: %v", err)
	}
	t.Cleanup(func() {
		if err := r.Stop(); err != nil {
			t.Errorf("stopping the registry: %v", err)
		}
	})
	return r
}

// start runs the registry on addr, records it and waits for it. On failure
// it returns the registry too, stopped, so that the caller can tell why.
func start(ctx context.Context, binary, dir, addr string, detach bool) (*Registry, error) {
	config := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(config, configFile(filepath.Join(dir, "data"), addr), 0o644); err != nil {
		return nil, fmt.Errorf("writing the registry's config: %w", err)
	}
	proc, err := spawner.Run(spawner.Options{
		Name:   "docker-registry",
		Dir:    dir,
		Binary: binary,
		Args:   []string{"serve", config},
		Detach: detach,
	})
	if err != nil {
		return nil, err
	}
	r := &Registry{host: addr, dir: dir, proc: proc}
	// Recorded before the wait, so that a starter killed while waiting
	// leaves a detached registry that Attach can still find and stop.
	if err := writeState(dir, &state{Host: addr, Detached: detach, Process: proc}); err != nil {
		_ = proc.Stop(0)
		return nil, err
	}
	if err := proc.WaitReady(ctx, startTimeout, r.answers); err != nil {
		_ = proc.Stop(0)
		return r, err
	}
	return r, nil
}

// Attach returns the registry that Start recorded in dir, running or not
// (see Running), typically a detached one that another program started.
// It fails with an error matching os.ErrNotExist when dir records none.
func Attach(dir string) (*Registry, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("resolving %s: %w", dir, err)
	}
	var st state
	if err := spawner.ReadState(filepath.Join(dir, stateFile), &st); err != nil {
		return nil, fmt.Errorf("reading the registry's state: %w", err)
	}
	if st.Process == nil || st.Process.PID <= 0 || st.Host == "" {
		return nil, fmt.Errorf("%s records no registry process", filepath.Join(dir, stateFile))
	}
	return &Registry{host: st.Host, dir: dir, proc: st.Process}, nil
}

// writeState records a started registry in dir (spawner.WriteState: Attach
// never reads half of it).
func writeState(dir string, st *state) error {
	if err := spawner.WriteState(filepath.Join(dir, stateFile), st); err != nil {
		return fmt.Errorf("writing the registry's state: %w", err)
	}
	return nil
}

// configFile is the registry's config: filesystem storage, deletes allowed
// (so tests can clean up), plain http on addr, no authentication.
func configFile(root, addr string) []byte {
	return []byte(`version: 0.1
log:
  level: info
  fields:
    service: registry
storage:
  filesystem:
    rootdirectory: ` + strconv.Quote(root) + `
  delete:
    enabled: true
  cache:
    blobdescriptor: inmemory
http:
  addr: ` + strconv.Quote(addr) + `
  headers:
    X-Content-Type-Options: [nosniff]
`)
}

// answers reports whether GET /v2/ answers 200.
func (r *Registry) answers(ctx context.Context) error {
	url := "http://" + r.host + "/v2/"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("building the readiness request: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

// Host is where the registry listens, "ip:port": the registry part of an
// image reference.
func (r *Registry) Host() string { return r.host }

// Dir is the registry's folder (config, storage, log).
func (r *Registry) Dir() string { return r.dir }

// LogFile is the registry's log, which records every request.
func (r *Registry) LogFile() string { return r.proc.LogFile }

// PID is the registry process's id.
func (r *Registry) PID() int { return r.proc.PID }

// Running reports whether the registry's process is alive.
func (r *Registry) Running() bool { return r.proc.Running() }

// Stop stops the registry, whichever program started it, and returns once
// it is gone; stopping a stopped one does nothing. Its storage and its
// state file stay in Dir (Attach then finds it stopped).
func (r *Registry) Stop() error {
	return r.proc.Stop(5 * time.Second)
}

// splitAddress reads Options.Address: an IP with an optional port.
func splitAddress(address string) (string, int, error) {
	if address == "" {
		return "127.0.0.1", 0, nil
	}
	host, portText, err := net.SplitHostPort(address)
	if err != nil {
		// No port: the whole address is the IP.
		host, portText = strings.Trim(address, "[]"), "0"
	}
	if net.ParseIP(host) == nil {
		return "", 0, fmt.Errorf("registry address %q: %q is not an IP address", address, host)
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("registry address %q: bad port %q", address, portText)
	}
	return host, port, nil
}

// freePort returns a random port below 32768 that is free on ip.
func freePort(ip string) (int, error) {
	for range 200 {
		port := 10000 + rand.IntN(32768-10000)
		l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
		if err != nil {
			if isAddressUnavailable(err) {
				return 0, fmt.Errorf("cannot listen on %s: %w", ip, err)
			}
			continue
		}
		_ = l.Close()
		return port, nil
	}
	return 0, fmt.Errorf("no free port on %s between 10000 and 32767", ip)
}

// isAddressUnavailable tells an IP this host does not have from a busy port.
func isAddressUnavailable(err error) bool {
	return errors.Is(err, syscall.EADDRNOTAVAIL)
}

// addressTaken reports whether the registry died because its port was
// taken between picking and binding it.
func addressTaken(p *spawner.Process) bool {
	return !p.Running() && strings.Contains(p.LogTail(30), "address already in use")
}
