package agent_test

import (
	"context"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"testing"

	"github.com/kos-sdn/kos/components/fabric"
	"github.com/kos-sdn/kos/components/fabric/ovs"
	"github.com/kos-sdn/kos/tools/ovsenv"
	"github.com/kos-sdn/kos/tools/poll"
)

// hasMTU returns a check that an attachment's interface has MTU mtu: asked
// of OVS, on the device, and in the attachment's status.mtu.
func (a *api) hasMTU(inst *ovsenv.Instance, name string, mtu int) func(context.Context) error {
	return func(ctx context.Context) error {
		att := a.get(name)
		if att.Status.MTU != int32(mtu) {
			return fmt.Errorf("status.mtu of %s is %d, want %d", name, att.Status.MTU, mtu)
		}
		ifc := att.Status.IfcName
		req, err := inst.Run(ctx, "ovs-vsctl", "get", "Interface", ifc, "mtu_request")
		if err != nil {
			return err
		}
		dev, err := inst.Netns.Run(ctx, "cat", "/sys/class/net/"+ifc+"/mtu")
		if err != nil {
			return err
		}
		if want := strconv.Itoa(mtu); req != want || dev != want {
			return fmt.Errorf("interface %s of %s has mtu_request %s and MTU %s, want %s", ifc, name, req, dev, want)
		}
		return nil
	}
}

// TestIntegrationOVSMTU runs an agent whose fabric has the MTU of a
// 1500-byte underlay and checks that the interface of a local attachment gets
// it and its status reports it; then an agent restarted with another MTU
// (--mtu changed) moves the interface and the status to its own.
func TestIntegrationOVSMTU(t *testing.T) {
	k := newAPI(t)
	const vni = 231
	k.subnet("s1", "10.231.0.0/24", vni)
	inst, fab := startOVS(t)
	first := startAgent(t, agentConfig(t, k.node("a"), hostA, fab))
	if got, want := first.agent.MTU(), 1450; got != want {
		t.Errorf("the agent's MTU is %d, want %d", got, want)
	}
	k.attachment("a1", k.node("a"), "s1")
	k.address("a1", "10.231.0.5", vni)
	poll.Until(t, settle, "a1 is ready", k.ready("a1", hostA))
	poll.Until(t, settle, "a1 has MTU 1450", k.hasMTU(inst, "a1", 1450))
	first.stop(t)

	restarted := ovs.New(ovs.Config{RunDir: inst.RunDir, DatapathType: "netdev", MTU: 1400})
	startAgent(t, agentConfig(t, k.node("a"), hostA, restarted))
	poll.Until(t, settle, "a1 has MTU 1400", k.hasMTU(inst, "a1", 1400))
	poll.Until(t, settle, "the switch holds a1 whole", holds(restarted, &fabric.Inventory{
		Local: []fabric.LocalAttachment{local(vni, "10.231.0.5")},
	}))
}

// pingReceived matches ping's summary, such as "3 packets transmitted, 3
// received, 0% packet loss".
var pingReceived = regexp.MustCompile(`(\d+) packets transmitted, (\d+) received`)

// reachesFullSize returns a check that from reaches to with three pings of
// the largest packet testMTU allows, not to be fragmented.
func reachesFullSize(from *ovsenv.Netns, to netip.Addr) func(context.Context) error {
	const count = "3"
	size := strconv.Itoa(testMTU - 28) // less the IPv4 and ICMP headers
	return func(ctx context.Context) error {
		out, _ := from.Command(ctx, "ping", "-n", "-q", "-i", "0.2", "-M", "do", "-s", size, "-c", count, "-W", "1", to.String()).CombinedOutput()
		// ping exits 1 when replies are missing, which the summary says.
		if m := pingReceived.FindSubmatch(out); m == nil || string(m[2]) != count {
			return fmt.Errorf("ping -M do -s %s from %s to %v: %s", size, from.Name, to, out)
		}
		return nil
	}
}
