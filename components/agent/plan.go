package agent

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"

	"github.com/kos-sdn/kos/components/fabric"
)

// address is what the fabric keys its work by: one VNI and IP name at most
// one attachment on a switch, local or remote.
type address struct {
	vni uint32
	ip  netip.Addr
}

// String returns the form the address index uses, such as 1/10.0.0.5.
func (a address) String() string { return fmt.Sprintf("%d/%s", a.vni, a.ip) }

func compareAddresses(a, b address) int {
	return cmp.Or(cmp.Compare(a.vni, b.vni), a.ip.Compare(b.ip))
}

// kind says what the fabric holds at an address.
type kind uint8

const (
	// absent: nothing.
	absent kind = iota
	// local: a whole local attachment, interface and flows; for a pod's
	// attachment (placement.pod) possibly nothing yet, until the CNI
	// server plugs the pod's veth as its port.
	local
	// remote: the whole flows of a remote attachment, towards hostIP.
	remote
	// unknown: something partial may be there, such as the interface of a
	// local attachment without its flows after an ovs-vswitchd restart, or
	// whatever a failed operation left. It equals no wanted state, so the
	// next plan for the address does everything that could be needed.
	unknown
)

// placement is what the fabric holds, or should hold, at one address.
type placement struct {
	kind kind
	// hostIP is the node a remote attachment's traffic tunnels to.
	hostIP netip.Addr
	// owner is the key (namespace/name) of the attachment the placement
	// is for; "" when no attachment claims it, as for an orphan found on
	// the switch.
	owner string
	// pod says that a local attachment is a pod's (it has the pod-UID
	// label): its only port is the pod's veth, which the CNI server plugs
	// (port and flows) and unplugs; the agent makes it no internal port.
	pod bool
}

// sameOnSwitch reports whether p and q leave the switch alike: which
// attachment wants it does not matter there.
func (p placement) sameOnSwitch(q placement) bool {
	return p.kind == q.kind && p.hostIP == q.hostIP && p.pod == q.pod
}

// op is one fabric operation on one address.
type op uint8

const (
	opDeleteLocal op = iota
	opDeleteRemote
	opCreateLocal
	opCreateRemote
	// opRepairPod repairs a pod's local attachment found partial: the
	// flows of its plugged veth (CreateLocal keeps a plugged port), or,
	// when it has no plugged port, whatever is there goes and the
	// attachment waits for the CNI server's plug.
	opRepairPod
)

var opNames = [...]string{
	opDeleteLocal:  "delete_local",
	opDeleteRemote: "delete_remote",
	opCreateLocal:  "create_local",
	opCreateRemote: "create_remote",
	opRepairPod:    "repair_pod",
}

func (o op) String() string { return opNames[o] }

// planAddress returns the fabric operations, in order, that turn what the
// fabric holds at an address (have) into what it should hold (want).
// Deletions come before creations. Creating a local attachment needs no
// deletion first, as it replaces a remote one's flows; creating a remote
// one does, since it would leave a local interface in place. A pod's local
// attachment gets no port from the agent: whatever local port the switch
// holds is kept (the pod's veth, or an internal port an older agent made,
// which the plug replaces), a remote attachment's flows go, and a partial
// one is repaired without making a port (opRepairPod).
func planAddress(have, want placement) []op {
	if have.kind != unknown && have.sameOnSwitch(want) {
		return nil
	}
	switch {
	case want.kind == local && want.pod:
		switch have.kind {
		case remote:
			return []op{opDeleteRemote}
		case unknown:
			return []op{opRepairPod}
		default:
			return nil
		}
	case want.kind == local:
		return []op{opCreateLocal}
	case want.kind == remote:
		if have.kind == local || have.kind == unknown {
			return []op{opDeleteLocal, opCreateRemote}
		}
		return []op{opCreateRemote}
	default:
		switch have.kind {
		case local:
			return []op{opDeleteLocal}
		case remote:
			return []op{opDeleteRemote}
		default:
			return []op{opDeleteLocal, opDeleteRemote}
		}
	}
}

// reconcilePlan is what a full reconcile does to the fabric: four batches,
// carried out in the order of the fields, and what the fabric holds after.
type reconcilePlan struct {
	deleteLocal  []fabric.LocalAttachment
	deleteRemote []fabric.RemoteAttachment
	createLocal  []fabric.LocalAttachment
	createRemote []fabric.RemoteAttachment
	// repairPod are pods' local attachments found partial (opRepairPod),
	// carried out before the others.
	repairPod []fabric.LocalAttachment
	// adopted counts the attachments found whole and wanted as they are.
	adopted int
	// deferred counts the addresses left as they are because their
	// network's informer had not synced: a reconcile once it has must look
	// at them again, as nothing else removes what no attachment claims.
	deferred int
	// after is what the fabric holds once every batch succeeded.
	after map[address]placement
}

// inventoryPlacements returns what an inventory says the fabric holds, by
// address. An address listed more than once, or partially, is unknown.
func inventoryPlacements(inv *fabric.Inventory) map[address]placement {
	have := map[address]placement{}
	put := func(a address, p placement) {
		if _, dup := have[a]; dup {
			p = placement{kind: unknown}
		}
		have[a] = p
	}
	for _, l := range inv.Local {
		put(address{l.VNI, l.IP}, placement{kind: local})
	}
	for _, l := range inv.PartialLocal {
		put(address{l.VNI, l.IP}, placement{kind: unknown})
	}
	for _, r := range inv.Remote {
		put(address{r.VNI, r.IP}, placement{kind: remote, hostIP: r.HostIP})
	}
	for _, r := range inv.PartialRemote {
		put(address{r.VNI, r.IP}, placement{kind: unknown})
	}
	return have
}

// planReconcile decides a full reconcile: given what the fabric holds (inv)
// and what the agent wants (want, without absent entries), it adopts what
// matches, deletes orphans and creates or repairs the rest. Addresses for
// which deferred reports true are left as they are unless a local
// attachment wants them: the agent does not know yet which remote
// attachments their network has.
func planReconcile(inv *fabric.Inventory, want map[address]placement, deferred func(address) bool) reconcilePlan {
	have := inventoryPlacements(inv)
	addrs := make([]address, 0, len(have)+len(want))
	for a := range have {
		addrs = append(addrs, a)
	}
	for a := range want {
		if _, ok := have[a]; !ok {
			addrs = append(addrs, a)
		}
	}
	slices.SortFunc(addrs, compareAddresses)

	plan := reconcilePlan{after: make(map[address]placement, len(addrs))}
	for _, a := range addrs {
		h, w := have[a], want[a]
		if w.kind != local && deferred != nil && deferred(a) {
			if h.kind != absent {
				plan.after[a] = h
			}
			plan.deferred++
			continue
		}
		ops := planAddress(h, w)
		if len(ops) == 0 && w.kind != absent && h.kind != absent {
			plan.adopted++
		}
		for _, o := range ops {
			switch o {
			case opDeleteLocal:
				plan.deleteLocal = append(plan.deleteLocal, fabric.LocalAttachment{VNI: a.vni, IP: a.ip})
			case opDeleteRemote:
				plan.deleteRemote = append(plan.deleteRemote, fabric.RemoteAttachment{VNI: a.vni, IP: a.ip})
			case opCreateLocal:
				plan.createLocal = append(plan.createLocal, fabric.LocalAttachment{VNI: a.vni, IP: a.ip})
			case opCreateRemote:
				plan.createRemote = append(plan.createRemote, fabric.RemoteAttachment{VNI: a.vni, IP: a.ip, HostIP: w.hostIP})
			case opRepairPod:
				plan.repairPod = append(plan.repairPod, fabric.LocalAttachment{VNI: a.vni, IP: a.ip})
			}
		}
		if w.kind != absent {
			plan.after[a] = w
		}
	}
	return plan
}
