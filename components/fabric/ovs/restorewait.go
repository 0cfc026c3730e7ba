package ovs

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/klog/v2"
)

// FlowRestoreWait is the key of the Open_vSwitch table's other_config that,
// "true" when ovs-vswitchd starts, makes it keep the datapath's flows and
// neither forward nor set up new flows until the key is set to false or
// removed: whoever restarts ovs-vswitchd sets it (kos-ovs does), and the
// agent removes it once it has put the flows back (FlowsRestored). With
// the kernel datapath, traffic that matched the kernel's flows before the
// restart keeps flowing meanwhile; the userspace datapath lives in
// ovs-vswitchd and starts empty, so there the key only keeps the switch
// from forwarding on a half-restored flow table.
const FlowRestoreWait = "flow-restore-wait"

// FlowsRestored ends the switch's flow-restore-wait, if it waits: the
// caller has just put back every flow it wants. It changes nothing when the
// key is not set, so that calling it after every reconcile costs one read.
func (f *Fabric) FlowsRestored(ctx context.Context) error {
	waiting, err := f.ovs.flowRestoreWait(ctx)
	if err != nil || !waiting {
		return err
	}
	// ovs-vsctl waits until ovs-vswitchd has applied the change: once it
	// returns, the switch forwards.
	if _, err := f.ovs.vsctl(ctx, "remove", "Open_vSwitch", ".", "other_config", FlowRestoreWait); err != nil {
		return fmt.Errorf("ending the switch's %s: %w", FlowRestoreWait, err)
	}
	klog.FromContext(ctx).Info("Ended the switch's wait for its flows", "key", FlowRestoreWait)
	return nil
}

// flowRestoreWait reports whether the database says ovs-vswitchd waits for
// its flows to be restored.
func (c *ovsClient) flowRestoreWait(ctx context.Context) (bool, error) {
	out, err := c.vsctl(ctx, "--if-exists", "get", "Open_vSwitch", ".", "other_config:"+FlowRestoreWait)
	if err != nil {
		return false, fmt.Errorf("reading the switch's %s: %w", FlowRestoreWait, err)
	}
	return strings.Trim(strings.TrimSpace(string(out)), `"`) == "true", nil
}
