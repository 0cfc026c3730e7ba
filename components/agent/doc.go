// Package agent is the KOS node agent (kos-agent): on one node it turns the
// NetworkAttachments of that node, and those of every virtual network they
// are in, into interfaces and flows on the node's switch through the
// fabric seam, and reports each local attachment's interface in its status.
//
// It learns what is relevant to its node and nothing else, with 1+R
// informers: one on the attachments whose spec.node is this node, and one
// per relevant network (a namespace and VNI with at least one local
// attachment) on status.addressVNI, with a field selector that also asks the
// server for a status.hostIP (an attachment without a host has nothing for
// other nodes' switches, so the server keeps it out of their watches). A
// network's informer starts when the
// network gains its first local attachment and stops when it loses its
// last; its remote attachments then leave the fabric.
//
// The switch is keyed by address (VNI and IP), which two attachments may
// claim at once while an address moves; a local claim wins over a remote
// one, then the later address write. The agent remembers what it put on the
// switch, and reconciles fully against what the switch reports (List) on
// start, when the switch lost its flows (an ovs-vswitchd restart), and
// periodically: it adopts what matches, deletes orphans and creates what is
// missing. A reconcile leaves a network whose informer has not synced yet
// as it is (it cannot tell that network's orphans), and the agent
// reconciles again as soon as every network has synced.
//
// Commands of spec.postCreateExec and spec.postDeleteExec run only when
// the agent's allow-list permits them: they name a program verbatim, and
// their arguments, with ${ifname}, ${ipv4} and ${mac} expanded, match one of
// that program's rules of argument patterns (exechook.Rule, --exec-allow-file);
// no shell sees them. They run off the workers, at most Config.ExecWorkers
// at once, so a slow command delays no fabric work. postCreateExec runs once the
// interface is ready and its report goes into status.postCreateExecReport;
// postDeleteExec runs once the interface of a deleted attachment is gone,
// and only if this agent saw the attachment's interface made (a deletion
// while the agent was down leaves no trace to run it from), and its report
// goes to the log.
//
// With a CNI socket (cniserver.Config), the agent is also its node's CNI
// daemon (package cniserver): kos-cni forwards each CNI request for a
// pod's interface to it. An ADD
// waits, for a bounded time, for the pod's attachment (named by
// v1alpha1.AttachmentName and made by kos-controller-manager) to have its
// address and be ready on this node, then plugs a veth pair into the pod:
// the host end, named as the attachment's interface, becomes the
// attachment's port (fabric PlugLocal), which records the sandbox's
// container ID and interface; the pod's end gets the attachment's MAC
// address, address and the fabric's MTU. A pod's attachment (the pod-UID
// label) gets no internal port from the agent: it is ready without a port,
// and its veth is its only port. A DEL removes the pod's end and, if the
// sandbox still owns the port, the port, so that a stale DEL removes
// nothing of a newer sandbox; a pod's attachment is left without a port, a
// plain one gets an internal port again. Plugged ports survive agent and
// ovs-vswitchd restarts: the switch keeps them, and a reconcile repairs
// only their flows (a pod's port whose veth is gone, after a reboot, goes,
// and the pod's next sandbox plugs a new one).
//
// Three jobs the agent also does live in packages of their own, each
// behind a narrow interface: cniserver answers kos-cni as above, exechook
// runs the commands above, and debugserver serves the debug endpoints
// (status, flows, trace) that `kubectl kos` reads, to users the cluster
// allows nodes/kos-debug of this node, on a port apart from the metrics.
//
// The library takes no flags: NewCommand builds the kos-agent command,
// whose flags fill an Options. Like kos-apiserver, the command goes Options →
// Complete → Validate → Config (a ServerConfig) → Complete → New (a Server:
// the agent, its Events, its metrics and health endpoint and its debug
// server) → Run.
package agent
