package testenv

import (
	"errors"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"

	"github.com/kos-sdn/kos/tools/spawner"
)

// process is one process the environment started. The fields are what the
// state file remembers, so that Attach can find the process again from
// another program.
type process struct {
	*spawner.Process
	URL     string `json:"url"`
	PeerURL string `json:"peerURL,omitempty"`
}

// startProcess starts binary with args, its output going to DIR/<name>.log
// and its pid to DIR/<name>.pid. An owned process is killed when this program
// dies; a detached one runs in its own session and outlives it.
func startProcess(dir, name, binary string, args []string, detach bool) (*process, error) {
	p, err := spawner.Run(spawner.Options{Name: name, Dir: dir, Binary: binary, Args: args, PIDFile: true, Detach: detach})
	if err != nil {
		return nil, err
	}
	return &process{Process: p}, nil
}

// ports hands out free TCP ports on 127.0.0.1 below 32768, where Linux's
// ephemeral range starts, so that no outgoing connection can take a port
// between picking and binding it.
type ports struct {
	taken map[int]bool
}

// pick returns preferred when it is free (so that a restarted environment
// keeps its addresses), else a random free port.
func (ps *ports) pick(preferred int) (int, error) {
	if ps.taken == nil {
		ps.taken = map[int]bool{}
	}
	if preferred > 0 && !ps.taken[preferred] && portFree(preferred) {
		ps.taken[preferred] = true
		return preferred, nil
	}
	for range 200 {
		port := 10000 + rand.IntN(32768-10000)
		if !ps.taken[port] && portFree(port) {
			ps.taken[port] = true
			return port, nil
		}
	}
	return 0, errors.New("no free port on 127.0.0.1 between 10000 and 32767")
}

func portFree(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// urlPort returns the port of a URL such as http://127.0.0.1:2379, or 0.
func urlPort(u string) int {
	i := strings.LastIndexByte(u, ':')
	if i < 0 {
		return 0
	}
	port, err := strconv.Atoi(strings.TrimRight(u[i+1:], "/"))
	if err != nil {
		return 0
	}
	return port
}
