package agent

// This file serves the agent's debug endpoints (agent/api), which `kubectl
// kos` reads through the kube-apiserver's pod proxy: the agent's status,
// the switch's flows, tunnels and routes, and ofproto/trace of a packet a
// local attachment sends. They read; none changes the node. The pod proxy
// passes no identity through, so whoever reaches the port reaches them, as
// /metrics: what they show is what a node's administrator sees, and traces
// run at most debugCommands at a time.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/kos-sdn/kos/components/agent/api"
	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/fabric"
	"github.com/kos-sdn/kos/components/fabric/ovs"
)

// Limits of the debug endpoints.
const (
	// debugTimeout bounds the switch commands of one request.
	debugTimeout = 20 * time.Second
	// debugCommands is how many requests may run switch commands at once;
	// more wait their turn, so that a loop of requests costs the node one
	// or two processes at a time.
	debugCommands = 2
	// maxTraceRequest bounds the body of a trace request.
	maxTraceRequest = 4 << 10
)

// processStarted is when the agent's process started, near enough.
var processStarted = time.Now()

// switchReader is a fabric whose switch can be read for people (fabric/ovs
// is one; fabric/logging, which has no switch, is not).
type switchReader interface {
	DumpFlows(ctx context.Context) (string, error)
	FlowCount(ctx context.Context) (int, error)
	Tunnels(ctx context.Context) (string, error)
	Routes(ctx context.Context) (string, error)
	Trace(ctx context.Context, p ovs.Packet) (string, error)
}

var _ switchReader = (*ovs.Fabric)(nil)

// reconcileRecord is what /debug/status says of the last full reconcile,
// behind a mutex of its own that its methods take, for a moment and
// without taking another.
type reconcileRecord struct {
	mu     sync.Mutex
	at     time.Time
	reason string
	err    error
}

// set records a full reconcile that just ended.
func (r *reconcileRecord) set(reason string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.at, r.reason, r.err = time.Now(), reason, err
}

func (r *reconcileRecord) get() (time.Time, string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.at, r.reason, r.err
}

// lastChecked returns when the fabric was last checked and how that ended.
func (h *health) lastChecked() (time.Time, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lastCheck, h.lastCheckErr
}

// counts returns how many local and remote attachments the agent put on the
// fabric, and how many networks it watches.
func (s *state) counts() (locals, remotes, networks int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.installed {
		switch p.kind {
		case local:
			locals++
		case remote:
			remotes++
		}
	}
	return locals, remotes, len(s.networks)
}

// DebugHandler returns the handler of the agent's debug endpoints, the
// paths of package agent/api.
func (a *Agent) DebugHandler() http.Handler {
	slots := make(chan struct{}, debugCommands)
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
		ctx, cancel := context.WithTimeout(r.Context(), debugTimeout)
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
	sw, hasSwitch := a.fabric.(switchReader)
	noSwitch := func(context.Context) (string, error) {
		return "", errors.New("the agent's fabric has no switch to read")
	}
	flows, tunnels, ovsRoutes := noSwitch, noSwitch, noSwitch
	if hasSwitch {
		flows, tunnels, ovsRoutes = sw.DumpFlows, sw.Tunnels, sw.Routes
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET "+api.PathStatus, func(w http.ResponseWriter, r *http.Request) {
		withSlot(w, r, func(ctx context.Context) {
			w.Header().Set("Content-Type", "application/json")
			if err := json.NewEncoder(w).Encode(a.status(ctx)); err != nil {
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
		if !hasSwitch {
			http.Error(w, "the agent's fabric has no switch to trace", http.StatusNotImplemented)
			return
		}
		p, code, err := a.tracePacket(http.MaxBytesReader(w, r.Body, maxTraceRequest))
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
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			fmt.Fprint(w, out)
		})
	})
	return mux
}

// tracePacket decodes and checks a trace request and returns its packet,
// or an error with the HTTP status that says whose it is.
func (a *Agent) tracePacket(body io.Reader) (ovs.Packet, int, error) {
	var req api.TraceRequest
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return ovs.Packet{}, http.StatusBadRequest, fmt.Errorf("decoding the trace request: %w", err)
	}
	if err := req.Validate(); err != nil {
		return ovs.Packet{}, http.StatusBadRequest, err
	}
	key := req.Namespace + "/" + req.Name
	obj, exists, err := a.localInformer.GetStore().GetByKey(key)
	if err != nil {
		return ovs.Packet{}, http.StatusInternalServerError, err
	}
	att, _ := obj.(*v1alpha1.NetworkAttachment)
	if !exists || att == nil || att.Spec.Node != a.node {
		return ovs.Packet{}, http.StatusNotFound, fmt.Errorf("attachment %s is not on node %s", key, a.node)
	}
	addr, ok := addressOf(att)
	if !ok {
		return ovs.Packet{}, http.StatusConflict, fmt.Errorf("attachment %s has no address yet", key)
	}
	protocol := req.Protocol
	if protocol == "" {
		protocol = api.ProtocolICMP
	}
	return ovs.Packet{
		From:     fabric.LocalAttachment{VNI: addr.vni, IP: addr.ip},
		To:       netip.MustParseAddr(req.To), // Validate parsed it
		Protocol: protocol,
		Port:     req.Port,
	}, http.StatusOK, nil
}

// status returns what /debug/status reports.
func (a *Agent) status(ctx context.Context) api.Status {
	st := api.Status{
		Node:             a.node,
		HostIP:           a.hostIP.String(),
		Started:          processStarted,
		LocalAttachments: len(a.localInformer.GetStore().ListKeys()),
		Flows:            -1,
	}
	st.Version, st.GoVersion = buildVersion()
	st.Local, st.Remote, st.Networks = a.state.counts()
	if err := a.Healthy(); err != nil {
		st.Errors = append(st.Errors, "not ready: "+err.Error())
	} else {
		st.Ready = true
	}
	var checkErr error
	st.LastCheck, checkErr = a.health.lastChecked()
	if checkErr != nil && st.Ready {
		st.Errors = append(st.Errors, "checking the switch: "+checkErr.Error())
	}
	var reconcileErr error
	st.LastReconcile, st.LastReconcileReason, reconcileErr = a.lastReconcile.get()
	if reconcileErr != nil {
		st.LastReconcileError = reconcileErr.Error()
		st.Errors = append(st.Errors, "the last reconcile failed: "+reconcileErr.Error())
	}
	st.FabricErrors = counterValues(a.metrics.fabricErrors, "operation")
	if sw, ok := a.fabric.(switchReader); ok {
		n, err := sw.FlowCount(ctx)
		if err != nil {
			st.Errors = append(st.Errors, "counting the flows: "+err.Error())
		} else {
			st.Flows = n
		}
	}
	return st
}

// counterValues returns the nonzero values of a counter vector by the
// value of its label.
func counterValues(c *prometheus.CounterVec, label string) map[string]int {
	// A registry of its own reads the vector without the metrics'
	// registry, which is the server's.
	reg := prometheus.NewRegistry()
	if err := reg.Register(c); err != nil {
		return nil
	}
	families, err := reg.Gather()
	if err != nil {
		return nil
	}
	out := map[string]int{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			v := int(m.GetCounter().GetValue())
			if v == 0 {
				continue
			}
			for _, l := range m.GetLabel() {
				if l.GetName() == label {
					out[l.GetValue()] = v
				}
			}
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// buildVersion returns the agent's module version, or its VCS revision
// when the module has none, and the Go release it was built with.
func buildVersion() (version, goVersion string) {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "", ""
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v, info.GoVersion
	}
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" {
			return s.Value, info.GoVersion
		}
	}
	return "", info.GoVersion
}

// nodeRoutes returns the IPv4 routes of every table of the agent's
// network namespace (the node's: the agent runs on the host network), one
// a line, much as `ip route show table all` prints them.
func nodeRoutes() (string, error) {
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return "", fmt.Errorf("listing the node's routes: %w", err)
	}
	names := map[int]string{}
	linkName := func(index int) string {
		if n, ok := names[index]; ok {
			return n
		}
		n := fmt.Sprintf("if%d", index)
		if l, err := netlink.LinkByIndex(index); err == nil {
			n = l.Attrs().Name
		}
		names[index] = n
		return n
	}
	var b strings.Builder
	for _, r := range routes {
		b.WriteString(formatRoute(r, linkName))
		b.WriteByte('\n')
	}
	return b.String(), nil
}

// formatRoute writes a route as `ip route` does, in part: destination,
// gateway, device, source, table (unless main) and metric.
func formatRoute(r netlink.Route, linkName func(int) string) string {
	var parts []string
	switch {
	case r.Type == unix.RTN_LOCAL:
		parts = append(parts, "local", dst(r.Dst))
	case r.Type == unix.RTN_BROADCAST:
		parts = append(parts, "broadcast", dst(r.Dst))
	default:
		parts = append(parts, dst(r.Dst))
	}
	if r.Gw != nil {
		parts = append(parts, "via", r.Gw.String())
	}
	if r.LinkIndex > 0 {
		parts = append(parts, "dev", linkName(r.LinkIndex))
	}
	if r.Src != nil {
		parts = append(parts, "src", r.Src.String())
	}
	if r.Table != unix.RT_TABLE_MAIN && r.Table != 0 {
		parts = append(parts, "table", tableName(r.Table))
	}
	if r.Priority > 0 {
		parts = append(parts, "metric", fmt.Sprint(r.Priority))
	}
	return strings.Join(parts, " ")
}

func dst(n *net.IPNet) string {
	if n == nil {
		return "default"
	}
	if ones, bits := n.Mask.Size(); ones == bits {
		return n.IP.String()
	}
	return n.String()
}

func tableName(t int) string {
	switch t {
	case unix.RT_TABLE_LOCAL:
		return "local"
	case unix.RT_TABLE_DEFAULT:
		return "default"
	}
	return fmt.Sprint(t)
}

// withDebug serves the agent's debug endpoints (/debug/...) beside h.
func withDebug(a *Agent, h http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", h)
	mux.Handle("/debug/", a.DebugHandler())
	return mux
}
