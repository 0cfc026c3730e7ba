package agent

import (
	"cmp"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/util/sets"
)

// network is a virtual network as the API holds it: a VNI in the namespace
// of its subnets. A VNI belongs to one namespace, but the agent does not
// rely on that: it watches per namespace and VNI.
type network struct {
	namespace string
	vni       uint32
}

// String returns a short form for logs, such as ns/7.
func (n network) String() string { return fmt.Sprintf("%s/%d", n.namespace, n.vni) }

func compareNetworks(a, b network) int {
	return cmp.Or(cmp.Compare(a.namespace, b.namespace), cmp.Compare(a.vni, b.vni))
}

// relevance is the bookkeeping of which networks matter to this node: a
// network is relevant while at least one local attachment has its address
// in it. It is not safe for concurrent use.
type relevance struct {
	// members holds, per relevant network, the keys of its local
	// attachments.
	members map[network]sets.Set[string]
	// of holds the network of each local attachment that has one.
	of map[string]network
}

func newRelevance() *relevance {
	return &relevance{members: map[network]sets.Set[string]{}, of: map[string]network{}}
}

// set records that the local attachment key now has its address in network
// n, or in none when in is false (it has no address yet, or is gone). It
// returns the network that became relevant by this and the one that
// stopped being relevant; each is the zero network when there is none.
func (r *relevance) set(key string, n network, in bool) (gained, lost network) {
	old, had := r.of[key]
	if had && in && old == n {
		return network{}, network{}
	}
	if had {
		delete(r.of, key)
		m := r.members[old]
		m.Delete(key)
		if m.Len() == 0 {
			delete(r.members, old)
			lost = old
		}
	}
	if in {
		r.of[key] = n
		m, ok := r.members[n]
		if !ok {
			m = sets.New[string]()
			r.members[n] = m
			gained = n
		}
		m.Insert(key)
	}
	return gained, lost
}

// relevant reports whether network n is relevant.
func (r *relevance) relevant(n network) bool {
	_, ok := r.members[n]
	return ok
}

// networks returns the relevant networks, sorted.
func (r *relevance) networks() []network {
	ns := make([]network, 0, len(r.members))
	for n := range r.members {
		ns = append(ns, n)
	}
	slices.SortFunc(ns, compareNetworks)
	return ns
}
