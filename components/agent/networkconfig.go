package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/fabric"
	kosinformers "github.com/kos-sdn/kos/components/generated/informers/externalversions/network/v1alpha1"
)

// networkConfigTimeout bounds the agent's first read of the NetworkConfig
// and its report of the underlay: neither may hold up its start for long.
const networkConfigTimeout = 10 * time.Second

// mtuSetter is a fabric whose MTU for new interfaces can change while it
// runs (fabric/ovs and fabric/logging are).
type mtuSetter interface {
	SetMTU(mtu int)
}

// tunnelPortSetter is a fabric whose tunnels' UDP port can change while it
// runs (fabric/ovs and fabric/logging are): the next Ensure moves them.
type tunnelPortSetter interface {
	TunnelPort() int
	SetTunnelPort(port int)
}

// NodePatcher reads and patches Nodes of the main cluster;
// typedcorev1.NodeInterface is one.
type NodePatcher interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Node, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*corev1.Node, error)
}

// mtuChoice is the MTU the agent gives new interfaces, and why.
type mtuChoice struct {
	// mtu is the MTU.
	mtu int
	// applied is true when mtu is the NetworkConfig's status.overlayMTU,
	// false when it is the agent's own (--mtu, or the underlay's less
	// VXLAN's overhead).
	applied bool
	// givenDiffers is true when the operator gave the agent an MTU (--mtu)
	// other than the one applied.
	givenDiffers bool
}

// chooseMTU returns the MTU of new interfaces: the NetworkConfig's
// status.overlayMTU (applied) when it holds a valid one, so that every
// attachment of a network has one MTU, else own, the MTU the agent chose
// itself. given is the MTU the operator gave, 0 for none.
func chooseMTU(own, given int, applied int32) mtuChoice {
	if applied == 0 || fabric.ValidateMTU(int(applied)) != nil {
		return mtuChoice{mtu: own}
	}
	return mtuChoice{mtu: int(applied), applied: true, givenDiffers: given != 0 && given != int(applied)}
}

// networkConfig is the agent's view of the NetworkConfig "cluster": it
// sets the fabric's MTU for new interfaces from the configuration applied.
// A pod's interface keeps the MTU of its ADD; internal ports, which the
// switch reports partial with another MTU, take it at the next reconcile.
type networkConfig struct {
	own, given, underlayMTU int
	fabric                  fabric.Interface
	metrics                 *metrics

	mu      sync.Mutex
	current mtuChoice
	// portApplied is true once a tunnel port was applied.
	portApplied bool
	said        map[string]bool
}

func newNetworkConfig(cfg Config, m *metrics) *networkConfig {
	own := cfg.Fabric.MTU()
	return &networkConfig{
		own: own, given: cfg.GivenMTU, underlayMTU: cfg.UnderlayMTU,
		fabric: cfg.Fabric, metrics: m,
		current: mtuChoice{mtu: own},
		said:    map[string]bool{},
	}
}

// once reports whether what has not been said yet; it then counts as said.
func (n *networkConfig) once(what string) bool {
	if n.said[what] {
		return false
	}
	n.said[what] = true
	return true
}

// start reads the NetworkConfig once, applies it, and, when the agent may
// read it, starts an informer on it that applies each change, on ctx, in
// wg. A refusal (an agent of a manifest that grants it no right to
// networkconfigs, such as 0.3.0's) or a kos-apiserver that serves no
// NetworkConfigs leaves the agent's own MTU, logged once; any other error
// leaves it until the informer reads the configuration.
func (n *networkConfig) start(ctx context.Context, a *Agent, wg *sync.WaitGroup) {
	logger := klog.FromContext(ctx)
	byName := fields.OneTermEqualSelector("metadata.name", v1alpha1.NetworkConfigName).String()
	listCtx, cancel := context.WithTimeout(ctx, networkConfigTimeout)
	list, err := a.client.NetworkV1alpha1().NetworkConfigs().List(listCtx, metav1.ListOptions{FieldSelector: byName})
	cancel()
	switch {
	case apierrors.IsForbidden(err) || apierrors.IsNotFound(err) || apierrors.IsMethodNotSupported(err):
		logger.Info("Not using the NetworkConfig: the agent may not read it, or the KOS API serves none; interfaces get the MTU the agent chose itself",
			"networkConfig", v1alpha1.NetworkConfigName, "mtu", n.own, "reason", err.Error())
		n.mu.Lock()
		n.said["own"] = true
		n.mu.Unlock()
		n.apply(ctx, nil)
		return
	case err != nil:
		logger.Info("Reading the NetworkConfig failed; interfaces get the MTU the agent chose itself until it is read",
			"networkConfig", v1alpha1.NetworkConfigName, "mtu", n.own, "err", err)
		n.apply(ctx, nil)
	case len(list.Items) == 0:
		n.apply(ctx, nil)
	default:
		n.apply(ctx, &list.Items[0])
	}
	inf := kosinformers.NewFilteredNetworkConfigInformer(listingClient{a.client}, 0, cache.Indexers{},
		func(o *metav1.ListOptions) { o.FieldSelector = byName })
	apply := func(obj any) {
		c, _ := obj.(*v1alpha1.NetworkConfig)
		n.apply(ctx, c)
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    apply,
		UpdateFunc: func(_, obj any) { apply(obj) },
		// The controller makes it again; meanwhile, what was applied
		// holds.
		DeleteFunc: func(any) {},
	}); err != nil {
		logger.Error(err, "Not watching the NetworkConfig")
		return
	}
	wg.Go(func() { inf.RunWithContext(ctx) })
}

// apply sets the fabric's MTU for new interfaces and its tunnel port from
// c, the NetworkConfig (nil when there is none or the agent may not read
// it), and logs each change once.
func (n *networkConfig) apply(ctx context.Context, c *v1alpha1.NetworkConfig) {
	logger := klog.FromContext(ctx)
	var applied, port int32
	if c != nil {
		applied, port = c.Status.OverlayMTU, c.Status.TunnelPort
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.applyPort(logger, int(port))
	choice := chooseMTU(n.own, n.given, applied)
	defer func() { n.metrics.mtu.Set(float64(n.fabric.MTU())) }()
	if choice == n.current {
		if !choice.applied && n.once("own") {
			logger.Info("The NetworkConfig applies no overlay MTU (there is none yet, or it is not applied yet); interfaces get the MTU the agent chose itself", "mtu", choice.mtu)
		}
		return
	}
	prev := n.current
	n.current = choice
	setter, ok := n.fabric.(mtuSetter)
	if !ok {
		logger.Info("Warning: this fabric cannot change the MTU of new interfaces; restart the agent", "mtu", choice.mtu, "fabricMTU", n.fabric.MTU())
		return
	}
	setter.SetMTU(choice.mtu)
	switch {
	case choice.applied:
		logger.Info("New interfaces get the NetworkConfig's overlay MTU; pods' interfaces that exist keep theirs, internal ports take it at the next reconcile", "mtu", choice.mtu, "previous", prev.mtu)
		if choice.givenDiffers && n.once("given") {
			logger.Info("Warning: --mtu differs from the NetworkConfig's overlay MTU; using the NetworkConfig's, so that every attachment of a network has one MTU",
				"mtu", n.given, "overlayMTU", choice.mtu)
		}
	default:
		logger.Info("The NetworkConfig applies no overlay MTU yet; new interfaces get the MTU the agent chose itself", "mtu", choice.mtu, "previous", prev.mtu)
	}
	if n.underlayMTU > 0 && n.underlayMTU < choice.mtu+fabric.VXLANOverhead {
		logger.Info("Warning: the underlay cannot carry the MTU in use with VXLAN's overhead; full-size packets between nodes are lost unless the path carries more",
			"mtu", choice.mtu, "underlayMTU", n.underlayMTU, "fits", n.underlayMTU-fabric.VXLANOverhead)
	}
}

// applyPort makes the fabric tunnel on port, the NetworkConfig's applied
// tunnel port (0 when none is applied: the fabric keeps its own, 4789, or
// the last one applied), with n.mu held. The first one applied, as the
// agent starts, comes before the fabric's first Ensure, so the tunnels are
// made on it; a later change moves them at the fabric's next Ensure, which
// the agent runs every --flow-check-period, and is logged as a warning:
// nodes on the old port and nodes on the new one drop each other's tunnel
// packets until every agent has moved (an unsafe change the NetworkConfig
// refuses unless forced).
func (n *networkConfig) applyPort(logger klog.Logger, port int) {
	if port == 0 || fabric.ValidateTunnelPort(port) != nil {
		return
	}
	setter, ok := n.fabric.(tunnelPortSetter)
	if !ok {
		if n.once("port" + strconv.Itoa(port)) {
			logger.Info("Warning: this fabric cannot tunnel on another port than its own", "tunnelPort", port)
		}
		return
	}
	prev := setter.TunnelPort()
	first := !n.portApplied
	n.portApplied = true
	if prev == port {
		if first {
			logger.Info("Tunnelling on the NetworkConfig's tunnel port", "tunnelPort", port)
		}
		return
	}
	setter.SetTunnelPort(port)
	if first {
		logger.Info("Tunnelling on the NetworkConfig's tunnel port", "tunnelPort", port, "previous", prev)
		return
	}
	logger.Info("Warning: the NetworkConfig's tunnel port changed; moving this node's tunnels to it now: until every node has moved, nodes on the old port and nodes on the new one drop each other's tunnel packets",
		"tunnelPort", port, "previous", prev)
}

// reportUnderlay writes the underlay's MTU into the annotation
// v1alpha1.UnderlayMTUAnnotation of the agent's Node, unless it says so
// already. A refusal, as under a manifest that grants the agent no right
// to patch Nodes (0.3.0's), or a Kubernetes whose tokens name no node
// (before 1.30), is logged once, and the agent carries on: the operator
// then sets the overlay MTU (docs/install.md, "Network configuration").
func reportUnderlay(ctx context.Context, nodes NodePatcher, node string, mtu int) {
	logger := klog.FromContext(ctx).WithValues("annotation", v1alpha1.UnderlayMTUAnnotation, "underlayMTU", mtu)
	ctx, cancel := context.WithTimeout(ctx, networkConfigTimeout)
	defer cancel()
	want := strconv.Itoa(mtu)
	n, err := nodes.Get(ctx, node, metav1.GetOptions{})
	if err == nil && n.Annotations[v1alpha1.UnderlayMTUAnnotation] == want {
		logger.V(2).Info("The Node reports the underlay's MTU already")
		return
	}
	if err == nil {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{v1alpha1.UnderlayMTUAnnotation: want}}})
		_, err = nodes.Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "kos-agent"})
	}
	if err != nil {
		logger.Info("Not reporting the underlay's MTU on the Node; set the NetworkConfig's spec.overlayMTU yourself if the nodes' underlays differ",
			"reason", fmt.Sprintf("%v", err))
		return
	}
	logger.Info("Reported the underlay's MTU on the Node")
}

// startNetworkConfig reports the underlay and starts applying the
// NetworkConfig, as Config asks; before the first reconcile, so that the
// interfaces it makes get the configuration's MTU.
func (a *Agent) startNetworkConfig(ctx context.Context, wg *sync.WaitGroup) {
	if a.nodes != nil && a.underlayMTU > 0 {
		wg.Go(func() { a.watchUnderlay(ctx, underlayCheckPeriod, findUnderlay) })
	}
	if a.netConfig != nil {
		a.netConfig.start(ctx, a, wg)
	}
}

// underlayCheckPeriod is how often the agent reads its underlay's MTU
// again, which an operator may change while it runs.
const underlayCheckPeriod = time.Minute

// watchUnderlay reports the underlay's MTU on the Node, then reads it
// again (with find) every period and reports each change, with the gauge
// and, when the MTU in use no longer fits, a warning. It returns when ctx
// is done. A failed read keeps what was read last.
func (a *Agent) watchUnderlay(ctx context.Context, period time.Duration, find func(netip.Addr) (underlay, error)) {
	logger := klog.FromContext(ctx)
	last := a.underlayMTU
	reportUnderlay(ctx, a.nodes, a.node, last)
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		u, err := find(a.hostIP)
		if err != nil || u.mtu == last {
			continue
		}
		logger.Info("The underlay's MTU changed", "underlay", u.name, "underlayMTU", u.mtu, "previous", last)
		last = u.mtu
		a.metrics.underlayMTU.Set(float64(u.mtu))
		if mtu := a.MTU(); mtu > 0 && u.mtu < mtu+fabric.VXLANOverhead {
			logger.Info("Warning: the underlay cannot carry the MTU in use with VXLAN's overhead; full-size packets between nodes are lost unless the path carries more",
				"mtu", mtu, "underlayMTU", u.mtu, "fits", u.mtu-fabric.VXLANOverhead)
		}
		reportUnderlay(ctx, a.nodes, a.node, u.mtu)
	}
}

// keptMTU returns the MTU the status of a local attachment should report:
// want's, unless the status reports another MTU for the same interface
// and that interface is a plug (a pod's veth), which keeps the MTU its
// maker gave it when the agent's MTU changes (a forced change of the
// NetworkConfig): the status must then go on saying so, for the
// controller counts the attachments whose interfaces still have another
// MTU by it. Internal ports take the new MTU on the next reconcile, and
// so does their status. The switch is asked only when the MTUs differ; a
// failed read reports want's.
func (a *Agent) keptMTU(ctx context.Context, addr address, want, got implStatus) int32 {
	if !want.ready() || got.mtu == 0 || got.mtu == want.mtu || got.ifcName != want.ifcName || got.hostIP != want.hostIP {
		return want.mtu
	}
	plugs, err := a.fabric.Plugs(ctx, fabric.LocalAttachment{VNI: addr.vni, IP: addr.ip})
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Not telling whether an interface is a plug; reporting the MTU in use", "interface", want.ifcName, "err", err)
		return want.mtu
	}
	if len(plugs) == 0 {
		return want.mtu
	}
	return got.mtu
}
