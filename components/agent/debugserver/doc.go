// Package debugserver serves kos-agent's debug endpoints, the paths of
// package agent/api, on a listener of their own apart from /metrics: the
// agent's status, the switch's flows, tunnels and routes, and
// ofproto/trace of a packet a local attachment sends. They read; none
// changes the node, and traces run at most a few at a time.
//
// What they show (every network's addresses, MAC addresses and peer nodes)
// is what a node's administrator sees, so the server lets in only whom the
// main cluster vouches for, as kubelet does: a bearer token that a
// TokenReview accepts, or a client certificate its client CA signed, and
// then only a user that a SubjectAccessReview allows verb get (create for
// a trace) on the virtual subresource nodes/kos-debug of the agent's node.
// Served on loopback only instead, it asks no one: whoever reaches the
// node's loopback is the node's administrator already.
package debugserver
