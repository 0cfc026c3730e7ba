package agent

// This file is what the agent tells its debug endpoints (package
// debugserver): its status and its local attachments, and the probes it
// puts on them (package probe).

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"runtime/debug"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/kos-sdn/kos/components/agent/api"
	"github.com/kos-sdn/kos/components/agent/debugserver"
	"github.com/kos-sdn/kos/components/agent/probe"
	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/fabric"
	"github.com/kos-sdn/kos/components/fabric/ovs"
)

// processStarted is when the agent's process started, near enough.
var processStarted = time.Now()

// switchReader is a fabric whose switch can be read for people (fabric/ovs
// is one; fabric/logging, which has no switch, is not).
type switchReader interface {
	debugserver.Switch
	FlowCount(ctx context.Context) (int, error)
}

var (
	_ debugserver.Agent  = (*Agent)(nil)
	_ debugserver.Prober = (*Agent)(nil)
	_ switchReader       = (*ovs.Fabric)(nil)
)

// reconcileRecord is what /debug/status says of the last full reconcile,
// behind a mutex of its own that its methods take, for a moment and
// without taking another.
type reconcileRecord struct {
	mu     sync.Mutex
	at     time.Time
	reason string
	err    error
}

// set records a full reconcile that just ended.
func (r *reconcileRecord) set(reason string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.at, r.reason, r.err = time.Now(), reason, err
}

func (r *reconcileRecord) get() (time.Time, string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.at, r.reason, r.err
}

// lastChecked returns when the fabric was last checked and how that ended.
func (h *health) lastChecked() (time.Time, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lastCheck, h.lastCheckErr
}

// counts returns how many local and remote attachments the agent put on the
// fabric, and how many networks it watches.
func (s *state) counts() (locals, remotes, networks int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.installed {
		switch p.kind {
		case local:
			locals++
		case remote:
			remotes++
		}
	}
	return locals, remotes, len(s.networks)
}

// DebugHandler returns the handler of the agent's debug endpoints, the
// paths of package agent/api, without the server's checks of identity.
func (a *Agent) DebugHandler() http.Handler {
	var sw debugserver.Switch
	if r, ok := a.fabric.(switchReader); ok {
		sw = r
	}
	return debugserver.Handler(a, sw, a)
}

// StartProbe implements debugserver.Prober.
func (a *Agent) StartProbe(ctx context.Context, req api.ProbeRequest) error {
	att, err := a.probeAttachment(ctx, req.Namespace, req.Name)
	if err != nil {
		return err
	}
	return a.probes.Start(ctx, att)
}

// CheckProbe implements debugserver.Prober.
func (a *Agent) CheckProbe(ctx context.Context, req api.ProbeCheckRequest) (api.ProbeCheckResult, error) {
	return a.probes.Check(ctx, req)
}

// StopProbe implements debugserver.Prober.
func (a *Agent) StopProbe(ctx context.Context, req api.ProbeRequest) error {
	return a.probes.Stop(ctx, req.Namespace, req.Name)
}

// probeAttachment returns what a probe needs of the local attachment
// namespace/name: one made for checks (api.ProbeLabel), not a pod's, Ready.
func (a *Agent) probeAttachment(ctx context.Context, namespace, name string) (probe.Attachment, error) {
	key := namespace + "/" + name
	obj, exists, err := a.localInformer.GetStore().GetByKey(key)
	if err != nil {
		return probe.Attachment{}, err
	}
	att, _ := obj.(*v1alpha1.NetworkAttachment)
	if !exists || att == nil || att.Spec.Node != a.node {
		return probe.Attachment{}, fmt.Errorf("attachment %s is %w %s", key, debugserver.ErrNotLocal, a.node)
	}
	if _, ok := att.Labels[api.ProbeLabel]; !ok {
		return probe.Attachment{}, fmt.Errorf("attachment %s is %w: only an attachment labelled %s (made for checks) gets a probe, which takes its interface", key, debugserver.ErrNotProbeable, api.ProbeLabel)
	}
	if _, ok := att.Labels[v1alpha1.PodUIDLabel]; ok {
		return probe.Attachment{}, fmt.Errorf("attachment %s is %w: its interface is a pod's", key, debugserver.ErrNotProbeable)
	}
	addr, ok := addressOf(att)
	if !ok {
		return probe.Attachment{}, fmt.Errorf("attachment %s has %w", key, debugserver.ErrNoAddress)
	}
	if !meta.IsStatusConditionTrue(att.Status.Conditions, v1alpha1.NetworkAttachmentReady) {
		return probe.Attachment{}, fmt.Errorf("attachment %s is %w", key, debugserver.ErrNotReady)
	}
	subnet, err := a.client.NetworkV1alpha1().Subnets(namespace).Get(ctx, att.Spec.Subnet, metav1.GetOptions{})
	if err != nil {
		return probe.Attachment{}, fmt.Errorf("reading the subnet of attachment %s: %w", key, err)
	}
	prefix, err := netip.ParsePrefix(subnet.Spec.IPv4)
	if err != nil {
		return probe.Attachment{}, fmt.Errorf("subnet %s/%s of attachment %s: %w", namespace, subnet.Name, key, err)
	}
	at := fabric.LocalAttachment{VNI: addr.vni, IP: addr.ip}
	return probe.Attachment{
		Namespace: namespace,
		Name:      name,
		UID:       string(att.UID),
		Interface: at.InterfaceName(),
		MAC:       at.MAC(),
		Address:   netip.PrefixFrom(addr.ip, prefix.Bits()),
		MTU:       int(att.Status.MTU),
	}, nil
}

// probeHandler removes the probe of a local attachment that goes or is
// made again under its name.
func (a *Agent) probeHandler(ctx context.Context) cache.ResourceEventHandler {
	forget := func(obj any, gone bool) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		att, ok := obj.(*v1alpha1.NetworkAttachment)
		if !ok {
			return
		}
		uid := string(att.UID)
		if gone {
			uid = ""
		}
		a.probes.Forget(ctx, att.Namespace, att.Name, uid)
	}
	return cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) { forget(obj, false) },
		DeleteFunc: func(obj any) { forget(obj, true) },
	}
}

// LocalAttachment implements debugserver.Agent.
func (a *Agent) LocalAttachment(namespace, name string) (fabric.LocalAttachment, error) {
	key := namespace + "/" + name
	obj, exists, err := a.localInformer.GetStore().GetByKey(key)
	if err != nil {
		return fabric.LocalAttachment{}, err
	}
	att, _ := obj.(*v1alpha1.NetworkAttachment)
	if !exists || att == nil || att.Spec.Node != a.node {
		return fabric.LocalAttachment{}, fmt.Errorf("attachment %s is %w %s", key, debugserver.ErrNotLocal, a.node)
	}
	addr, ok := addressOf(att)
	if !ok {
		return fabric.LocalAttachment{}, fmt.Errorf("attachment %s has %w", key, debugserver.ErrNoAddress)
	}
	return fabric.LocalAttachment{VNI: addr.vni, IP: addr.ip}, nil
}

// NetworkPolicy implements debugserver.Agent.
func (a *Agent) NetworkPolicy(vni uint32) fabric.NetworkPolicy {
	if a.policy == nil {
		return fabric.NetworkPolicy{VNI: vni}
	}
	return a.policy.Applied(vni)
}

// Status returns what /debug/status reports.
func (a *Agent) Status(ctx context.Context) api.Status {
	st := api.Status{
		Node:             a.node,
		HostIP:           a.hostIP.String(),
		Started:          processStarted,
		LocalAttachments: len(a.localInformer.GetStore().ListKeys()),
		Flows:            -1,
	}
	st.Version, st.GoVersion = buildVersion()
	st.Local, st.Remote, st.Networks = a.state.counts()
	if err := a.Healthy(); err != nil {
		st.Errors = append(st.Errors, "not ready: "+err.Error())
	} else {
		st.Ready = true
	}
	var checkErr error
	st.LastCheck, checkErr = a.health.lastChecked()
	if checkErr != nil && st.Ready {
		st.Errors = append(st.Errors, "checking the switch: "+checkErr.Error())
	}
	var reconcileErr error
	st.LastReconcile, st.LastReconcileReason, reconcileErr = a.lastReconcile.get()
	if reconcileErr != nil {
		st.LastReconcileError = reconcileErr.Error()
		st.Errors = append(st.Errors, "the last reconcile failed: "+reconcileErr.Error())
	}
	st.FabricErrors = counterValues(a.metrics.fabricErrors, "operation")
	if sw, ok := a.fabric.(switchReader); ok {
		n, err := sw.FlowCount(ctx)
		if err != nil {
			st.Errors = append(st.Errors, "counting the flows: "+err.Error())
		} else {
			st.Flows = n
		}
	}
	return st
}

// counterValues returns the nonzero values of a counter vector by the
// value of its label.
func counterValues(c *prometheus.CounterVec, label string) map[string]int {
	// A registry of its own reads the vector without the metrics'
	// registry, which is the server's.
	reg := prometheus.NewRegistry()
	if err := reg.Register(c); err != nil {
		return nil
	}
	families, err := reg.Gather()
	if err != nil {
		return nil
	}
	out := map[string]int{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			v := int(m.GetCounter().GetValue())
			if v == 0 {
				continue
			}
			for _, l := range m.GetLabel() {
				if l.GetName() == label {
					out[l.GetValue()] = v
				}
			}
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// buildVersion returns the agent's module version, or its VCS revision
// when the module has none, and the Go release it was built with.
func buildVersion() (version, goVersion string) {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "", ""
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v, info.GoVersion
	}
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" {
			return s.Value, info.GoVersion
		}
	}
	return "", info.GoVersion
}
