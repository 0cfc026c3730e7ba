// Package cniserver is kos-agent's CNI server: it answers kos-cni's
// requests on a Unix socket, finding each pod's attachment in the agent's
// cache of its node's attachments and plugging a veth pair into the pod in
// place of the attachment's internal port (veth.go makes the pair; the
// switch attaches its host end). What it needs of the agent is the Agent
// interface; of the switch, Ports. server.go serves the socket; add.go,
// del.go and check.go answer the three commands; attachment.go finds a
// request's attachment.
package cniserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"k8s.io/klog/v2"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/cni"
	"github.com/kos-sdn/kos/components/fabric"
	kosclient "github.com/kos-sdn/kos/components/generated/clientset/versioned"
)

// DefaultWait bounds how long an ADD waits for the pod's attachment.
const DefaultWait = 60 * time.Second

// DefaultTotalWait bounds how long all the ADDs of one sandbox wait
// together, from the first: Multus runs them one after the other within
// kubelet's one RunPodSandbox call, which kubelet gives up on after its
// --runtime-request-timeout (2 minutes by default), so that a pod of
// three networks gets an answer from KOS, not from kubelet's timeout.
const DefaultTotalWait = 90 * time.Second

// pollInterval is how often a waiting ADD looks at the cache again.
const pollInterval = 20 * time.Millisecond

// Config configures the CNI server, which plugs pods' interfaces for
// kos-cni.
type Config struct {
	// Socket is the path of the Unix socket to serve kos-cni on, such as
	// cni.DefaultSocket; the agent serves no CNI requests when it is empty.
	Socket string
	// Wait bounds how long an ADD waits for the pod's attachment to exist,
	// have its address and be ready on this node. DefaultWait when zero.
	Wait time.Duration
	// TotalWait bounds how long the ADDs of one sandbox (container ID)
	// wait together, from the first; DefaultTotalWait when zero.
	TotalWait time.Duration
	// HostNetns is the path of the network namespace where the switch's
	// ports live, where the host ends of pods' veth pairs go; the agent's
	// own when empty, as on nodes, where the agent and Open vSwitch share
	// the host's.
	HostNetns string
	// NoChecksumOffload makes pods compute the checksums of what they
	// send, as Open vSwitch's userspace datapath needs (see
	// veth.noChecksumOffload).
	NoChecksumOffload bool
}

// Agent is what the server needs of the node agent: its cache of its
// node's attachments, their readiness, and the use of an attachment's
// place on the switch apart from the agent's syncs and reconciles.
type Agent interface {
	// Healthy returns nil when the agent is ready (CNI STATUS).
	Healthy() error
	// CachedAttachment returns the attachment key (namespace/name) of the
	// agent's node from its cache.
	CachedAttachment(key string) (*v1alpha1.NetworkAttachment, bool)
	// PodAttachments returns the attachments of the agent's node in
	// namespace that the pod-network controller made for pod (by name).
	PodAttachments(namespace, pod string) []*v1alpha1.NetworkAttachment
	// Address returns the address IPAM gave att, if it has a valid one.
	Address(att *v1alpha1.NetworkAttachment) (fabric.LocalAttachment, bool)
	// NotReady returns why att, at address at, is not ready on the
	// agent's node yet (its status and the switch), or "".
	NotReady(att *v1alpha1.NetworkAttachment, at fabric.LocalAttachment) string
	// Hold keeps the agent's syncs and reconciles off the switch's place
	// of at until release is called. notHeld says what the agent holds
	// there instead when that is not attachment key, local.
	Hold(at fabric.LocalAttachment, key string) (release func(), notHeld error)
	// Lost says that the switch may not hold what it should at at, for
	// attachment key, so that the agent's sync of key repairs it. It is
	// called while holding at.
	Lost(at fabric.LocalAttachment, key string)
}

// Ports is what the server changes on the node's switch: the ports of
// local attachments (fabric.Interface has them; the agent passes one that
// measures each operation).
type Ports interface {
	MTU() int
	CreateLocal(ctx context.Context, atts ...fabric.LocalAttachment) error
	DeleteLocal(ctx context.Context, atts ...fabric.LocalAttachment) error
	DeletePorts(ctx context.Context, atts ...fabric.LocalAttachment) error
	PlugLocal(ctx context.Context, plugs ...fabric.Plug) error
	Plugs(ctx context.Context, atts ...fabric.LocalAttachment) ([]fabric.Plug, error)
}

// Server answers kos-cni's requests for one node's agent.
type Server struct {
	cfg    Config
	node   string
	agent  Agent
	ports  Ports
	client kosclient.Interface
	// retry is how often a socket that could not be opened is tried again.
	retry time.Duration
	// observe records the duration of a request by command and outcome.
	observe func(command, outcome string, d time.Duration)
	// sandboxes are the live sandboxes the server plugged, for Replug.
	sandboxes sandboxes
	// budgets are the total waits of sandboxes' ADDs.
	budgets budgets
	// subnets are the prefix lengths of the subnets read.
	subnets *subnets
	// peerUID is the only user whose processes may connect: root, who
	// runs kos-cni.
	peerUID uint32
}

// New returns the CNI server of agent a on node, which reads Subnets with
// client, changes ports, tries a socket that does not open again every
// retry, and tells observe how long each request took.
func New(cfg Config, node string, a Agent, ports Ports, client kosclient.Interface, retry time.Duration, observe func(command, outcome string, d time.Duration)) *Server {
	if cfg.Wait <= 0 {
		cfg.Wait = DefaultWait
	}
	if cfg.TotalWait <= 0 {
		cfg.TotalWait = DefaultTotalWait
	}
	return &Server{cfg: cfg, node: node, agent: a, ports: ports, client: client, retry: retry, observe: observe, subnets: &subnets{client: client}}
}

// Run serves kos-cni's requests on the CNI socket until ctx is done.
// A socket that cannot be opened is tried again every retry period: until
// it opens, kos-cni's ADDs fail ("kos-agent not reachable") and its DELs
// succeed. It returns once the server and every request have stopped.
func (s *Server) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithValues("socket", s.cfg.Socket)
	var l net.Listener
	for {
		var err error
		if l, err = listenUnix(s.cfg.Socket); err == nil {
			break
		}
		logger.Error(err, "Serving CNI requests failed; will retry")
		select {
		case <-ctx.Done():
			return
		case <-time.After(s.retry):
		}
	}
	srv := &http.Server{
		Handler:     http.HandlerFunc(s.handle),
		BaseContext: func(net.Listener) context.Context { return ctx },
		// kos-cni passes the pod's network namespace as a descriptor.
		ConnContext:       cni.NetnsConnContext,
		ReadHeaderTimeout: 10 * time.Second,
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		// Requests get ctx, so those waiting return at once.
		_ = srv.Shutdown(context.Background())
	}()
	logger.Info("Serving CNI requests")
	l = &peerListener{Listener: l, uid: s.peerUID, logger: logger}
	if err := srv.Serve(cni.NetnsListener(l)); !errors.Is(err, http.ErrServerClosed) {
		logger.Error(err, "Serving CNI requests stopped")
	}
	<-done
}

// listenUnix listens on a Unix socket at path, which only root may use,
// replacing the socket a previous agent left. The socket's folder is made
// root's alone (0700): kubelet creates the agent's hostPath folder 0755.
func listenUnix(path string) (net.Listener, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating the folder of %s: %w", path, err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("restricting the folder of %s to root: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("removing the old socket %s: %w", path, err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("restricting %s to root: %w", path, err)
	}
	return l, nil
}

// handle answers one kos-cni request: 200 with the result, if any, or a
// CNI error.
func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	var req cni.Request
	var cniErr *types.Error
	var result *types100.Result
	start := time.Now()
	if r.Method != http.MethodPost || r.URL.Path != cni.RequestPath {
		cniErr = types.NewError(types.ErrInvalidEnvironmentVariables, fmt.Sprintf("kos-agent serves POST %s, not %s %s: kos-cni and kos-agent differ in version", cni.RequestPath, r.Method, r.URL.Path), "")
	} else if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil {
		cniErr = types.NewError(types.ErrDecodingFailure, fmt.Sprintf("decoding the request: %v", err), "")
	} else {
		logger := klog.FromContext(r.Context()).WithValues("command", req.Command, "pod", req.Pod.String(), "containerID", req.ContainerID, "ifname", req.IfName)
		ctx := klog.NewContext(r.Context(), logger)
		result, cniErr = s.request(ctx, &req)
		if cniErr != nil {
			logger.Info("CNI request failed", "duration", time.Since(start), "code", cniErr.Code, "err", cniErr.Msg)
		} else {
			logger.V(2).Info("Served a CNI request", "duration", time.Since(start))
		}
	}
	outcome := "ok"
	if cniErr != nil {
		outcome = "error"
	}
	s.observe(req.Command, outcome, time.Since(start))

	w.Header().Set("Content-Type", "application/json")
	var body any
	switch {
	case cniErr != nil:
		w.WriteHeader(httpStatus(cniErr.Code))
		body = cniErr
	case result != nil:
		body = result
	default:
		return
	}
	// The plugin sees a failed write as an agent that did not answer.
	_ = json.NewEncoder(w).Encode(body)
}

// httpStatus is the HTTP status of a CNI error; kos-cni reads only the
// body, but logs and curl are easier to read with a fitting one.
func httpStatus(code uint) int {
	switch code {
	case types.ErrTryAgainLater, types.ErrPluginNotAvailable:
		return http.StatusServiceUnavailable
	case types.ErrInternal:
		return http.StatusInternalServerError
	}
	return http.StatusBadRequest
}

// request carries out one request.
func (s *Server) request(ctx context.Context, req *cni.Request) (*types100.Result, *types.Error) {
	switch req.Command {
	case cni.CommandAdd:
		return s.add(ctx, req)
	case cni.CommandDel:
		s.del(ctx, req)
		return nil, nil
	case cni.CommandCheck:
		return nil, s.check(ctx, req)
	case cni.CommandGC:
		s.gc(ctx, req)
		return nil, nil
	case cni.CommandStatus:
		if err := s.agent.Healthy(); err != nil {
			return nil, types.NewError(types.ErrPluginNotAvailable, fmt.Sprintf("kos-agent on node %s is not ready: %v", s.node, err), "")
		}
		return nil, nil
	}
	return nil, types.NewError(types.ErrInvalidEnvironmentVariables, fmt.Sprintf("unknown CNI command %q", req.Command), "")
}

// cniError returns a CNI error with a formatted message.
func cniError(code uint, format string, args ...any) *types.Error {
	return types.NewError(code, fmt.Sprintf(format, args...), "")
}
