// Package debugserver serves kos-agent's debug endpoints, the paths of
// package agent/api, on a listener of their own apart from /metrics: the
// agent's status, the switch's flows, tunnels and routes, ofproto/trace of
// a packet a local attachment sends, and the connectivity probes of
// `kubectl kos check` (package probe). Only the probes change the node,
// and only attachments labelled for checks; traces, probe checks and the
// other requests that run commands run at most a few at a time.
//
// What they show (every network's addresses, MAC addresses and peer nodes)
// is what a node's administrator sees, so the server lets in only whom the
// main cluster vouches for, as kubelet does: a bearer token that a
// TokenReview accepts, or a client certificate its client CA signed, and
// then only a user that a SubjectAccessReview allows verb get (create for
// a trace and for a probe's POST and DELETE) on the virtual subresource
// nodes/kos-debug of the agent's node.
// Served on loopback only instead, it asks no one: whoever reaches the
// node's loopback is the node's administrator already.
package debugserver
