package cluster

// This file keeps the cluster's processes and the state file in Dir from
// which Attach finds the cluster again.

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/kos-sdn/kos/tools/ovsenv"
	"github.com/kos-sdn/kos/tools/registry"
	"github.com/kos-sdn/kos/tools/spawner"
	"github.com/kos-sdn/kos/tools/testenv"
)

// process is one process of a node. The fields are what the state file
// remembers.
type process struct {
	*spawner.Process
	URL string `json:"url"`
	// Node names the node the process belongs to; "" for none.
	Node string `json:"node,omitempty"`
}

// stateFile names the file in Dir from which Attach finds the nodes, beside
// the control plane's own.
const stateFile = "cluster.json"

// clusterState is what the state file holds.
type clusterState struct {
	Nodes     []*nodeState `json:"nodes"`
	Processes []*process   `json:"processes"`
	KubeProxy bool         `json:"kubeProxy,omitempty"`
	// Multus is the Multus binary the nodes run, or "".
	Multus string `json:"multus,omitempty"`
	// Registry is the host:port of the cluster's registry, whose own
	// state is in the folder registryDir; "" when it has none.
	Registry string `json:"registry,omitempty"`
}

// track adds a started process to the cluster and records it in the state
// file at once, so that a detached process whose starter is killed half-way
// can still be found and stopped.
// A process started again, as when a node starts again, takes the place of
// the one before.
func (c *Cluster) track(p *process) error {
	for i, q := range c.procs {
		if q.Node == p.Node && q.Name == p.Name {
			c.procs[i] = p
			return c.saveState()
		}
	}
	c.procs = append(c.procs, p)
	return c.saveState()
}

// proc returns the process of that name of the node, or nil.
func (c *Cluster) proc(node, name string) *process {
	for _, p := range c.procs {
		if p.Node == node && p.Name == name {
			return p
		}
	}
	return nil
}

// Processes describes the processes of the cluster: the control plane's,
// the registry, then the nodes', each in start order.
func (c *Cluster) Processes() []testenv.ProcessStatus {
	out := c.Env.Processes()
	c.mu.Lock()
	defer c.mu.Unlock()
	if r := c.registry; r != nil {
		out = append(out, testenv.ProcessStatus{Name: registry.Binary, PID: r.PID(), URL: "http://" + r.Host(), LogFile: r.LogFile(), Running: r.Running()})
	}
	for _, p := range c.procs {
		name := p.Name
		if len(c.nodes) > 1 && p.Node != "" {
			name = p.Node + "/" + p.Name
		}
		out = append(out, testenv.ProcessStatus{Name: name, PID: p.PID, URL: p.URL, LogFile: p.LogFile, Running: p.Running()})
	}
	return out
}

// Attach returns the cluster an earlier Start left in dir, typically a
// detached one, so that another program can inspect or stop it. A control
// plane that tools/testenv started alone is a cluster without nodes. It
// fails with an error matching os.ErrNotExist when dir holds no control
// plane.
func Attach(dir string) (*Cluster, error) {
	env, err := testenv.Attach(dir)
	if err != nil {
		return nil, err
	}
	c := &Cluster{Env: env, timeout: 2 * time.Minute, progress: io.Discard, detached: true, ovs: map[string]*ovsenv.Instance{}}
	st, err := readState(env.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return nil, err
	}
	c.nodes, c.procs, c.proxy, c.multus = st.Nodes, st.Processes, st.KubeProxy, st.Multus
	if st.Registry != "" {
		if c.registry, err = registry.Attach(filepath.Join(env.Dir, registryDir)); err != nil {
			return nil, fmt.Errorf("finding the cluster's registry: %w", err)
		}
		c.Registry = c.registry.Host()
	}
	for _, n := range c.nodes {
		c.Nodes = append(c.Nodes, n.public())
	}
	// A state file from before processes named their node: one node.
	for _, p := range c.procs {
		if p.Node == "" && len(c.nodes) == 1 && p.Name != "" {
			p.Node = c.nodes[0].Name
		}
	}
	return c, nil
}

func readState(dir string) (*clusterState, error) {
	var st clusterState
	if err := spawner.ReadState(filepath.Join(dir, stateFile), &st); err != nil {
		return nil, fmt.Errorf("reading the cluster state: %w", err)
	}
	return &st, nil
}

func (c *Cluster) state() *clusterState {
	return &clusterState{Nodes: c.nodes, Processes: c.procs, KubeProxy: c.proxy, Multus: c.multus, Registry: c.Registry}
}

func (c *Cluster) saveState() error {
	return writeState(c.Dir, c.state())
}

func writeState(dir string, st *clusterState) error {
	if err := spawner.WriteState(filepath.Join(dir, stateFile), st); err != nil {
		return fmt.Errorf("writing the cluster state: %w", err)
	}
	return nil
}
