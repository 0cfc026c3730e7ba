package ovs

import (
	"context"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strconv"

	goovs "github.com/digitalocean/go-openvswitch/ovs"
	"k8s.io/klog/v2"

	"github.com/kos-sdn/kos/components/fabric"
	"github.com/kos-sdn/kos/components/fabric/ovs/policy"
)

// SetPolicy replaces the flows of a network's policy in one bundle that
// deletes the old flows by their cookie and adds the new ones. OVS applies
// a bundle atomically (its classifier is versioned): a packet meets either
// the old flows or the new, so no denied connection can open while they
// change, and the flows that pass established connections are in both.
// A policy that isolates no attachment leaves no flows.
//
// SetPolicy returns once the flow tables hold the new policy. The
// datapath's flow cache follows a moment later, when Open vSwitch
// revalidates it (at once after a change, typically within milliseconds):
// until then a new connection may still meet the old policy. Waiting for
// that (ovs-appctl revalidator/wait) would cost up to a revalidation
// period, 500 ms by default, per call.
//
// When the network's gate comes or goes (its first policy, or its last
// one lifted), SetPolicy also flushes the datapath's flow cache
// (ovs-appctl revalidator/purge): Open vSwitch 3.1's userspace datapath
// was seen to keep, for as long as traffic used it, a cached flow that
// still sent a network's packets through conntrack to policy tables that
// no longer held anything (TestIntegrationPolicy, 2 runs in 3). The
// flush costs every network's cached flows a fresh lookup, once per such
// change. Calls for one network must not overlap.
func (f *Fabric) SetPolicy(ctx context.Context, p fabric.NetworkPolicy) error {
	c := policyCookie(p.VNI)
	flows, err := policy.Compile(p, policyPipeline(c))
	if err != nil {
		return fmt.Errorf("compiling the policy of VNI %d: %w", p.VNI, err)
	}
	had, err := f.hasGate(ctx, p.VNI)
	if err != nil {
		return err
	}
	// Until the call succeeds, the gate is whatever the switch says.
	f.setGate(p.VNI, false, false)
	if err := f.flows.apply(ctx, []*goovs.MatchFlow{flowsWithCookie(c)}, flows); err != nil {
		return fmt.Errorf("setting the policy of VNI %d: %w", p.VNI, err)
	}
	if had != (len(flows) > 0) {
		if _, err := f.ovs.appctl(ctx, "revalidator/purge"); err != nil {
			return fmt.Errorf("flushing the datapath's flows after setting the policy of VNI %d: %w", p.VNI, err)
		}
	}
	f.setGate(p.VNI, len(flows) > 0, true)
	klog.FromContext(ctx).V(4).Info("Set the policy of a network", "bridge", f.bridge, "vni", p.VNI, "policies", len(p.Policies), "flows", len(flows))
	return nil
}

// hasGate reports whether a network has policy flows on the bridge, by its
// gate: as the last SetPolicy left it, or, when none did since the fabric
// started or the switch lost its flows, as the switch says. Knowing it
// saves each policy update one run of ovs-ofctl (about a third of its
// time on the switch, see BenchmarkPolicyConvergence).
func (f *Fabric) hasGate(ctx context.Context, vni uint32) (bool, error) {
	f.mu.Lock()
	had, known := f.gates[vni]
	f.mu.Unlock()
	if known {
		return had, nil
	}
	out, err := f.ofctl(ctx, "dump-flows", f.bridge, fmt.Sprintf("cookie=%#x/-1,table=%d", policyCookie(vni), forwardTable))
	if err != nil {
		return false, fmt.Errorf("reading the policy of VNI %d: %w", vni, err)
	}
	return cookiePattern.Match(out), nil
}

// setGate records whether network vni's gate is on the switch, when known;
// otherwise it forgets it.
func (f *Fabric) setGate(vni uint32, on, known bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !known {
		delete(f.gates, vni)
		return
	}
	if f.gates == nil {
		f.gates = map[uint32]bool{}
	}
	f.gates[vni] = on
}

// forgetGates forgets what SetPolicy knew of every network's gate.
func (f *Fabric) forgetGates() {
	f.mu.Lock()
	f.gates = nil
	f.mu.Unlock()
}

// checkGates forgets what SetPolicy knew of the gates of networks where the
// switch, read just before, says otherwise (withGates are the networks
// with one): someone else changed them. It only forgets, so that a
// SetPolicy that ran after the read is at worst read again.
func (f *Fabric) checkGates(withGates []uint32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for vni, on := range f.gates {
		if on != slices.Contains(withGates, vni) {
			delete(f.gates, vni)
		}
	}
}

// cookiePattern finds the cookies in what ovs-ofctl dump-flows prints.
var cookiePattern = regexp.MustCompile(`cookie=0x([0-9a-f]+)`)

// policyVNIs returns the VNIs of the networks with policy on the bridge, by
// their gates. It reads only the cookies of what ovs-ofctl prints: the
// library's parser does not know every field of policy flows.
func (f *Fabric) policyVNIs(ctx context.Context) ([]uint32, error) {
	match, err := policyGates().MarshalText()
	if err != nil {
		return nil, fmt.Errorf("reading the networks with policy: %w", err)
	}
	out, err := f.ofctl(ctx, "dump-flows", f.bridge, string(match))
	if err != nil {
		return nil, fmt.Errorf("reading the networks with policy: %w", err)
	}
	var vnis []uint32
	for _, m := range cookiePattern.FindAllSubmatch(out, -1) {
		c, err := strconv.ParseUint(string(m[1]), 16, 64)
		if err != nil {
			continue
		}
		if kind, vni, _, ok := parseCookie(c); ok && kind == kindPolicy {
			vnis = append(vnis, vni)
		}
	}
	return vnis, nil
}

// PolicyDrops returns, for each of the node's attachments that a network's
// policy isolates for a direction, how many packets it dropped there: the
// counts of the isolated ports' drop flows, which Open vSwitch updates
// from the datapath about once a second. It reads every policy flow once.
func (f *Fabric) PolicyDrops(ctx context.Context) ([]fabric.PolicyDrop, error) {
	match := fmt.Sprintf("cookie=%#x/%#x", cookieMagic|kindPolicyBit, cookieMagicMask|kindMask)
	out, err := f.ofctl(ctx, "dump-flows", f.bridge, match)
	if err != nil {
		return nil, fmt.Errorf("reading the drops of policy: %w", err)
	}
	return parsePolicyDrops(out), nil
}

// NetworkPolicyDrops is PolicyDrops of network vni alone: it reads only
// that network's policy flows.
func (f *Fabric) NetworkPolicyDrops(ctx context.Context, vni uint32) ([]fabric.PolicyDrop, error) {
	out, err := f.ofctl(ctx, "dump-flows", f.bridge, fmt.Sprintf("cookie=%#x/-1", policyCookie(vni)))
	if err != nil {
		return nil, fmt.Errorf("reading the drops of the policy of VNI %d: %w", vni, err)
	}
	return parsePolicyDrops(out), nil
}

// isolatedDropPattern finds an isolated port's drop flow in what ovs-ofctl
// dump-flows prints, and its packet count, VNI, direction and MAC.
var isolatedDropPattern = regexp.MustCompile(`\bn_packets=(\d+),.*\bpriority=` + strconv.Itoa(policy.IsolatedPriority) +
	`,ip,tun_id=0x([0-9a-f]+),dl_(src|dst)=([0-9a-f:]{17}) actions=drop`)

// parsePolicyDrops reads the isolated ports' drop flows of a dump.
func parsePolicyDrops(out []byte) []fabric.PolicyDrop {
	var drops []fabric.PolicyDrop
	for _, m := range isolatedDropPattern.FindAllSubmatch(out, -1) {
		packets, err1 := strconv.ParseUint(string(m[1]), 10, 64)
		vni, err2 := strconv.ParseUint(string(m[2]), 16, 32)
		mac, err3 := net.ParseMAC(string(m[4]))
		if err1 != nil || err2 != nil || err3 != nil {
			continue
		}
		drops = append(drops, fabric.PolicyDrop{VNI: uint32(vni), MAC: mac, Egress: string(m[3]) == "src", Packets: packets})
	}
	return drops
}
