// Package api holds the wire types of kos-agent's debug endpoints, which
// `kubectl kos` reads through the kube-apiserver's pod proxy: the paths, the
// JSON of /debug/status and the request of /debug/trace.
//
// It holds no logic beyond what a wire type needs; the agent serves these
// (package agent) and the plugin reads them (package kubectlkos).
package api

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// The debug endpoints, served on the agent's --debug-bind-address (0.3.0
// and older served them beside /metrics, to anyone). Every one but
// PathTrace answers GET only; none changes anything on the node.
const (
	// PathStatus answers a Status as JSON.
	PathStatus = "/debug/status"
	// PathFlows answers the bridge's OpenFlow flows as ovs-ofctl dump-flows
	// prints them.
	PathFlows = "/debug/flows"
	// PathTunnels answers the switch's ports and tunnel ports, as
	// ovs-vsctl show and ovs-appctl tnl/ports/show print them, and the
	// tunnels' neighbours.
	PathTunnels = "/debug/tunnels"
	// PathRoutes answers the node's IPv4 routes and Open vSwitch's route
	// table, which tunnels leave by.
	PathRoutes = "/debug/routes"
	// PathTrace takes a TraceRequest by POST and answers, as text, what
	// ovs-appctl ofproto/trace says the bridge does with such a packet.
	PathTrace = "/debug/trace"
)

// Port is the port of the agent's metrics (--metrics-bind-address=:9298),
// where releases up to 0.3.0 served the debug endpoints too.
const Port = 9298

// DebugPort is the port the agent serves the debug endpoints on since
// 0.4.0 (--debug-bind-address=:9299), over HTTPS, and DebugPortName the
// name of that port of the agent's container.
const (
	DebugPort     = 9299
	DebugPortName = "debug"
)

// The right a caller needs on the agent's Node to use its debug endpoints,
// which the agent asks the cluster about (SubjectAccessReview): verb get for
// a GET, create for a trace, on the virtual subresource nodes/kos-debug. A
// ClusterRole grants it as
//
//	rules: [{apiGroups: [""], resources: [nodes/kos-debug], verbs: [get, create]}]
const (
	DebugResource    = "nodes"
	DebugSubresource = "kos-debug"
)

// Status is what an agent says of itself and its node's switch.
type Status struct {
	// Node is the node the agent serves.
	Node string `json:"node"`
	// HostIP is the node's address on the underlay.
	HostIP string `json:"hostIP"`
	// Version is the agent's build: its module version or VCS revision, as
	// the binary records it; empty when it records none.
	Version string `json:"version,omitempty"`
	// GoVersion is the Go release the agent was built with.
	GoVersion string `json:"goVersion,omitempty"`
	// Started is when the agent's process started.
	Started time.Time `json:"started,omitzero"`

	// Ready says whether the agent is ready: its first reconcile is done
	// and its last check of the switch succeeded recently.
	Ready bool `json:"ready"`

	// LocalAttachments counts the attachments of this node the agent sees
	// in the KOS API; Local and Remote count what the agent has put on the
	// switch: this node's attachments and those of other nodes in the same
	// virtual networks.
	LocalAttachments int `json:"localAttachments"`
	Local            int `json:"local"`
	Remote           int `json:"remote"`
	// Networks counts the virtual networks with local attachments.
	Networks int `json:"networks"`
	// Flows counts the OpenFlow flows of the bridge; -1 when the switch
	// could not be read (see Errors).
	Flows int `json:"flows"`

	// LastReconcile is when the last full reconcile of the switch ended,
	// zero before the first; LastReconcileReason says why it ran (start,
	// flows_lost, periodic, retry, deferred) and LastReconcileError how
	// it failed, empty when it succeeded.
	LastReconcile       time.Time `json:"lastReconcile,omitzero"`
	LastReconcileReason string    `json:"lastReconcileReason,omitempty"`
	LastReconcileError  string    `json:"lastReconcileError,omitempty"`
	// LastCheck is when the agent last asked the switch whether it lost
	// its flows (every few seconds).
	LastCheck time.Time `json:"lastCheck,omitzero"`

	// FabricErrors counts the switch operations that failed since the
	// agent started, by operation; only those that failed are listed.
	FabricErrors map[string]int `json:"fabricErrors,omitempty"`
	// Errors are the problems the agent has now: not ready and why, the
	// last failed check or reconcile, a switch that cannot be read.
	Errors []string `json:"errors,omitempty"`
}

// Protocols of a TraceRequest.
const (
	ProtocolICMP = "icmp"
	ProtocolTCP  = "tcp"
	ProtocolUDP  = "udp"
	ProtocolARP  = "arp"
)

// TraceRequest asks what the switch does with a packet that a local
// attachment sends to an address of its virtual network.
type TraceRequest struct {
	// Namespace and Name name the attachment; it must be on the agent's
	// node and have an address.
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// To is the IPv4 address the packet is for.
	To string `json:"to"`
	// Protocol is ProtocolICMP (an echo request, the default), TCP, UDP
	// or ARP (a request for To).
	Protocol string `json:"protocol,omitempty"`
	// Port is the destination port of TCP and UDP, in [1,65535].
	Port int `json:"port,omitempty"`
}

// Validate returns every problem with r at once. Both ends call it: the
// plugin to fail before a round trip, the agent because it takes nothing
// on trust.
func (r TraceRequest) Validate() error {
	var errs []error
	for _, msg := range validation.IsDNS1123Label(r.Namespace) {
		errs = append(errs, fmt.Errorf("namespace %q: %s", r.Namespace, msg))
	}
	for _, msg := range validation.IsDNS1123Subdomain(r.Name) {
		errs = append(errs, fmt.Errorf("name %q: %s", r.Name, msg))
	}
	if ip, err := netip.ParseAddr(r.To); err != nil || !ip.Is4() || ip.Zone() != "" {
		errs = append(errs, fmt.Errorf("destination %q: want an IPv4 address", r.To))
	}
	switch r.Protocol {
	case "", ProtocolICMP, ProtocolARP:
		if r.Port != 0 {
			errs = append(errs, fmt.Errorf("port %d: only %s and %s have ports", r.Port, ProtocolTCP, ProtocolUDP))
		}
	case ProtocolTCP, ProtocolUDP:
		if r.Port < 1 || r.Port > 65535 {
			errs = append(errs, fmt.Errorf("port %d: want a %s port in [1,65535]", r.Port, r.Protocol))
		}
	default:
		errs = append(errs, fmt.Errorf("protocol %q: want %s, %s, %s or %s", r.Protocol, ProtocolICMP, ProtocolTCP, ProtocolUDP, ProtocolARP))
	}
	return errors.Join(errs...)
}

// Paths of the connectivity probes that `kubectl kos check` asks for. An
// agent that does not serve them answers 404, and check skips its
// datapath part.
const (
	// PathProbes takes a ProbeRequest by POST: the agent puts a probe on
	// a local attachment (an interface with the attachment's address and
	// MAC, in a network namespace of its own, answering ping and TCP on
	// ProbePort) until DELETE PathProbes?namespace=N&name=A or the
	// agent's restart. GET answers 200 when the agent serves probes.
	PathProbes = "/debug/probes"
	// PathProbeCheck takes a ProbeCheckRequest by POST and answers a
	// ProbeCheckResult as JSON.
	PathProbeCheck = "/debug/probes/check"
	// ProbePort is the TCP port every probe listens on.
	ProbePort = 7946
	// ProbeLabel marks the attachments that may have a probe, as `kubectl
	// kos check` labels its scratch network (its Subnet and attachments):
	// a probe takes its attachment's interface, which no workload may then
	// use. The agent refuses a probe on an attachment without it.
	ProbeLabel = "kos.example.com/check"
)

// ProbeRequest names the local attachment that gets a probe.
type ProbeRequest struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// ProbeCheckRequest asks the probe on a local attachment to reach To: a
// ping, a ping of MTU bytes with Don't Fragment set, and a TCP connection to
// ProbePort, each within TimeoutSeconds.
type ProbeCheckRequest struct {
	Namespace      string `json:"namespace"`
	Name           string `json:"name"`
	To             string `json:"to"`
	MTU            int    `json:"mtu"`
	TimeoutSeconds int    `json:"timeoutSeconds"`
}

// ProbeCheckResult is what each check of a ProbeCheckRequest found.
type ProbeCheckResult struct {
	Ping         ProbeOutcome `json:"ping"`
	FullSizePing ProbeOutcome `json:"fullSizePing"`
	TCP          ProbeOutcome `json:"tcp"`
}

// ProbeOutcome is one check's result; Detail says why it failed, or how
// long it took.
type ProbeOutcome struct {
	OK     bool   `json:"ok"`
	Detail string `json:"detail,omitempty"`
}
