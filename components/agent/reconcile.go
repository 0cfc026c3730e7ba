package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"k8s.io/klog/v2"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/fabric"
)

// Reasons for a full reconcile, in metrics and logs.
const (
	reconcileStart     = "start"
	reconcileFlowsLost = "flows_lost"
	reconcilePeriodic  = "periodic"
	reconcileRetry     = "retry"
	// reconcileDeferred follows a reconcile that left addresses alone
	// because their networks' informers had not synced, once they have.
	reconcileDeferred = "deferred"
)

// checkFabric asks the fabric every flowCheckPeriod whether it lost its
// flows, and reconciles fully when it did, every reconcilePeriod, after a
// reconcile that failed, and after one that deferred addresses once every
// network has synced (deferred says whether the start's reconcile did). It
// returns when ctx is done.
func (a *Agent) checkFabric(ctx context.Context, deferred bool) {
	ticker := time.NewTicker(a.flowCheckPeriod)
	defer ticker.Stop()
	last, retry := time.Now(), false
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		reason := scheduledReconcile(retry, deferred && a.state.networksSynced(), time.Since(last) >= a.reconcilePeriod)
		if reason == "" {
			lost, err := a.ensure(ctx)
			if err != nil {
				klog.FromContext(ctx).Error(err, "Checking the fabric failed")
				continue
			}
			if !lost {
				continue
			}
			reason = reconcileFlowsLost
		}
		ok, kept := a.reconcileFabric(ctx, reason)
		retry, deferred = !ok, kept
		if ok {
			last = time.Now()
		}
	}
}

// scheduledReconcile returns why a full reconcile is due without asking the
// fabric, or "" when none is: a failed one is retried first; one that left
// addresses to networks that have synced since goes next, as only a full
// reconcile removes what no attachment claims (an orphan would otherwise
// stay until the periodic one); then the periodic one.
func scheduledReconcile(failed, deferredSynced, periodDue bool) string {
	switch {
	case failed:
		return reconcileRetry
	case deferredSynced:
		return reconcileDeferred
	case periodDue:
		return reconcilePeriodic
	}
	return ""
}

// ensure asks the fabric to make its bridge and default flows exist, and
// reports whether its flows were lost. It records the outcome for Healthy.
func (a *Agent) ensure(ctx context.Context) (bool, error) {
	var lost bool
	err := a.timed("ensure", func() error {
		var err error
		lost, err = a.fabric.Ensure(ctx)
		return err
	})
	a.health.checked(err)
	if err != nil {
		return false, err
	}
	if lost {
		klog.FromContext(ctx).Info("The fabric lost its flows")
	}
	return lost, nil
}

// reconcileFabric makes the fabric hold exactly what the caches want, with
// the fabric to itself: it lists what the fabric holds, adopts what
// matches, deletes orphans and creates or repairs the rest, in four
// batches. Attachments whose placement changed are enqueued, for their
// status. It handles a failure itself, logging and counting it, and reports
// whether the reconcile succeeded and whether it left addresses as they
// were because their networks' informers had not synced.
func (a *Agent) reconcileFabric(ctx context.Context, reason string) (ok, deferred bool) {
	a.fabricMu.Lock()
	defer a.fabricMu.Unlock()
	kept, err := a.reconcileLocked(ctx, reason)
	result := "ok"
	if err != nil {
		result = "error"
		klog.FromContext(ctx).Error(err, "Reconciling the fabric failed", "reason", reason)
	}
	a.metrics.reconciles.WithLabelValues(reason, result).Inc()
	a.lastReconcile.set(reason, err)
	return err == nil, kept > 0
}

// reconcileLocked is reconcileFabric's work, with a.fabricMu held; it
// returns how many addresses it deferred.
func (a *Agent) reconcileLocked(ctx context.Context, reason string) (int, error) {
	began := time.Now()
	lost, err := a.ensure(ctx)
	if err != nil {
		return 0, err
	}
	var inv *fabric.Inventory
	err = a.timed("list", func() error {
		var err error
		inv, err = a.fabric.List(ctx)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("listing the fabric: %w", err)
	}
	if a.policy != nil {
		a.policy.Reconciled(inv.Policies)
	}
	want, claimants, deferred := a.wantedAll()
	plan := planReconcile(inv, want, deferred)

	var errs []error
	failed := func(err error, addrs []address) {
		errs = append(errs, err)
		for _, addr := range addrs {
			plan.after[addr] = placement{kind: unknown, owner: want[addr].owner}
		}
	}
	if len(plan.repairPod) > 0 {
		if err := a.planRepairPods(ctx, &plan); err != nil {
			failed(err, localAddresses(plan.repairPod))
		}
	}
	var deletedLocal []fabric.LocalAttachment
	if len(plan.deleteLocal) > 0 {
		if err := a.timed(opDeleteLocal.String(), func() error { return a.fabric.DeleteLocal(ctx, plan.deleteLocal...) }); err != nil {
			failed(fmt.Errorf("deleting %d local attachments: %w", len(plan.deleteLocal), err), localAddresses(plan.deleteLocal))
		} else {
			deletedLocal = plan.deleteLocal
		}
	}
	if len(plan.deleteRemote) > 0 {
		if err := a.timed(opDeleteRemote.String(), func() error { return a.fabric.DeleteRemote(ctx, plan.deleteRemote...) }); err != nil {
			failed(fmt.Errorf("deleting %d remote attachments: %w", len(plan.deleteRemote), err), remoteAddresses(plan.deleteRemote))
		}
	}
	// Before the creates: a veth left by an attachment taken off the
	// switch blocks the interface of the next one with its address.
	if err := a.sweepVeths(ctx, presentLocals(inv, deletedLocal)); err != nil {
		errs = append(errs, fmt.Errorf("sweeping pods' veths: %w", err))
	}
	if len(plan.createLocal) > 0 {
		if err := a.timed(opCreateLocal.String(), func() error { return a.fabric.CreateLocal(ctx, plan.createLocal...) }); err != nil {
			failed(fmt.Errorf("creating %d local attachments: %w", len(plan.createLocal), err), localAddresses(plan.createLocal))
		}
	}
	remoteCreated := false
	if len(plan.createRemote) > 0 {
		if err := a.timed(opCreateRemote.String(), func() error { return a.fabric.CreateRemote(ctx, plan.createRemote...) }); err != nil {
			failed(fmt.Errorf("creating %d remote attachments: %w", len(plan.createRemote), err), remoteAddresses(plan.createRemote))
		} else {
			remoteCreated = true
		}
	}
	programmed := time.Now()
	// A switch restarted to wait for its flows (flow-restore-wait) forwards
	// nothing new until told they are back, which they are now, as far as
	// this reconcile could: a batch that failed is retried by the next
	// reconcile, which the rest of the node's traffic need not wait for.
	if r, ok := a.fabric.(flowsRestorer); ok {
		if err := r.FlowsRestored(ctx); err != nil {
			errs = append(errs, err)
		}
	}

	old := a.state.replaceInstalled(plan.after)
	if remoteCreated {
		for _, r := range plan.createRemote {
			addr := address{r.VNI, r.IP}
			if newlyRemote(old[addr], plan.after[addr]) {
				a.observeDissemination(claimants[addr], programmed)
			}
		}
	}
	// Attachments that gained or lost their place must see to their status.
	for addr, p := range plan.after {
		if o := old[addr]; o.owner != p.owner || !o.sameOnSwitch(p) {
			for _, owner := range []string{o.owner, p.owner} {
				if owner != "" {
					a.queue.Add(owner)
				}
			}
		}
	}
	for addr, o := range old {
		if _, ok := plan.after[addr]; !ok && o.owner != "" {
			a.queue.Add(o.owner)
		}
	}
	klog.FromContext(ctx).Info("Reconciled the fabric", "reason", reason, "flowsLost", lost,
		"adopted", plan.adopted,
		"deletedLocal", len(plan.deleteLocal), "deletedRemote", len(plan.deleteRemote),
		"createdLocal", len(plan.createLocal), "createdRemote", len(plan.createRemote),
		"deferred", plan.deferred, "duration", time.Since(began))
	return plan.deferred, errors.Join(errs...)
}

// planRepairPods turns the plan's repairs of pods' partial local
// attachments into its batches: one whose port is the pod's plugged veth
// has its flows repaired (CreateLocal keeps a plugged port); one without
// (its veth gone at a reboot, or never plugged) has whatever is there
// deleted, and waits for the CNI server's plug.
func (a *Agent) planRepairPods(ctx context.Context, plan *reconcilePlan) error {
	plugged, err := a.pluggedVeths(ctx, plan.repairPod...)
	if err != nil {
		return fmt.Errorf("reading the ports of %d pods' partial attachments: %w", len(plan.repairPod), err)
	}
	for _, l := range plan.repairPod {
		if plugged[l] {
			plan.createLocal = append(plan.createLocal, l)
			continue
		}
		plan.deleteLocal = append(plan.deleteLocal, l)
		plan.deleteRemote = append(plan.deleteRemote, fabric.RemoteAttachment{VNI: l.VNI, IP: l.IP})
	}
	return nil
}

// flowsRestorer is a fabric whose switch may wait, after a restart, until
// told that its flows are back before it forwards again (the OVS fabric:
// Open vSwitch's flow-restore-wait).
type flowsRestorer interface {
	FlowsRestored(ctx context.Context) error
}

func localAddresses(atts []fabric.LocalAttachment) []address {
	addrs := make([]address, len(atts))
	for i, l := range atts {
		addrs[i] = address{l.VNI, l.IP}
	}
	return addrs
}

func remoteAddresses(atts []fabric.RemoteAttachment) []address {
	addrs := make([]address, len(atts))
	for i, r := range atts {
		addrs[i] = address{r.VNI, r.IP}
	}
	return addrs
}

// wantedAll returns what the fabric should hold at every address, from the
// caches, by the rules of wanted, and the attachment that claims each. The
// function it also returns reports the addresses of networks whose
// informers have not synced yet, about which the caches cannot tell.
func (a *Agent) wantedAll() (map[address]placement, map[address]*v1alpha1.NetworkAttachment, func(address) bool) {
	want := map[address]placement{}
	winners := map[address]*v1alpha1.NetworkAttachment{}
	for _, obj := range a.localInformer.GetStore().List() {
		att := obj.(*v1alpha1.NetworkAttachment)
		addr, ok := addressOf(att)
		if !ok {
			continue
		}
		if w := winners[addr]; w == nil || newer(att, w) {
			winners[addr] = att
			want[addr] = a.localPlacement(att)
		}
	}
	synced, unsynced := a.state.syncedNetworks()
	for _, inf := range synced {
		for _, obj := range inf.GetStore().List() {
			att := obj.(*v1alpha1.NetworkAttachment)
			addr, ok := addressOf(att)
			if !ok {
				continue
			}
			host, ok := a.remoteHost(att)
			if !ok || want[addr].kind == local {
				continue
			}
			if w := winners[addr]; w == nil || newer(att, w) {
				winners[addr] = att
				want[addr] = placement{kind: remote, hostIP: host, owner: keyOf(att)}
			}
		}
	}
	return want, winners, func(addr address) bool { return unsynced.Has(addr.vni) }
}

// presentLocals returns the local attachments of inv, whole or partial,
// but those deleted.
func presentLocals(inv *fabric.Inventory, deleted []fabric.LocalAttachment) []fabric.LocalAttachment {
	gone := map[fabric.LocalAttachment]bool{}
	for _, d := range deleted {
		gone[d] = true
	}
	var out []fabric.LocalAttachment
	for _, l := range slices.Concat(inv.Local, inv.PartialLocal) {
		if !gone[l] {
			out = append(out, l)
		}
	}
	return out
}
