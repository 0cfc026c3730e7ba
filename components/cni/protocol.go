// Package cni is KOS's CNI plugin, kos-cni, and the protocol it speaks
// with the node's kos-agent.
//
// The plugin is thin: it reads a CNI request (the command, the container's
// ID, network namespace and interface name, CNI_ARGS with the pod's
// namespace, name and UID, and the network configuration with the KOS
// subnet to attach to), forwards it to kos-agent over a Unix socket as one
// HTTP request, and prints what the agent answers: a CNI result, or a CNI
// error whose message says what to do. The agent does the work (see
// package agent): it finds the pod's NetworkAttachment, waits for it to be
// ready and plugs a veth pair into the pod.
//
// DEL never fails because kos-agent cannot be reached: a pod must be able
// to go while its node's agent is down. The veth pair goes with the pod's
// network namespace, and the agent cleans up the rest when it runs again.
//
// The plugin imports nothing of Kubernetes, so that its binary stays small:
// the runtime runs it for every pod network operation.
package cni

import (
	"encoding/json"
	"time"

	"github.com/containernetworking/cni/pkg/types"
)

// Where kos-cni reaches kos-agent.
const (
	// DefaultSocket is where kos-agent serves CNI requests (its
	// --cni-socket), and where kos-cni sends them.
	DefaultSocket = "/var/run/kos/cni.sock"
	// SocketEnv names the environment variable that, when set, makes
	// kos-cni send its requests to another socket than DefaultSocket,
	// such as a test agent's. kos-cni runs in the runtime's environment
	// (and Multus passes its own on), which only the node's root sets; a
	// network configuration, which tenants write, does not choose the
	// socket (see NetConf.Socket).
	SocketEnv = "KOS_CNI_SOCKET"
)

// RequestPath is the HTTP path of CNI requests on the agent's socket.
const RequestPath = "/v1/cni"

// Timeouts of the plugin's request to the agent. ADD waits for the pod's
// attachment, which the agent bounds itself (60 s by default, and 90 s for
// all the ADDs of one sandbox); the plugin's bound only catches an agent
// that never answers, and stays under kubelet's runtime request timeout
// (2 minutes by default), so that kubelet hears why. DEL gives up sooner,
// and succeeds when it does.
const (
	requestTimeout = 100 * time.Second
	deleteTimeout  = 30 * time.Second
)

// The CNI commands the plugin forwards.
const (
	CommandAdd    = "ADD"
	CommandDel    = "DEL"
	CommandCheck  = "CHECK"
	CommandStatus = "STATUS"
	CommandGC     = "GC"
)

// Request is one CNI operation, as kos-cni sends it to kos-agent: a JSON
// body POSTed to RequestPath. The agent answers 200 with the CNI 1.0 result
// of an ADD (types100.Result), or with an empty body; or another status
// with a CNI error (types.Error) as the body.
type Request struct {
	// Command is CommandAdd, CommandDel, CommandCheck, CommandStatus or
	// CommandGC.
	Command string `json:"command"`
	// ContainerID is CNI_CONTAINERID: the sandbox the interface is for.
	ContainerID string `json:"containerID,omitempty"`
	// Netns is CNI_NETNS, the path of the sandbox's network namespace;
	// empty in a DEL whose namespace is gone.
	Netns string `json:"netns,omitempty"`
	// IfName is CNI_IFNAME, the name of the interface in the sandbox.
	IfName string `json:"ifName,omitempty"`
	// Pod is the pod the sandbox belongs to, from CNI_ARGS.
	Pod Pod `json:"pod"`
	// Network is the name of the network configuration.
	Network string `json:"network,omitempty"`
	// Subnet is the KOS Subnet, in the pod's namespace, that the network
	// configuration names.
	Subnet string `json:"subnet,omitempty"`
	// IPs are the addresses the pod asked for (runtimeConfig.ips, or the
	// IP of CNI_ARGS), each with or without a prefix length.
	IPs []string `json:"ips,omitempty"`
	// PrevResult is the result of the ADD that a CHECK checks.
	PrevResult json.RawMessage `json:"prevResult,omitempty"`
	// MAC is the MAC address the pod asked for (runtimeConfig.mac, or the
	// MAC of CNI_ARGS). The agent refuses any other than the one the
	// attachment's address gives.
	MAC string `json:"mac,omitempty"`
	// Valid are, in a GC, the attachments of the network that the runtime
	// still has (cni.dev/valid-attachments): the agent releases what it
	// plugged for the network and no valid attachment names.
	Valid []Attachment `json:"valid,omitempty"`
}

// Attachment is a sandbox's interface, as a GC names it.
type Attachment struct {
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifName"`
}

// Pod names a pod, as the runtime gives it in CNI_ARGS.
type Pod struct {
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	UID       string `json:"uid,omitempty"`
}

// String returns namespace/name, the form of logs.
func (p Pod) String() string { return p.Namespace + "/" + p.Name }

// NetConf is the network configuration of a KOS network: the CNI
// configuration of a NetworkAttachmentDefinition, such as
//
//	{"cniVersion": "1.0.0", "name": "blue", "type": "kos", "subnet": "blue"}
type NetConf struct {
	CNIVersion string `json:"cniVersion,omitempty"`
	Name       string `json:"name,omitempty"`
	Type       string `json:"type,omitempty"`
	// Subnet names the KOS Subnet, in the pod's namespace, that the
	// interface's address comes from. Required.
	Subnet string `json:"subnet,omitempty"`
	// Socket is what KOS 0.3.0 read as the path of kos-agent's Unix
	// socket. The plugin runs as root and hands the agent the sandbox's
	// network namespace, so a tenant's definition must not point it at
	// another socket: kos-cni refuses an ADD or CHECK whose Socket is not
	// where it reaches the agent (DefaultSocket, or SocketEnv's), and a
	// DEL or STATUS ignores it.
	Socket string `json:"socket,omitempty"`
	// RuntimeConfig holds what the runtime (or Multus) passes for the
	// capabilities the configuration declares.
	RuntimeConfig struct {
		// IPs are the addresses the pod asks for (the "ips" capability).
		IPs []string `json:"ips,omitempty"`
		// MAC is the MAC address the pod asks for (the "mac" capability).
		MAC string `json:"mac,omitempty"`
	} `json:"runtimeConfig,omitempty"`
	// Args holds the "args" of the CNI conventions, where some runtimes
	// put the addresses a pod asks for.
	Args struct {
		CNI struct {
			IPs []string `json:"ips,omitempty"`
		} `json:"cni,omitempty"`
	} `json:"args,omitempty"`
	// PrevResult is the result of the ADD, in a CHECK.
	PrevResult json.RawMessage `json:"prevResult,omitempty"`
	// ValidAttachments are, in a GC, the network's attachments that the
	// runtime still has.
	ValidAttachments []types.GCAttachment `json:"cni.dev/valid-attachments,omitempty"`
}
