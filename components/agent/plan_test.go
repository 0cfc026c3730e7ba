package agent

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/kos-sdn/kos/components/fabric"
)

var (
	hostA = netip.MustParseAddr("192.168.100.1")
	hostB = netip.MustParseAddr("192.168.100.2")
)

func addr(vni uint32, ip string) address { return address{vni, netip.MustParseAddr(ip)} }

func TestPlanAddress(t *testing.T) {
	loc := placement{kind: local, owner: "ns/a"}
	remA := placement{kind: remote, hostIP: hostA, owner: "ns/b"}
	remB := placement{kind: remote, hostIP: hostB, owner: "ns/b"}
	unk := placement{kind: unknown}
	none := placement{}
	pod := placement{kind: local, owner: "ns/p", pod: true}
	tests := []struct {
		name       string
		have, want placement
		ops        []op
	}{
		{"nothing to nothing", none, none, nil},
		{"nothing to local", none, loc, []op{opCreateLocal}},
		{"nothing to remote", none, remA, []op{opCreateRemote}},
		{"local stays", loc, loc, nil},
		{"local changes owner", loc, placement{kind: local, owner: "ns/other"}, nil},
		{"local goes", loc, none, []op{opDeleteLocal}},
		{"local becomes remote", loc, remA, []op{opDeleteLocal, opCreateRemote}},
		{"remote stays", remA, remA, nil},
		{"remote moves host", remA, remB, []op{opCreateRemote}},
		{"remote goes", remA, none, []op{opDeleteRemote}},
		{"remote becomes local", remA, loc, []op{opCreateLocal}},
		{"unknown to nothing", unk, none, []op{opDeleteLocal, opDeleteRemote}},
		{"unknown to local", unk, loc, []op{opCreateLocal}},
		{"unknown to remote", unk, remA, []op{opDeleteLocal, opCreateRemote}},
		{"unknown stays unknown", unk, unk, []op{opDeleteLocal, opDeleteRemote}},
		// A pod's attachment gets its port from the CNI server's plug.
		{"nothing to a pod's", none, pod, nil},
		{"a pod's stays", pod, pod, nil},
		{"a port found is a pod's", loc, pod, nil},
		{"remote becomes a pod's", remA, pod, []op{opDeleteRemote}},
		{"unknown to a pod's", unk, pod, []op{opRepairPod}},
		{"a pod's goes", pod, none, []op{opDeleteLocal}},
		{"a pod's becomes remote", pod, remA, []op{opDeleteLocal, opCreateRemote}},
		{"a pod's becomes plain", pod, loc, []op{opCreateLocal}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := planAddress(tc.have, tc.want)
			if diff := cmp.Diff(got, tc.ops); diff != "" {
				t.Errorf("planAddress(%+v, %+v) (-got +want):\n%s", tc.have, tc.want, diff)
			}
		})
	}
}

func TestPlanReconcile(t *testing.T) {
	la := func(a address) fabric.LocalAttachment { return fabric.LocalAttachment{VNI: a.vni, IP: a.ip} }
	ra := func(a address, h netip.Addr) fabric.RemoteAttachment {
		return fabric.RemoteAttachment{VNI: a.vni, IP: a.ip, HostIP: h}
	}
	var (
		a1 = addr(1, "10.0.0.1")
		a2 = addr(1, "10.0.0.2")
		a3 = addr(1, "10.0.0.3")
		a4 = addr(1, "10.0.0.4")
		// b1 has a1's IP in another VNI.
		b1 = addr(2, "10.0.0.1")
		b2 = addr(2, "10.0.0.2")
	)
	loc := func(owner string) placement { return placement{kind: local, owner: owner} }
	podLoc := func(owner string) placement { return placement{kind: local, owner: owner, pod: true} }
	rem := func(h netip.Addr, owner string) placement { return placement{kind: remote, hostIP: h, owner: owner} }
	tests := []struct {
		name     string
		inv      fabric.Inventory
		want     map[address]placement
		deferred []uint32
		plan     reconcilePlan
	}{{
		name: "empty switch, nothing wanted",
		plan: reconcilePlan{after: map[address]placement{}},
	}, {
		name: "empty switch: create all",
		want: map[address]placement{a1: loc("ns/a1"), a2: rem(hostA, "ns/a2"), b1: loc("ns/b1")},
		plan: reconcilePlan{
			createLocal:  []fabric.LocalAttachment{la(a1), la(b1)},
			createRemote: []fabric.RemoteAttachment{ra(a2, hostA)},
			after:        map[address]placement{a1: loc("ns/a1"), a2: rem(hostA, "ns/a2"), b1: loc("ns/b1")},
		},
	}, {
		name: "adopt what matches",
		inv: fabric.Inventory{
			Local:  []fabric.LocalAttachment{la(a1)},
			Remote: []fabric.RemoteAttachment{ra(a2, hostA)},
		},
		want: map[address]placement{a1: loc("ns/a1"), a2: rem(hostA, "ns/a2")},
		plan: reconcilePlan{adopted: 2, after: map[address]placement{a1: loc("ns/a1"), a2: rem(hostA, "ns/a2")}},
	}, {
		name: "remove orphans",
		inv: fabric.Inventory{
			Local:         []fabric.LocalAttachment{la(a1)},
			PartialLocal:  []fabric.LocalAttachment{la(a3)},
			Remote:        []fabric.RemoteAttachment{ra(a2, hostA)},
			PartialRemote: []fabric.RemoteAttachment{ra(a4, hostB)},
		},
		plan: reconcilePlan{
			deleteLocal:  []fabric.LocalAttachment{la(a1), la(a3), la(a4)},
			deleteRemote: []fabric.RemoteAttachment{{VNI: a2.vni, IP: a2.ip}, {VNI: a3.vni, IP: a3.ip}, {VNI: a4.vni, IP: a4.ip}},
			after:        map[address]placement{},
		},
	}, {
		name: "after an ovs-vswitchd restart: interfaces without flows",
		inv:  fabric.Inventory{PartialLocal: []fabric.LocalAttachment{la(a1), la(b1)}},
		want: map[address]placement{a1: loc("ns/a1"), b1: loc("ns/b1"), a2: rem(hostA, "ns/a2")},
		plan: reconcilePlan{
			createLocal:  []fabric.LocalAttachment{la(a1), la(b1)},
			createRemote: []fabric.RemoteAttachment{ra(a2, hostA)},
			after:        map[address]placement{a1: loc("ns/a1"), b1: loc("ns/b1"), a2: rem(hostA, "ns/a2")},
		},
	}, {
		name: "pods' attachments: adopted, waiting for their plug, repaired",
		inv: fabric.Inventory{
			// a1's veth is plugged; a2 has none yet; a3's flows went
			// with an ovs-vswitchd restart; b1 moved here from another
			// node.
			Local:        []fabric.LocalAttachment{la(a1)},
			PartialLocal: []fabric.LocalAttachment{la(a3)},
			Remote:       []fabric.RemoteAttachment{ra(b1, hostA)},
		},
		want: map[address]placement{a1: podLoc("ns/a1"), a2: podLoc("ns/a2"), a3: podLoc("ns/a3"), b1: podLoc("ns/b1")},
		plan: reconcilePlan{
			adopted:      1,
			repairPod:    []fabric.LocalAttachment{la(a3)},
			deleteRemote: []fabric.RemoteAttachment{{VNI: b1.vni, IP: b1.ip}},
			after:        map[address]placement{a1: podLoc("ns/a1"), a2: podLoc("ns/a2"), a3: podLoc("ns/a3"), b1: podLoc("ns/b1")},
		},
	}, {
		name: "repair and move",
		inv: fabric.Inventory{
			// a1 moved to another node; a2 moved here; a3's host changed.
			Local:  []fabric.LocalAttachment{la(a1)},
			Remote: []fabric.RemoteAttachment{ra(a2, hostA), ra(a3, hostA)},
		},
		want: map[address]placement{a1: rem(hostB, "ns/a1"), a2: loc("ns/a2"), a3: rem(hostB, "ns/a3")},
		plan: reconcilePlan{
			deleteLocal:  []fabric.LocalAttachment{la(a1)},
			createLocal:  []fabric.LocalAttachment{la(a2)},
			createRemote: []fabric.RemoteAttachment{ra(a1, hostB), ra(a3, hostB)},
			after:        map[address]placement{a1: rem(hostB, "ns/a1"), a2: loc("ns/a2"), a3: rem(hostB, "ns/a3")},
		},
	}, {
		name: "an address both local and remote on the switch",
		inv: fabric.Inventory{
			PartialLocal: []fabric.LocalAttachment{la(a1)},
			Remote:       []fabric.RemoteAttachment{ra(a1, hostA)},
		},
		want: map[address]placement{a1: rem(hostA, "ns/a1")},
		plan: reconcilePlan{
			deleteLocal:  []fabric.LocalAttachment{la(a1)},
			createRemote: []fabric.RemoteAttachment{ra(a1, hostA)},
			after:        map[address]placement{a1: rem(hostA, "ns/a1")},
		},
	}, {
		name: "networks not synced yet keep their remote attachments",
		inv: fabric.Inventory{
			Local:  []fabric.LocalAttachment{la(b1)},
			Remote: []fabric.RemoteAttachment{ra(b2, hostA), ra(a2, hostA)},
		},
		want:     map[address]placement{b1: loc("ns/b1")},
		deferred: []uint32{2},
		plan: reconcilePlan{
			adopted:      1,
			deferred:     1,
			deleteRemote: []fabric.RemoteAttachment{{VNI: a2.vni, IP: a2.ip}},
			after:        map[address]placement{b1: loc("ns/b1"), b2: rem(hostA, "")},
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			deferred := func(a address) bool {
				for _, v := range tc.deferred {
					if a.vni == v {
						return true
					}
				}
				return false
			}
			got := planReconcile(&tc.inv, tc.want, deferred)
			opts := cmp.Options{
				cmp.AllowUnexported(reconcilePlan{}, address{}, placement{}),
				cmpopts.EquateComparable(netip.Addr{}),
				cmpopts.EquateEmpty(),
			}
			if diff := cmp.Diff(got, tc.plan, opts); diff != "" {
				t.Errorf("planReconcile (-got +want):\n%s", diff)
			}
		})
	}
}

func TestScheduledReconcile(t *testing.T) {
	tests := []struct {
		failed, deferredSynced, periodDue bool
		want                              string
	}{
		{want: ""},
		{periodDue: true, want: reconcilePeriodic},
		{deferredSynced: true, want: reconcileDeferred},
		{deferredSynced: true, periodDue: true, want: reconcileDeferred},
		{failed: true, deferredSynced: true, periodDue: true, want: reconcileRetry},
		{failed: true, want: reconcileRetry},
	}
	for _, tc := range tests {
		if got := scheduledReconcile(tc.failed, tc.deferredSynced, tc.periodDue); got != tc.want {
			t.Errorf("scheduledReconcile(failed=%t, deferredSynced=%t, periodDue=%t) = %q, want %q",
				tc.failed, tc.deferredSynced, tc.periodDue, got, tc.want)
		}
	}
}

// TestPresentLocals checks which local attachments a reconcile counts as
// on the switch when it sweeps pods' veths: whole and partial ones, but
// not those it deleted.
func TestPresentLocals(t *testing.T) {
	a, b, c := fabric.LocalAttachment{VNI: 1, IP: netip.MustParseAddr("10.0.0.1")}, fabric.LocalAttachment{VNI: 1, IP: netip.MustParseAddr("10.0.0.2")}, fabric.LocalAttachment{VNI: 2, IP: netip.MustParseAddr("10.0.0.1")}
	inv := &fabric.Inventory{Local: []fabric.LocalAttachment{a, b}, PartialLocal: []fabric.LocalAttachment{c}}
	for _, tc := range []struct {
		name    string
		deleted []fabric.LocalAttachment
		want    []fabric.LocalAttachment
	}{
		{"none deleted", nil, []fabric.LocalAttachment{a, b, c}},
		{"one deleted", []fabric.LocalAttachment{b}, []fabric.LocalAttachment{a, c}},
		{"a partial one deleted", []fabric.LocalAttachment{c}, []fabric.LocalAttachment{a, b}},
	} {
		got := presentLocals(inv, tc.deleted)
		if diff := cmp.Diff(got, tc.want, cmp.Comparer(func(x, y netip.Addr) bool { return x == y })); diff != "" {
			t.Errorf("%s: present (-got +want):\n%s", tc.name, diff)
		}
	}
}
