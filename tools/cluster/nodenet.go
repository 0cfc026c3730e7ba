package cluster

// This file gives nodes their networks: the underlay a cluster's nodes
// share with the host, free subnets for it and for pods, and each node's
// namespace, veth pair, addresses and routes, set up and restored.

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/kos-sdn/kos/tools/ovsenv"
)

// Where the zero values of Options.Underlay and NodeOptions.PodCIDR pick
// networks from: a /27 per cluster, a /24 per node.
var (
	linkPool = netip.MustParsePrefix("192.168.250.0/24")
	podPool  = netip.MustParsePrefix("10.244.0.0/16")
)

// underlayBits is the size of the underlay networks picked from linkPool:
// room for the host and 29 nodes, and eight clusters at once.
const underlayBits = 27

// underlay is the network a cluster's nodes share with the host.
type underlay struct {
	// Prefix is the network; the zero value picks a free one.
	Prefix netip.Prefix
	// Bridge names the host bridge; "" names a new one.
	Bridge string
}

// lastAddr is the last address of p, its broadcast address.
func lastAddr(p netip.Prefix) netip.Addr {
	a := p.Masked().Addr().As4()
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	v |= uint32(1)<<(32-p.Bits()) - 1
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// hostNetworks lists the IPv4 networks of the host's addresses and routes.
func hostNetworks(ctx context.Context) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, args := range [][]string{{"-4", "-o", "addr", "show"}, {"-4", "route", "show", "table", "all"}} {
		said, err := exec.CommandContext(ctx, "ip", args...).Output()
		if err != nil {
			return nil, fmt.Errorf("listing the host's networks (ip %s): %w", strings.Join(args, " "), err)
		}
		for field := range strings.FieldsSeq(string(said)) {
			if p, err := netip.ParsePrefix(field); err == nil && p.Addr().Is4() {
				out = append(out, p.Masked())
			} else if a, err := netip.ParseAddr(field); err == nil && a.Is4() {
				out = append(out, netip.PrefixFrom(a, 32))
			}
		}
	}
	// The default route overlaps everything and says nothing about
	// which addresses are taken.
	return slices.DeleteFunc(out, func(p netip.Prefix) bool { return p.Bits() == 0 }), nil
}

// freeSubnet returns the first subnet of pool with the given prefix length
// that overlaps none of used.
func freeSubnet(pool netip.Prefix, bits int, used []netip.Prefix) (netip.Prefix, error) {
	size := uint32(1) << (32 - bits)
	count := uint32(1) << (bits - pool.Bits())
	base := pool.Masked().Addr().As4()
	start := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3])
	for i := range count {
		v := start + i*size
		candidate := netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), bits)
		if !slices.ContainsFunc(used, candidate.Overlaps) {
			return candidate, nil
		}
	}
	return netip.Prefix{}, fmt.Errorf("every /%d of %s is in use", bits, pool)
}

// setUpNetwork creates the node's network namespace and the veth pair that
// joins it to the underlay bridge (which the first node creates, with the
// host's address), addresses the node's end and routes the node's pod
// network to it: from the host, and from the peers, the cluster's nodes
// set up before, whose pod networks the node routes to them in turn.
// Nothing routes anywhere else: the node has no default route.
func (n *nodeState) setUpNetwork(ctx context.Context, peers []*nodeState) error {
	ns, err := ovsenv.NewNetns(ctx, n.Netns)
	if err != nil {
		return err
	}
	bits := strconv.Itoa(n.Link.Bits())
	var steps [][]string
	if len(peers) == 0 {
		steps = append(steps,
			[]string{"ip", "link", "add", n.Bridge, "type", "bridge"},
			[]string{"ip", "addr", "add", n.hostIP().String() + "/" + bits, "dev", n.Bridge},
			[]string{"ip", "link", "set", n.Bridge, "up"},
		)
	}
	steps = append(steps,
		[]string{"ip", "link", "add", n.HostLink, "type", "veth", "peer", "name", "eth0", "netns", ns.Name},
		[]string{"ip", "link", "set", n.HostLink, "master", n.Bridge},
		[]string{"ip", "link", "set", n.HostLink, "up"},
		[]string{"ip", "netns", "exec", ns.Name, "ip", "addr", "add", n.nodeIP().String() + "/" + bits, "dev", "eth0"},
		[]string{"ip", "netns", "exec", ns.Name, "ip", "link", "set", "eth0", "up"},
		[]string{"ip", "route", "add", n.PodCIDR.String(), "via", n.nodeIP().String(), "dev", n.Bridge},
		[]string{"ip", "netns", "exec", ns.Name, "ip", "route", "add", serviceCIDR.String(), "dev", "lo", "src", n.nodeIP().String()},
	)
	for _, p := range peers {
		steps = append(steps,
			[]string{"ip", "netns", "exec", ns.Name, "ip", "route", "add", p.PodCIDR.String(), "via", p.nodeIP().String(), "dev", "eth0"},
			[]string{"ip", "netns", "exec", p.Netns, "ip", "route", "add", n.PodCIDR.String(), "via", n.nodeIP().String(), "dev", "eth0"},
		)
	}
	for _, step := range steps {
		if said, err := exec.CommandContext(ctx, step[0], step[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("setting up the node's network (%s: %s): %w", strings.Join(step, " "), bytes.TrimSpace(said), err)
		}
	}
	return nil
}

// restoreNetwork gives the node's network namespace what a rebooted node
// has: eth0 alone, with its address and routes, and no neighbours. It
// returns the names of the interfaces it deleted.
//
// The namespace outlives the stop, and so can what the node's processes
// made in it. A reboot loses all of it, and a node that kept it would start
// with state no real node has:
//   - the KOS agent's Open vSwitch moves the underlay address onto its
//     bridge br-ul with the userspace datapath, and that bridge's device
//     outlives the daemon, holding the address while nothing switches its
//     packets;
//   - the pod network's bridge cni0 and the host ends of the pods' veths
//     stay as long as a pod's network namespace does, and each still
//     answers for the address it had. The pod addresses are handed out
//     anew after the stop (forgetRuntimeState), so a new pod given such an
//     address would share it with a ghost on the same bridge; deleting a
//     host end deletes its pod end too;
//   - the neighbour table would still map pod addresses to the MACs of
//     pods that are gone.
func (n *nodeState) restoreNetwork(ctx context.Context, peers []*nodeState) ([]string, error) {
	ns := &ovsenv.Netns{Name: n.Netns}
	out, err := ns.Run(ctx, "ip", "-o", "link", "show")
	if err != nil {
		return nil, fmt.Errorf("restoring node %s's network: %w", n.Name, err)
	}
	var deleted []string
	for _, name := range linkNames(out) {
		if name == "lo" || name == "eth0" {
			continue
		}
		if _, err := ns.Run(ctx, "ip", "link", "delete", name); err != nil {
			// The other end of a veth deleted just before goes with it.
			if strings.Contains(err.Error(), "Cannot find device") {
				continue
			}
			return deleted, fmt.Errorf("restoring node %s's network: %w", n.Name, err)
		}
		deleted = append(deleted, name)
	}
	bits := strconv.Itoa(n.Link.Bits())
	steps := [][]string{
		{"ip", "neigh", "flush", "all"},
		{"ip", "addr", "replace", n.nodeIP().String() + "/" + bits, "dev", "eth0"},
		{"ip", "link", "set", "eth0", "up"},
		{"ip", "route", "replace", serviceCIDR.String(), "dev", "lo", "src", n.nodeIP().String()},
	}
	for _, p := range peers {
		steps = append(steps, []string{"ip", "route", "replace", p.PodCIDR.String(), "via", p.nodeIP().String(), "dev", "eth0"})
	}
	for _, step := range steps {
		if _, err := ns.Run(ctx, step[0], step[1:]...); err != nil {
			return deleted, fmt.Errorf("restoring node %s's network: %w", n.Name, err)
		}
	}
	return deleted, nil
}

// linkNames returns the interface names in the output of `ip -o link show`,
// without the "@peer" of a veth's or a VLAN's name.
func linkNames(out string) []string {
	var names []string
	for line := range strings.SplitSeq(out, "\n") {
		_, rest, ok := strings.Cut(line, ": ")
		if !ok {
			continue
		}
		name, _, _ := strings.Cut(rest, ":")
		name, _, _ = strings.Cut(name, "@")
		if name = strings.TrimSpace(name); name != "" {
			names = append(names, name)
		}
	}
	return names
}

// deleteLink deletes a network interface of the host, if it is there.
func deleteLink(name string) error {
	if name == "" {
		return nil
	}
	if _, err := os.Stat(filepath.Join("/sys/class/net", name)); err != nil {
		return nil
	}
	said, err := exec.Command("ip", "link", "delete", name).CombinedOutput()
	if err != nil && !bytes.Contains(said, []byte("Cannot find device")) {
		return fmt.Errorf("deleting link %s (%s): %w", name, bytes.TrimSpace(said), err)
	}
	return nil
}
