package testenv

// This file keeps the environment's processes: it tracks and stops them,
// and writes the state file in Dir from which Attach finds them again.

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/kos-sdn/kos/tools/spawner"
)

// stateFile names the file in Dir from which Attach finds an environment.
const stateFile = "env.json"

// envState is what the state file holds.
type envState struct {
	Version      string     `json:"version"`
	APIServerURL string     `json:"apiServerURL"`
	EtcdURL      string     `json:"etcdURL"`
	BinDir       string     `json:"binDir"`
	Detached     bool       `json:"detached"`
	Processes    []*process `json:"processes"`
	Address      netip.Addr `json:"address,omitzero"`
	Kubelets     bool       `json:"kubelets,omitempty"`
}

// running reports whether the process of that name runs.
func (e *Env) running(name string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, p := range e.procs {
		if p.Name == name {
			return p.Running()
		}
	}
	return false
}

// track adds a started process to the environment and records it in the
// state file at once, so that a detached process whose starter is killed
// half-way can still be found and stopped.
func (e *Env) track(p *process) error {
	e.procs = append(e.procs, p)
	return e.saveState()
}

// stopLast stops the most recently started process after a failed start.
func (e *Env) stopLast() error {
	if len(e.procs) == 0 {
		return nil
	}
	p := e.procs[len(e.procs)-1]
	e.procs = e.procs[:len(e.procs)-1]
	return p.Stop(stopGrace)
}

// stopGrace is how long a process has to exit on SIGTERM before SIGKILL.
const stopGrace = 5 * time.Second

// Stop stops every process of the environment, kube-apiserver before the
// etcds it writes to, and removes Dir when Start made it. Calling it again
// does nothing.
func (e *Env) Stop() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped {
		return nil
	}
	e.stopped = true
	if err := e.stopProcesses(); err != nil {
		return err
	}
	if e.removeDir {
		if err := os.RemoveAll(e.Dir); err != nil {
			return fmt.Errorf("removing the working folder: %w", err)
		}
	}
	return nil
}

func (e *Env) stopProcesses() error {
	// kube-apiserver's clients, then kube-apiserver, and the etcds it
	// writes to last.
	var errs []error
	first := []string{KubeScheduler, KubeControllerManager, apiServerName}
	for _, name := range first {
		for _, p := range e.procs {
			if p.Name == name {
				errs = append(errs, p.Stop(stopGrace))
			}
		}
	}
	var etcds []*process
	for _, p := range e.procs {
		if !slices.Contains(first, p.Name) {
			etcds = append(etcds, p)
		}
	}
	var wg sync.WaitGroup
	etcdErrs := make([]error, len(etcds))
	for i, p := range etcds {
		wg.Go(func() { etcdErrs[i] = p.Stop(stopGrace) })
	}
	wg.Wait()
	errs = append(errs, etcdErrs...)
	return errors.Join(errs...)
}

// ProcessStatus describes one process of an environment.
type ProcessStatus struct {
	// Name is the process's name, such as etcd or kube-apiserver.
	Name string
	// PID is its process id.
	PID int
	// URL is where it serves.
	URL string
	// LogFile is the path of its log.
	LogFile string
	// Running says whether it is alive.
	Running bool
}

// Processes describes the processes of the environment, in start order.
func (e *Env) Processes() []ProcessStatus {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]ProcessStatus, 0, len(e.procs))
	for _, p := range e.procs {
		out = append(out, ProcessStatus{Name: p.Name, PID: p.PID, URL: p.URL, LogFile: p.LogFile, Running: p.Running()})
	}
	return out
}

// Attach returns the environment an earlier Start left in dir, typically a
// detached one, so that another program can inspect or stop it. Its
// processes may have stopped since: see Processes. It fails with an error
// matching os.ErrNotExist when dir holds no environment.
func Attach(dir string) (*Env, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("resolving %s: %w", dir, err)
	}
	st, err := readState(abs)
	if err != nil {
		return nil, err
	}
	e := &Env{
		Dir:          abs,
		Version:      st.Version,
		APIServerURL: st.APIServerURL,
		EtcdURL:      st.EtcdURL,
		BinDir:       st.BinDir,
		procs:        st.Processes,
		address:      st.Address,
		kubelets:     st.Kubelets,
		detached:     st.Detached,
		timeout:      2 * time.Minute,
		progress:     io.Discard,
	}
	e.setFiles()
	if e.RESTConfig, err = loadRESTConfig(e.Kubeconfig); err != nil {
		return nil, err
	}
	return e, nil
}

func readState(dir string) (*envState, error) {
	var st envState
	if err := spawner.ReadState(filepath.Join(dir, stateFile), &st); err != nil {
		return nil, fmt.Errorf("reading the environment state: %w", err)
	}
	return &st, nil
}

func (e *Env) saveState() error {
	err := spawner.WriteState(filepath.Join(e.Dir, stateFile), envState{
		Version:      e.Version,
		APIServerURL: e.APIServerURL,
		EtcdURL:      e.EtcdURL,
		BinDir:       e.BinDir,
		Detached:     e.detached,
		Processes:    e.procs,
		Address:      e.address,
		Kubelets:     e.kubelets,
	})
	if err != nil {
		return fmt.Errorf("writing the environment state: %w", err)
	}
	return nil
}

// process returns the process of that name from an earlier start, or nil.
func (st *envState) process(name string) *process {
	if st == nil {
		return nil
	}
	for _, p := range st.Processes {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// port returns the client (or peer) port an earlier start used, or 0.
func (p *process) port(peer bool) int {
	switch {
	case p == nil:
		return 0
	case peer:
		return urlPort(p.PeerURL)
	default:
		return urlPort(p.URL)
	}
}
