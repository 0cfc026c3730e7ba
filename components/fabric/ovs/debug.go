package ovs

// This file reads the switch for people debugging it (kos-agent's /debug
// endpoints): the flows as ovs-ofctl prints them, the tunnels, Open
// vSwitch's routes, and ofproto/trace of a packet a local attachment sends.
// Nothing here changes the switch.

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/fabric"
)

// The protocols of a traced packet, as ofproto/trace's flow syntax names
// them.
const (
	TraceICMP = "icmp"
	TraceTCP  = "tcp"
	TraceUDP  = "udp"
	TraceARP  = "arp"
)

// defaultRunDir is where Open vSwitch keeps its sockets when OVS_RUNDIR is
// not set, as Debian's package builds it.
const defaultRunDir = "/var/run/openvswitch"

// Packet is a packet that a local attachment sends, for Trace.
type Packet struct {
	// From is the attachment that sends it, through its port.
	From fabric.LocalAttachment
	// To is the IPv4 address it is for, in From's virtual network: the
	// packet goes to the MAC address of To in that network, as the
	// attachment's ARP would find it.
	To netip.Addr
	// Protocol is TraceICMP (an echo request), TraceTCP, TraceUDP or
	// TraceARP (a request for To).
	Protocol string
	// Port is the destination port of TCP and UDP.
	Port int
}

// traceSourcePort is the source port of traced TCP and UDP packets: any
// port of the ephemeral range does, as no flow of KOS matches on it.
const traceSourcePort = 40000

// traceFlow returns the flow, in ofproto/trace's syntax, of p arriving
// from OpenFlow port port. Every field comes from a parsed value, never
// from text a caller gave.
func traceFlow(p Packet, port int) (string, error) {
	var errs []error
	if err := p.From.Validate(); err != nil {
		errs = append(errs, err)
	}
	if !p.To.Is4() {
		errs = append(errs, fmt.Errorf("destination %v is not an IPv4 address", p.To))
	}
	if port <= 0 {
		errs = append(errs, fmt.Errorf("port number %d is not an OpenFlow port", port))
	}
	switch p.Protocol {
	case TraceICMP, TraceARP:
	case TraceTCP, TraceUDP:
		if p.Port < 1 || p.Port > 65535 {
			errs = append(errs, fmt.Errorf("%s port %d is not in [1,65535]", p.Protocol, p.Port))
		}
	default:
		errs = append(errs, fmt.Errorf("protocol %q is none of %s, %s, %s, %s", p.Protocol, TraceICMP, TraceTCP, TraceUDP, TraceARP))
	}
	if err := errors.Join(errs...); err != nil {
		return "", err
	}
	src := p.From.MAC().String()
	from := p.From.IP.String()
	if p.Protocol == TraceARP {
		return fmt.Sprintf("arp,in_port=%d,dl_src=%s,dl_dst=ff:ff:ff:ff:ff:ff,arp_op=1,arp_sha=%s,arp_spa=%s,arp_tha=00:00:00:00:00:00,arp_tpa=%s",
			port, src, src, from, p.To), nil
	}
	dst := v1alpha1.MACAddress(p.From.VNI, p.To).String()
	flow := fmt.Sprintf("%s,in_port=%d,dl_src=%s,dl_dst=%s,nw_src=%s,nw_dst=%s,nw_ttl=64", p.Protocol, port, src, dst, from, p.To)
	switch p.Protocol {
	case TraceICMP:
		flow += ",icmp_type=8,icmp_code=0"
	default:
		flow += fmt.Sprintf(",tp_src=%d,tp_dst=%d", traceSourcePort, p.Port)
	}
	return flow, nil
}

// Trace returns what ovs-appctl ofproto/trace says the bridge does with
// packet p, which enters by the port of its attachment: a line with the
// packet as it was traced, then the trace.
func (f *Fabric) Trace(ctx context.Context, p Packet) (string, error) {
	if err := p.From.Validate(); err != nil {
		return "", err
	}
	name := p.From.InterfaceName()
	rows, err := f.ovs.interfacesIfExist(ctx, name)
	if err != nil {
		return "", err
	}
	if len(rows) != 1 || rows[0].OFPort <= 0 {
		return "", fmt.Errorf("attachment %v has no port on bridge %s (interface %s)", p.From, f.bridge, name)
	}
	flow, err := traceFlow(p, rows[0].OFPort)
	if err != nil {
		return "", err
	}
	out, err := f.ovs.appctl(ctx, "ofproto/trace", f.bridge, flow)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("Packet: %s (port %d is %s)\n\n%s", flow, rows[0].OFPort, name, out), nil
}

// DumpFlows returns every flow of the bridge, KOS's and any others, with
// their counters, as ovs-ofctl dump-flows prints them.
func (f *Fabric) DumpFlows(ctx context.Context) (string, error) {
	out, err := f.ofctl(ctx, "dump-flows", f.bridge)
	return string(out), err
}

// FlowCount returns how many flows the bridge has, KOS's and any others.
func (f *Fabric) FlowCount(ctx context.Context) (int, error) {
	out, err := f.ofctl(ctx, "dump-aggregate", f.bridge)
	if err != nil {
		return 0, err
	}
	return parseFlowCount(out)
}

var flowCountPattern = regexp.MustCompile(`\bflow_count=(\d+)`)

// parseFlowCount reads the flow count of what ovs-ofctl dump-aggregate
// prints, such as "OFPST_AGGREGATE reply (OF1.4) (xid=0x2):
// packet_count=0 byte_count=0 flow_count=4".
func parseFlowCount(out []byte) (int, error) {
	m := flowCountPattern.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("ovs-ofctl dump-aggregate printed no flow count: %q", out)
	}
	return strconv.Atoi(string(m[1]))
}

// Tunnels returns the switch's bridges and ports as ovs-vsctl show prints
// them (with the tunnel port's options), the tunnel ports ovs-vswitchd
// has set up, and the neighbours it resolved for tunnels.
func (f *Fabric) Tunnels(ctx context.Context) (string, error) {
	var b strings.Builder
	show, err := f.ovs.vsctl(ctx, "show")
	if err != nil {
		return "", err
	}
	fmt.Fprintf(&b, "# ovs-vsctl show\n%s\n", show)
	for _, args := range [][]string{{"tnl/ports/show", "-v"}, {"tnl/neigh/show"}} {
		out, err := f.ovs.appctl(ctx, args...)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "# ovs-appctl %s\n%s\n", strings.Join(args, " "), out)
	}
	return b.String(), nil
}

// Routes returns Open vSwitch's route table, by which tunnel packets leave
// (ovs-appctl ovs/route/show): the userspace datapath routes by it alone.
func (f *Fabric) Routes(ctx context.Context) (string, error) {
	out, err := f.ovs.appctl(ctx, "ovs/route/show")
	return string(out), err
}

// ofctl runs ovs-ofctl with OpenFlow 1.4, as the rest of the fabric speaks.
func (f *Fabric) ofctl(ctx context.Context, args ...string) ([]byte, error) {
	stdout, stderr, err := f.ovs.run(ctx, nil, "ovs-ofctl", append([]string{"-O", "OpenFlow14"}, args...)...)
	if err != nil {
		return nil, commandError("ovs-ofctl", stderr, err)
	}
	return stdout, nil
}

// appctl runs ovs-appctl against ovs-vswitchd. It names the daemon's
// control socket by path: ovs-appctl's own lookup by name checks the pid
// file's lock against the pid it holds, which fails where ovs-vswitchd
// runs in another pid namespace, such as the agent pod's other container.
func (c *ovsClient) appctl(ctx context.Context, args ...string) ([]byte, error) {
	runDir := c.runDir()
	pid, err := os.ReadFile(filepath.Join(runDir, "ovs-vswitchd.pid"))
	if err != nil {
		return nil, fmt.Errorf("finding ovs-vswitchd: %w", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(pid)))
	if err != nil || n <= 0 {
		return nil, fmt.Errorf("finding ovs-vswitchd: pid file %s holds %q", filepath.Join(runDir, "ovs-vswitchd.pid"), pid)
	}
	target := filepath.Join(runDir, fmt.Sprintf("ovs-vswitchd.%d.ctl", n))
	stdout, stderr, err := c.run(ctx, nil, "ovs-appctl", append([]string{"-t", target}, args...)...)
	if err != nil {
		return nil, commandError("ovs-appctl "+args[0], stderr, err)
	}
	return stdout, nil
}

// runDir returns the run dir of the Open vSwitch c talks to: the last
// OVS_RUNDIR of its environment, which is the one its commands see.
func (c *ovsClient) runDir() string {
	for i := len(c.env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(c.env[i], "OVS_RUNDIR="); ok && v != "" {
			return v
		}
	}
	return defaultRunDir
}

func commandError(name string, stderr []byte, err error) error {
	if said := strings.TrimSpace(string(stderr)); said != "" {
		return fmt.Errorf("%s said %q: %w", name, said, err)
	}
	return fmt.Errorf("%s: %w", name, err)
}
