package debugserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"time"

	"k8s.io/klog/v2"

	"github.com/kos-sdn/kos/components/agent/api"
	"github.com/kos-sdn/kos/components/fabric"
	"github.com/kos-sdn/kos/components/fabric/ovs"
)

// Limits of the debug endpoints.
const (
	// requestTimeout bounds the switch commands of one request.
	requestTimeout = 20 * time.Second
	// switchCommands is how many requests may run switch commands at once;
	// more wait their turn, so that a loop of requests costs the node one
	// or two processes at a time.
	switchCommands = 2
	// maxTraceRequest bounds the body of a trace request, and of a probe
	// request.
	maxTraceRequest = 4 << 10
)

// Agent is what the endpoints read of the node agent.
type Agent interface {
	// Status returns what /debug/status reports.
	Status(ctx context.Context) api.Status
	// LocalAttachment returns the attachment namespace/name of the
	// agent's node, for a trace from it. Its error wraps ErrNotLocal or
	// ErrNoAddress when that is why there is none.
	LocalAttachment(namespace, name string) (fabric.LocalAttachment, error)
	// NetworkPolicy returns the policy of network vni that the agent
	// set on the switch, one without policies when it set none, for a
	// trace to name the policies that allowed or dropped its packet.
	NetworkPolicy(vni uint32) fabric.NetworkPolicy
}

// Errors of Agent.LocalAttachment that say whose the problem is.
var (
	// ErrNotLocal is of an attachment that is not on the agent's node.
	ErrNotLocal = errors.New("not on node")
	// ErrNoAddress is of an attachment without its address yet.
	ErrNoAddress = errors.New("no address yet")
)

// Errors of a Prober that say whose the problem is.
var (
	// ErrNotProbeable is of an attachment that may not have a probe: one
	// without the check label (api.ProbeLabel), or a pod's, whose interface
	// is the pod's.
	ErrNotProbeable = errors.New("not probeable")
	// ErrNotReady is of an attachment whose interface is not ready.
	ErrNotReady = errors.New("not ready")
)

// Prober puts connectivity probes on local attachments (package probe).
// Its errors wrap ErrNotLocal, ErrNotProbeable, ErrNotReady or
// probe.ErrNoProbe when that is why it failed.
type Prober interface {
	StartProbe(ctx context.Context, req api.ProbeRequest) error
	CheckProbe(ctx context.Context, req api.ProbeCheckRequest) (api.ProbeCheckResult, error)
	StopProbe(ctx context.Context, req api.ProbeRequest) error
}

// Switch is a node's switch that can be read for people; fabric/ovs is one.
type Switch interface {
	DumpFlows(ctx context.Context) (string, error)
	Tunnels(ctx context.Context) (string, error)
	Routes(ctx context.Context) (string, error)
	Trace(ctx context.Context, p ovs.Packet) (string, error)
}

var _ Switch = (*ovs.Fabric)(nil)

// Handler returns the handler of the debug endpoints of agent a, whose
// switch is sw and whose probes p makes; sw is nil for a fabric without a
// switch (fabric/logging), whose switch endpoints then fail, and p nil for
// an agent without probes, whose probe paths then answer 404 as those of
// agents before probes. It checks no identity: Server does.
func Handler(a Agent, sw Switch, p Prober) http.Handler {
	slots := make(chan struct{}, switchCommands)
	// withSlot runs f with a slot, bounded in time, or fails when the
	// request ends first.
	withSlot := func(w http.ResponseWriter, r *http.Request, f func(ctx context.Context)) {
		select {
		case slots <- struct{}{}:
		case <-r.Context().Done():
			http.Error(w, "the request ended while waiting for other debug requests", http.StatusServiceUnavailable)
			return
		}
		defer func() { <-slots }()
		ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
		defer cancel()
		f(ctx)
	}
	text := func(read func(context.Context) (string, error)) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			withSlot(w, r, func(ctx context.Context) {
				out, err := read(ctx)
				if err != nil {
					http.Error(w, err.Error(), http.StatusInternalServerError)
					return
				}
				w.Header().Set("Content-Type", "text/plain; charset=utf-8")
				fmt.Fprint(w, out)
			})
		}
	}
	noSwitch := func(context.Context) (string, error) {
		return "", errors.New("the agent's fabric has no switch to read")
	}
	flows, tunnels, ovsRoutes := noSwitch, noSwitch, noSwitch
	if sw != nil {
		flows, tunnels, ovsRoutes = sw.DumpFlows, sw.Tunnels, sw.Routes
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET "+api.PathStatus, func(w http.ResponseWriter, r *http.Request) {
		withSlot(w, r, func(ctx context.Context) {
			w.Header().Set("Content-Type", "application/json")
			if err := json.NewEncoder(w).Encode(a.Status(ctx)); err != nil {
				klog.FromContext(ctx).V(2).Info("Writing the status failed", "err", err)
			}
		})
	})
	mux.HandleFunc("GET "+api.PathFlows, text(flows))
	mux.HandleFunc("GET "+api.PathTunnels, text(tunnels))
	mux.HandleFunc("GET "+api.PathRoutes, text(func(ctx context.Context) (string, error) {
		node, err := nodeRoutes()
		if err != nil {
			return "", err
		}
		switchRoutes, err := ovsRoutes(ctx)
		if err != nil {
			switchRoutes = fmt.Sprintf("(%v)\n", err)
		}
		return "# the node's IPv4 routes\n" + node + "\n# ovs-appctl ovs/route/show\n" + switchRoutes, nil
	}))
	mux.HandleFunc("POST "+api.PathTrace, func(w http.ResponseWriter, r *http.Request) {
		if sw == nil {
			http.Error(w, "the agent's fabric has no switch to trace", http.StatusNotImplemented)
			return
		}
		p, code, err := tracePacket(a, http.MaxBytesReader(w, r.Body, maxTraceRequest))
		if err != nil {
			http.Error(w, err.Error(), code)
			return
		}
		withSlot(w, r, func(ctx context.Context) {
			out, err := sw.Trace(ctx, p)
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			out += ovs.ExplainPolicy(out, p, a.NetworkPolicy(p.From.VNI))
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			fmt.Fprint(w, out)
		})
	})
	if p != nil {
		handleProbes(mux, p, withSlot)
	}
	return mux
}

// tracePacket decodes and checks a trace request and returns its packet,
// or an error with the HTTP status that says whose it is.
func tracePacket(a Agent, body io.Reader) (ovs.Packet, int, error) {
	var req api.TraceRequest
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return ovs.Packet{}, http.StatusBadRequest, fmt.Errorf("decoding the trace request: %w", err)
	}
	if err := req.Validate(); err != nil {
		return ovs.Packet{}, http.StatusBadRequest, err
	}
	from, err := a.LocalAttachment(req.Namespace, req.Name)
	switch {
	case errors.Is(err, ErrNotLocal):
		return ovs.Packet{}, http.StatusNotFound, err
	case errors.Is(err, ErrNoAddress):
		return ovs.Packet{}, http.StatusConflict, err
	case err != nil:
		return ovs.Packet{}, http.StatusInternalServerError, err
	}
	protocol := req.Protocol
	if protocol == "" {
		protocol = api.ProtocolICMP
	}
	return ovs.Packet{
		From:     from,
		To:       netip.MustParseAddr(req.To), // Validate parsed it
		Protocol: protocol,
		Port:     req.Port,
	}, http.StatusOK, nil
}
