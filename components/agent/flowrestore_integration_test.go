package agent_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/kos-sdn/kos/components/fabric"
	"github.com/kos-sdn/kos/components/fabric/ovs"
	"github.com/kos-sdn/kos/tools/poll"
)

// TestIntegrationOVSFlowRestoreWait restarts ovs-vswitchd under a running
// agent with other_config:flow-restore-wait set, as kos-ovs restarts it,
// and checks that the agent's reconcile for the lost flows puts them back
// and then removes the key, so that the switch forwards again.
func TestIntegrationOVSFlowRestoreWait(t *testing.T) {
	k := newAPI(t)
	const vni = 212
	k.subnet("s1", "10.212.0.0/24", vni)
	inst, fab := startOVS(t)
	agentA := startAgent(t, agentConfig(t, k.node("a"), hostA, fab))
	k.attachment("a1", k.node("a"), "s1")
	k.address("a1", "10.212.0.5", vni)
	k.remote("c1", k.node("c"), "s1", "10.212.0.6", vni, hostC)
	whole := &fabric.Inventory{
		Local:  []fabric.LocalAttachment{local(vni, "10.212.0.5")},
		Remote: []fabric.RemoteAttachment{remote(vni, "10.212.0.6", hostC)},
	}
	poll.Until(t, settle, "the switch is whole", holds(fab, whole))

	ctx := context.Background()
	key := "other_config:" + ovs.FlowRestoreWait
	if _, err := inst.Run(ctx, "ovs-vsctl", "--no-wait", "set", "Open_vSwitch", ".", key+"=true"); err != nil {
		t.Fatal(err)
	}
	if err := inst.RestartVSwitchd(ctx); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, settle, "the switch is whole again", holds(fab, whole))
	poll.Until(t, settle, "the agent removed "+key, func(ctx context.Context) error {
		out, err := inst.Run(ctx, "ovs-vsctl", "--if-exists", "get", "Open_vSwitch", ".", key)
		if err != nil {
			return err
		}
		if v := strings.TrimSpace(out); v != "" {
			return errors.New(key + " is " + v)
		}
		return nil
	})
	if n := agentA.counter(t, "kos_agent_reconciles_total", map[string]string{"reason": "flows_lost", "result": "ok"}); n < 1 {
		t.Errorf("no reconcile for lost flows")
	}
}
