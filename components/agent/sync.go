package agent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kos-sdn/kos/components/agent/cniserver"
	"github.com/kos-sdn/kos/components/agent/exechook"
	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/fabric"
)

// Event reasons.
const (
	reasonInterfaceReady = "InterfaceReady"
	reasonFabricError    = "FabricError"
	reasonAddressHeld    = "AddressHeld"
	reasonPostCreateExec = "PostCreateExec"
	reasonExecFailed     = "PostCreateExecFailed"
	reasonExecNotAllowed = "PostCreateExecNotAllowed"
)

// sync brings the fabric, and for a local attachment its status, in line
// with what the caches say about the attachment named key. It is the one
// place that decides retries: an error puts the key back on the queue.
//
// The fabric is keyed by address (VNI and IP), which two attachments may
// claim at once, so sync settles addresses, not attachments: those the
// attachment was last synced at or the fabric holds for it (as a full
// reconcile may have programmed it), if it moved or went, and the one it
// holds now. Settling an address looks at every attachment that claims it.
func (a *Agent) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		utilruntime.HandleErrorWithContext(ctx, err, "Dropping a malformed key", "key", key)
		return nil
	}
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("attachment", key))

	att, isLocal, err := a.current(ns, name)
	if err != nil {
		return err
	}
	var addr address
	hasAddr := false
	if att != nil {
		addr, hasAddr = addressOf(att)
	}
	a.setRelevance(ctx, key, network{ns, addr.vni}, isLocal && hasAddr)

	for _, prev := range a.state.addressesOf(key) {
		if hasAddr && prev == addr {
			continue
		}
		if _, err := a.settle(ctx, key, prev); err != nil {
			return err
		}
	}
	var held placement
	var settleErr error
	if hasAddr {
		held, settleErr = a.settle(ctx, key, addr)
	}
	rec, hadRec := a.state.synced(key, addr, hasAddr)

	// A local attachment that is gone, or was replaced by one of the same
	// name, has had its interface deleted by now.
	if hadRec && (!isLocal || rec.uid != string(att.UID)) {
		a.forgetLocal(ctx, key, rec)
	}
	if !isLocal {
		return settleErr
	}
	return errors.Join(settleErr, a.syncLocalStatus(ctx, att, addr, hasAddr, held, settleErr))
}

// current returns the attachment named ns/name as the caches hold it, and
// whether it is local. A remote attachment is looked for in the informers of
// the networks of its namespace; if transiently in two (its address moved
// between networks), the copy with the later address write wins.
func (a *Agent) current(ns, name string) (*v1alpha1.NetworkAttachment, bool, error) {
	obj, exists, err := a.localInformer.GetIndexer().GetByKey(ns + "/" + name)
	if err != nil {
		return nil, false, fmt.Errorf("reading the local cache: %w", err)
	}
	if exists {
		return obj.(*v1alpha1.NetworkAttachment), true, nil
	}
	var found *v1alpha1.NetworkAttachment
	for _, inf := range a.state.networkInformers(func(n network) bool { return n.namespace == ns }) {
		obj, exists, err := inf.GetIndexer().GetByKey(ns + "/" + name)
		if err != nil {
			return nil, false, fmt.Errorf("reading a network's cache: %w", err)
		}
		if !exists {
			continue
		}
		att := obj.(*v1alpha1.NetworkAttachment)
		// This node's attachments are known from the local informer
		// alone, which may lag behind.
		if att.Spec.Node == a.node {
			continue
		}
		if found == nil || newer(att, found) {
			found = att
		}
	}
	return found, false, nil
}

// newer reports whether x should win over y when both claim one address:
// the one whose address was written later, then the one whose key sorts
// first, so that every agent picks alike.
func newer(x, y *v1alpha1.NetworkAttachment) bool {
	tx, _ := x.ExtendedMetadata.Writes.Time(v1alpha1.SectionAddress)
	ty, _ := y.ExtendedMetadata.Writes.Time(v1alpha1.SectionAddress)
	if c := tx.Time.Compare(ty.Time); c != 0 {
		return c > 0
	}
	return keyOf(x) < keyOf(y)
}

// remoteHost returns the host IP of an attachment on another node, if it
// has a valid one.
func (a *Agent) remoteHost(att *v1alpha1.NetworkAttachment) (netip.Addr, bool) {
	if att.Spec.Node == a.node {
		return netip.Addr{}, false
	}
	ip, err := netip.ParseAddr(att.Status.HostIP)
	if err != nil || !ip.Is4() {
		return netip.Addr{}, false
	}
	return ip, true
}

// wanted returns what the fabric should hold at addr, from the caches: the
// local attachment that claims it if there is one (this node's interface
// wins over a remote claim), else the remote one with a host. It also
// returns that attachment (nil when none claims addr).
func (a *Agent) wanted(addr address) (placement, *v1alpha1.NetworkAttachment) {
	idx := addr.String()
	var best *v1alpha1.NetworkAttachment
	objs, _ := a.localInformer.GetIndexer().ByIndex(addressIndex, idx)
	for _, obj := range objs {
		att := obj.(*v1alpha1.NetworkAttachment)
		if best == nil || newer(att, best) {
			best = att
		}
	}
	if best != nil {
		return a.localPlacement(best), best
	}
	var host netip.Addr
	for _, inf := range a.state.networkInformers(func(n network) bool { return n.vni == addr.vni }) {
		objs, _ := inf.GetIndexer().ByIndex(addressIndex, idx)
		for _, obj := range objs {
			att := obj.(*v1alpha1.NetworkAttachment)
			h, ok := a.remoteHost(att)
			if ok && (best == nil || newer(att, best)) {
				best, host = att, h
			}
		}
	}
	if best == nil {
		return placement{}, nil
	}
	return placement{kind: remote, hostIP: host, owner: keyOf(best)}, best
}

// settle makes the fabric hold at addr what the caches want there, and
// returns what it holds afterwards. Another attachment that gains or loses
// the address is enqueued, for its status.
func (a *Agent) settle(ctx context.Context, key string, addr address) (placement, error) {
	a.fabricMu.RLock()
	defer a.fabricMu.RUnlock()
	defer a.addrLocks.lock(addr)()

	want, att := a.wanted(addr)
	have := a.state.installedAt(addr)
	after := want
	err := a.apply(ctx, addr, want.hostIP, planAddress(have, want))
	if err != nil {
		after = placement{kind: unknown, owner: want.owner}
	} else if newlyRemote(have, want) {
		a.observeDissemination(att, time.Now())
	}
	a.state.setInstalled(addr, after)
	if have.owner != after.owner {
		for _, o := range []string{have.owner, after.owner} {
			if o != "" && o != key {
				a.queue.Add(o)
			}
		}
	}
	return after, err
}

// opVerbs say what each operation does, for errors.
var opVerbs = [...]string{
	opDeleteLocal:  "deleting local attachment",
	opDeleteRemote: "deleting remote attachment",
	opCreateLocal:  "creating local attachment",
	opCreateRemote: "creating remote attachment",
	opRepairPod:    "repairing pod's local attachment",
}

// apply carries out the operations on one address, in order, stopping at
// the first that fails.
func (a *Agent) apply(ctx context.Context, addr address, hostIP netip.Addr, ops []op) error {
	for _, o := range ops {
		var err error
		switch o {
		case opDeleteLocal:
			err = a.timed(o.String(), func() error {
				return a.fabric.DeleteLocal(ctx, fabric.LocalAttachment{VNI: addr.vni, IP: addr.ip})
			})
			if err == nil {
				err = a.deleteStrayVeth(ctx, fabric.LocalAttachment{VNI: addr.vni, IP: addr.ip})
			}
		case opDeleteRemote:
			err = a.timed(o.String(), func() error {
				return a.fabric.DeleteRemote(ctx, fabric.RemoteAttachment{VNI: addr.vni, IP: addr.ip})
			})
		case opCreateLocal:
			err = a.timed(o.String(), func() error {
				return a.fabric.CreateLocal(ctx, fabric.LocalAttachment{VNI: addr.vni, IP: addr.ip})
			})
		case opCreateRemote:
			err = a.timed(o.String(), func() error {
				return a.fabric.CreateRemote(ctx, fabric.RemoteAttachment{VNI: addr.vni, IP: addr.ip, HostIP: hostIP})
			})
		case opRepairPod:
			err = a.repairPod(ctx, fabric.LocalAttachment{VNI: addr.vni, IP: addr.ip})
		}
		if err != nil {
			return fmt.Errorf("%s %s: %w", opVerbs[o], addr, err)
		}
		klog.FromContext(ctx).V(4).Info("Changed the fabric", "operation", o, "address", addr, "hostIP", hostIP)
	}
	return nil
}

// localPlacement returns the placement a local attachment wants: with the
// CNI server on, a pod's (the controller labels it with the pod's UID)
// gets its port from the server's plug, not from the agent.
func (a *Agent) localPlacement(att *v1alpha1.NetworkAttachment) placement {
	return placement{kind: local, owner: keyOf(att), pod: a.cni.Socket != "" && att.Labels[v1alpha1.PodUIDLabel] != ""}
}

// pluggedVeths returns those of atts whose ports are plugged veths that
// still exist; the switch keeps the port of a veth gone (at a reboot), on
// which CreateLocal would make an internal port.
func (a *Agent) pluggedVeths(ctx context.Context, atts ...fabric.LocalAttachment) (map[fabric.LocalAttachment]bool, error) {
	plugs, err := a.fabric.Plugs(ctx, atts...)
	if err != nil || len(plugs) == 0 {
		return nil, err
	}
	names, err := cniserver.HostVeths(a.cni.HostNetns)
	if err != nil {
		return nil, fmt.Errorf("listing the node's veths: %w", err)
	}
	veths := sets.New(names...)
	plugged := map[fabric.LocalAttachment]bool{}
	for _, p := range plugs {
		if veths.Has(p.InterfaceName()) {
			plugged[p.LocalAttachment] = true
		}
	}
	return plugged, nil
}

// repairPod repairs a pod's local attachment found partial: the flows of
// its plugged veth, which CreateLocal keeps; without one, whatever is
// there goes (a stray veth too), and the attachment waits for the CNI
// server's plug.
func (a *Agent) repairPod(ctx context.Context, at fabric.LocalAttachment) error {
	plugged, err := a.pluggedVeths(ctx, at)
	if err != nil {
		return fmt.Errorf("reading the port: %w", err)
	}
	if plugged[at] {
		return a.timed(opCreateLocal.String(), func() error { return a.fabric.CreateLocal(ctx, at) })
	}
	err = a.timed(opDeleteLocal.String(), func() error { return a.fabric.DeleteLocal(ctx, at) })
	if err == nil {
		err = a.deleteStrayVeth(ctx, at)
	}
	if err == nil {
		err = a.timed(opDeleteRemote.String(), func() error {
			return a.fabric.DeleteRemote(ctx, fabric.RemoteAttachment{VNI: at.VNI, IP: at.IP})
		})
	}
	return err
}

// timed runs one fabric operation and observes its duration and result.
func (a *Agent) timed(operation string, fn func() error) error {
	start := time.Now()
	err := fn()
	a.metrics.fabricOps.WithLabelValues(operation).Observe(time.Since(start).Seconds())
	if err != nil {
		a.metrics.fabricErrors.WithLabelValues(operation).Inc()
	}
	return err
}

// implStatus is the part of a local attachment's status the agent writes
// about its interface (the server's status.impl section).
type implStatus struct {
	mac, ifcName, hostIP string
	mtu                  int32
	hostErrors           []string
}

func implOf(st *v1alpha1.NetworkAttachmentStatus) implStatus {
	return implStatus{mac: st.MACAddress, ifcName: st.IfcName, hostIP: st.HostIP, mtu: st.MTU, hostErrors: st.Errors.Host}
}

func (s implStatus) equal(o implStatus) bool {
	return s.mac == o.mac && s.ifcName == o.ifcName && s.hostIP == o.hostIP && s.mtu == o.mtu && slices.Equal(s.hostErrors, o.hostErrors)
}

func (s implStatus) ready() bool { return s.hostIP != "" && len(s.hostErrors) == 0 }

// wantImpl returns what the status of a local attachment should say about
// its interface, given what settling its address left (held, settleErr).
func (a *Agent) wantImpl(key string, addr address, hasAddr bool, held placement, settleErr error) implStatus {
	switch {
	case !hasAddr:
		return implStatus{}
	case settleErr != nil:
		return implStatus{hostErrors: []string{settleErr.Error()}}
	case held.kind == local && held.owner == key:
		mac := v1alpha1.MACAddress(addr.vni, addr.ip)
		return implStatus{mac: mac.String(), ifcName: v1alpha1.InterfaceName(mac), hostIP: a.hostIP.String(), mtu: int32(a.MTU())}
	default:
		return implStatus{hostErrors: []string{fmt.Sprintf("address %s of VNI %d is held by attachment %s", addr.ip, addr.vni, held.owner)}}
	}
}

// syncLocalStatus writes a local attachment's interface into its status,
// then runs its postCreateExec once and reports that too.
func (a *Agent) syncLocalStatus(ctx context.Context, att *v1alpha1.NetworkAttachment, addr address, hasAddr bool, held placement, settleErr error) error {
	key := keyOf(att)
	want := a.wantImpl(key, addr, hasAddr, held, settleErr)
	got := implOf(&att.Status)
	want.mtu = a.keptMTU(ctx, addr, want, got)
	if settleErr != nil {
		a.recorder.Event(att, corev1.EventTypeWarning, reasonFabricError, settleErr.Error())
	}
	if !want.equal(got) {
		st := att.ForStatusWrite()
		st.Status.MACAddress, st.Status.IfcName, st.Status.HostIP, st.Status.MTU = want.mac, want.ifcName, want.hostIP, want.mtu
		st.Status.Errors.Host = want.hostErrors
		updated, err := a.client.NetworkV1alpha1().NetworkAttachments(att.Namespace).UpdateStatus(ctx, st, metav1.UpdateOptions{})
		if err != nil {
			return fmt.Errorf("writing the interface into the status: %w", err)
		}
		a.metrics.statusWrites.Inc()
		switch {
		case want.ready() && !got.ready():
			a.observeReady(updated)
			if a.cniSrv != nil {
				// A pod's attachment made again under its live
				// sandbox: the sandbox gets its interface back.
				a.cniSrv.Replug(ctx, updated)
			}
			a.recorder.Eventf(att, corev1.EventTypeNormal, reasonInterfaceReady, "Interface %s with MAC address %s is ready on node %s", want.ifcName, want.mac, a.node)
		case settleErr == nil && len(want.hostErrors) > 0:
			a.recorder.Event(att, corev1.EventTypeWarning, reasonAddressHeld, want.hostErrors[0])
		}
		klog.FromContext(ctx).V(3).Info("Wrote the interface into the status", "ready", want.ready(), "interface", want.ifcName, "mtu", want.mtu)
		att = updated
	}
	if !want.ready() {
		return nil
	}

	rec := localRecord{
		uid:            string(att.UID),
		postDeleteExec: att.Spec.PostDeleteExec,
		vars:           exechook.Vars{IfName: want.ifcName, IPv4: addr.ip.String(), MAC: want.mac},
	}
	a.state.setLocal(key, rec)
	return a.postCreateExec(ctx, att, rec)
}

// observeReady observes the create-to-ready latency of an attachment that
// just became ready, from the server's times of its spec write and of the
// status write that made it ready.
func (a *Agent) observeReady(att *v1alpha1.NetworkAttachment) {
	created, ok1 := att.ExtendedMetadata.Writes.Time(v1alpha1.SectionSpec)
	ready, ok2 := att.ExtendedMetadata.Writes.Time(v1alpha1.SectionImpl)
	if ok1 && ok2 {
		a.metrics.createToReady.Observe(ready.Sub(created.Time).Seconds())
	}
}

// postCreateExec runs a ready local attachment's postCreateExec, once per
// attachment (by UID) in the life of the agent and not at all once its
// status holds a report, and writes the report into the status. A report
// that could not be written is kept and written on the next sync, without
// running the command again. A restarted agent runs the command again only
// when the report never made it into the status.
func (a *Agent) postCreateExec(ctx context.Context, att *v1alpha1.NetworkAttachment, rec localRecord) error {
	if len(att.Spec.PostCreateExec) == 0 || att.Status.PostCreateExecReport != nil {
		return nil
	}
	key := keyOf(att)
	report := a.state.report(key)
	if report == nil || report.uid != att.UID {
		// Run the command off the workers; once it ran, its report is kept
		// and the attachment queued again, and that sync writes the report.
		started := &pendingReport{uid: att.UID}
		a.state.setReport(key, started)
		command, ref := att.Spec.PostCreateExec, att.DeepCopy()
		hook := func(ctx context.Context) bool {
			r := a.exec.Run(ctx, command, rec.vars)
			result := a.exec.Result(command, rec.vars, r)
			a.metrics.execs.WithLabelValues("create", result).Inc()
			eventType, reason := corev1.EventTypeNormal, reasonPostCreateExec
			switch result {
			case exechook.ResultRefused:
				eventType, reason = corev1.EventTypeWarning, reasonExecNotAllowed
			case exechook.ResultFailed:
				eventType, reason = corev1.EventTypeWarning, reasonExecFailed
			}
			a.recorder.Eventf(ref, eventType, reason, "postCreateExec %q exited with status %d", r.Command, r.ExitStatus)
			return a.state.finishReport(key, started, r)
		}
		if a.exec.Check(command, rec.vars) == nil {
			a.runHook(ctx, func(ctx context.Context) {
				if hook(ctx) {
					a.queue.Add(key)
				}
			})
			return nil
		}
		// A refused command runs nothing and takes no exec slot: report it now.
		hook(ctx)
		report = a.state.report(key)
	}
	if report == nil || report.report == nil {
		return nil // still running; the sync after it writes the report
	}
	st := att.ForStatusWrite()
	st.Status.PostCreateExecReport = report.report.DeepCopy()
	if _, err := a.client.NetworkV1alpha1().NetworkAttachments(att.Namespace).UpdateStatus(ctx, st, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("writing the postCreateExec report into the status: %w", err)
	}
	a.metrics.statusWrites.Inc()
	return nil
}

// pendingReport is the report of a postCreateExec that ran, kept until the
// attachment is gone so that the command runs once however the writes go;
// report is nil while the command runs. A pendingReport is never changed
// once shared: finishReport replaces it.
type pendingReport struct {
	uid    types.UID
	report *v1alpha1.ExecReport
}

// forgetLocal is called once a local attachment is gone and its interface
// deleted: it runs the attachment's postDeleteExec, if it had one, and
// forgets it. The report goes to the log: there is no status to write it to.
func (a *Agent) forgetLocal(ctx context.Context, key string, rec localRecord) {
	a.state.forgetLocal(key, rec.uid)
	if len(rec.postDeleteExec) == 0 {
		return
	}
	a.runHook(ctx, func(ctx context.Context) {
		r := a.exec.Run(ctx, rec.postDeleteExec, rec.vars)
		a.metrics.execs.WithLabelValues("delete", a.exec.Result(rec.postDeleteExec, rec.vars, r)).Inc()
		klog.FromContext(ctx).Info("Ran postDeleteExec", "key", key, "command", r.Command, "exitStatus", r.ExitStatus, "stdout", r.StdOut, "stderr", r.StdErr)
	})
}

// runHook runs hook in a goroutine of its own once one of the agent's exec
// slots (Config.ExecWorkers) is free, so that no worker waits for a command;
// a hook still waiting for a slot when ctx ends never runs.
func (a *Agent) runHook(ctx context.Context, hook func(context.Context)) {
	go func() {
		select {
		case a.hooks <- struct{}{}:
		case <-ctx.Done():
			return
		}
		defer func() { <-a.hooks }()
		hook(ctx)
	}()
}
