package networkconfig

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
)

// Reasons of the Events the controller records on the NetworkConfig.
const (
	// ReasonCreated: the controller created the NetworkConfig.
	ReasonCreated = "Created"
	// ReasonDefaulted: the controller filled in fields the spec left out.
	ReasonDefaulted = "Defaulted"
	// ReasonApplied: the status holds new values of the spec.
	ReasonApplied = "Applied"
	// ReasonUnderlayTooSmall: more nodes than before cannot carry the MTU.
	ReasonUnderlayTooSmall = v1alpha1.ReasonUnderlayTooSmall
)

// The underlay MTUs a node may report: IPv4's smallest MTU (RFC 791) to
// its largest packet. A report outside them is ignored.
const (
	minUnderlayMTU = 68
	maxUnderlayMTU = 65535
)

// sync brings the NetworkConfig up to date: it creates it when missing,
// fills in what its spec leaves out, applies the spec to the status and
// reports the nodes' underlays.
func (c *Controller) sync(ctx context.Context, ref cache.ObjectName) error {
	if ref.Namespace != "" || ref.Name != v1alpha1.NetworkConfigName {
		return nil
	}
	logger := klog.FromContext(ctx)
	underlays, err := c.underlays(ctx)
	if err != nil {
		return err
	}
	cfg, err := c.configs.Get(ref.Name)
	if apierrors.IsNotFound(err) {
		return c.create(ctx, underlays)
	}
	if err != nil {
		return fmt.Errorf("reading networkconfig %s from the cache: %w", ref.Name, err)
	}

	if spec := Defaults(cfg.Spec, underlays); !apiequality.Semantic.DeepEqual(spec, cfg.Spec) {
		updated := cfg.DeepCopy()
		updated.Spec = spec
		result, err := c.client.NetworkV1alpha1().NetworkConfigs().Update(ctx, updated, metav1.UpdateOptions{})
		if err != nil {
			return fmt.Errorf("filling in the defaults of networkconfig %s: %w", ref.Name, err)
		}
		logger.Info("Filled in the network configuration's defaults", "overlayMTU", *spec.OverlayMTU, "tunnelPort", *spec.TunnelPort)
		c.recorder.Eventf(result, corev1.EventTypeNormal, ReasonDefaulted, "Filled in overlay MTU %d and tunnel port %d", *spec.OverlayMTU, *spec.TunnelPort)
		// The update's event brings the next sync, which applies it.
		return nil
	}

	status := Status(cfg, underlays, c.attachmentMTUs())
	if c.metrics != nil {
		c.metrics.Observe(&status, underlays)
	}
	if !apiequality.Semantic.DeepEqual(status, cfg.Status) {
		updated := cfg.DeepCopy()
		updated.Status = status
		result, err := c.client.NetworkV1alpha1().NetworkConfigs().UpdateStatus(ctx, updated, metav1.UpdateOptions{})
		if err != nil {
			return fmt.Errorf("updating the status of networkconfig %s: %w", ref.Name, err)
		}
		c.recordChanges(ctx, result, &cfg.Status, &status)
		cfg = result
	}

	// A forced change once applied: the annotation has done its work, and
	// left in place it would let the next unsafe change through unasked.
	if _, forced := cfg.Annotations[v1alpha1.ForceUnsafeChangeAnnotation]; forced && applied(cfg) {
		updated := cfg.DeepCopy()
		delete(updated.Annotations, v1alpha1.ForceUnsafeChangeAnnotation)
		if _, err := c.client.NetworkV1alpha1().NetworkConfigs().Update(ctx, updated, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("removing the annotation %s of networkconfig %s: %w", v1alpha1.ForceUnsafeChangeAnnotation, ref.Name, err)
		}
		logger.Info("Removed the force annotation of an applied change", "annotation", v1alpha1.ForceUnsafeChangeAnnotation)
	}
	return nil
}

// create creates the NetworkConfig with every default filled in.
func (c *Controller) create(ctx context.Context, underlays map[string]int32) error {
	cfg := &v1alpha1.NetworkConfig{
		ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.NetworkConfigName},
		Spec:       Defaults(v1alpha1.NetworkConfigSpec{}, underlays),
	}
	result, err := c.client.NetworkV1alpha1().NetworkConfigs().Create(ctx, cfg, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		// Someone else was quicker; the informer will bring it.
		return nil
	}
	if err != nil {
		return fmt.Errorf("creating networkconfig %s: %w", cfg.Name, err)
	}
	smallest, _ := smallestUnderlay(underlays)
	klog.FromContext(ctx).Info("Created the network configuration",
		"overlayMTU", *result.Spec.OverlayMTU, "tunnelPort", *result.Spec.TunnelPort,
		"nodesReporting", len(underlays), "smallestUnderlayMTU", smallest)
	c.recorder.Eventf(result, corev1.EventTypeNormal, ReasonCreated, "Created with overlay MTU %d (%s) and tunnel port %d",
		*result.Spec.OverlayMTU, mtuOrigin(underlays), *result.Spec.TunnelPort)
	return nil
}

// recordChanges logs and records Events for what changed from was to now.
func (c *Controller) recordChanges(ctx context.Context, cfg *v1alpha1.NetworkConfig, was, now *v1alpha1.NetworkConfigStatus) {
	logger := klog.FromContext(ctx)
	if was.OverlayMTU != now.OverlayMTU || was.TunnelPort != now.TunnelPort {
		logger.Info("Applied the network configuration", "overlayMTU", now.OverlayMTU, "tunnelPort", now.TunnelPort,
			"previousOverlayMTU", was.OverlayMTU, "previousTunnelPort", was.TunnelPort)
		c.recorder.Eventf(cfg, corev1.EventTypeNormal, ReasonApplied, "Applied overlay MTU %d and tunnel port %d", now.OverlayMTU, now.TunnelPort)
	}
	if now.Underlay.NodesTooSmall > was.Underlay.NodesTooSmall {
		msg := meta.FindStatusCondition(now.Conditions, v1alpha1.NetworkConfigUnderlayFits).Message
		logger.Info("Warning: nodes' underlays cannot carry the overlay MTU", "overlayMTU", now.OverlayMTU, "nodesTooSmall", now.Underlay.NodesTooSmall)
		c.recorder.Event(cfg, corev1.EventTypeWarning, ReasonUnderlayTooSmall, msg)
	}
}

// applied reports whether cfg's status holds the values of its spec.
func applied(cfg *v1alpha1.NetworkConfig) bool {
	s := cfg.Spec
	return s.OverlayMTU != nil && s.TunnelPort != nil &&
		cfg.Status.OverlayMTU == *s.OverlayMTU && cfg.Status.TunnelPort == *s.TunnelPort
}

// underlays returns the underlay MTU each Node reports, by node name; a
// malformed report is logged and left out.
func (c *Controller) underlays(ctx context.Context) (map[string]int32, error) {
	nodes, err := c.nodes.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("listing the nodes from the cache: %w", err)
	}
	out := make(map[string]int32, len(nodes))
	for _, node := range nodes {
		v, ok := node.Annotations[v1alpha1.UnderlayMTUAnnotation]
		if !ok {
			continue
		}
		mtu, err := ParseUnderlayMTU(v)
		if err != nil {
			klog.FromContext(ctx).V(2).Info("Ignoring a node's underlay MTU report", "node", klog.KObj(node), "err", err)
			continue
		}
		out[node.Name] = mtu
	}
	return out, nil
}

// attachmentMTUs returns how many attachments report each MTU, from the
// index: the count of each value, not a walk of every attachment.
func (c *Controller) attachmentMTUs() map[int32]int {
	out := map[int32]int{}
	for _, v := range c.attachments.ListIndexFuncValues(attachmentsByMTUIndex) {
		mtu, err := strconv.ParseInt(v, 10, 32)
		if err != nil {
			continue
		}
		keys, err := c.attachments.IndexKeys(attachmentsByMTUIndex, v)
		if err != nil || len(keys) == 0 {
			continue
		}
		out[int32(mtu)] = len(keys)
	}
	return out
}

// ParseUnderlayMTU parses the value of a Node's underlay MTU annotation.
func ParseUnderlayMTU(v string) (int32, error) {
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil || n < minUnderlayMTU || n > maxUnderlayMTU {
		return 0, fmt.Errorf("annotation %s: %q is not an MTU in [%d,%d]", v1alpha1.UnderlayMTUAnnotation, v, minUnderlayMTU, maxUnderlayMTU)
	}
	return int32(n), nil
}

// smallestUnderlay returns the smallest underlay MTU reported, and false
// when none is.
func smallestUnderlay(underlays map[string]int32) (int32, bool) {
	if len(underlays) == 0 {
		return 0, false
	}
	return slices.Min(slices.Collect(maps.Values(underlays))), true
}

// OverlayMTU returns the overlay MTU of a new configuration: the smallest
// underlay MTU reported less VXLAN's overhead, within [MinOverlayMTU,
// MaxOverlayMTU]; DefaultUnderlayMTU less the overhead (1450) when no node
// reports one.
func OverlayMTU(underlays map[string]int32) int32 {
	smallest, ok := smallestUnderlay(underlays)
	if !ok {
		smallest = v1alpha1.DefaultUnderlayMTU
	}
	return min(max(smallest-v1alpha1.VXLANOverhead, v1alpha1.MinOverlayMTU), v1alpha1.MaxOverlayMTU)
}

// mtuOrigin says where OverlayMTU(underlays) came from, for an Event.
func mtuOrigin(underlays map[string]int32) string {
	smallest, ok := smallestUnderlay(underlays)
	if !ok {
		return fmt.Sprintf("no node reports its underlay yet: %d less VXLAN's %d bytes", v1alpha1.DefaultUnderlayMTU, v1alpha1.VXLANOverhead)
	}
	return fmt.Sprintf("the smallest of %d nodes' underlays, %d, less VXLAN's %d bytes", len(underlays), smallest, v1alpha1.VXLANOverhead)
}

// Defaults returns spec with every field it leaves out filled in: the
// overlay MTU from underlays (OverlayMTU), the tunnel port
// DefaultTunnelPort. Fields spec sets stay as they are.
func Defaults(spec v1alpha1.NetworkConfigSpec, underlays map[string]int32) v1alpha1.NetworkConfigSpec {
	out := *spec.DeepCopy()
	if out.OverlayMTU == nil {
		mtu := OverlayMTU(underlays)
		out.OverlayMTU = &mtu
	}
	if out.TunnelPort == nil {
		port := int32(v1alpha1.DefaultTunnelPort)
		out.TunnelPort = &port
	}
	return out
}

// Status returns the status cfg should have: its spec applied (cfg's spec
// must have every field set), the underlay report of underlays, and the
// count of attachments whose MTU, of those mtus counts (attachments by
// status.mtu), is not the one applied. The conditions keep their
// transition times while they hold.
func Status(cfg *v1alpha1.NetworkConfig, underlays map[string]int32, mtus map[int32]int) v1alpha1.NetworkConfigStatus {
	st := v1alpha1.NetworkConfigStatus{
		ObservedGeneration: cfg.Generation,
		OverlayMTU:         *cfg.Spec.OverlayMTU,
		TunnelPort:         *cfg.Spec.TunnelPort,
		Conditions:         slices.Clone(cfg.Status.Conditions),
	}
	for mtu, n := range mtus {
		if mtu != st.OverlayMTU {
			st.AttachmentsWithOtherMTU += int32(n)
		}
	}
	applied := fmt.Sprintf("Agents use overlay MTU %d and tunnel port %d", st.OverlayMTU, st.TunnelPort)
	if n := st.AttachmentsWithOtherMTU; n > 0 {
		applied += fmt.Sprintf("; %d attachments' interfaces have another MTU until their pods are re-created", n)
	}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{
		Type:               v1alpha1.NetworkConfigApplied,
		Status:             metav1.ConditionTrue,
		Reason:             v1alpha1.ReasonConfigApplied,
		Message:            applied,
		ObservedGeneration: cfg.Generation,
	})

	// The nodes that cannot carry the MTU, smallest underlay first.
	need := st.OverlayMTU + v1alpha1.VXLANOverhead
	var tooSmall []v1alpha1.NodeUnderlay
	for node, mtu := range underlays {
		if mtu < need {
			tooSmall = append(tooSmall, v1alpha1.NodeUnderlay{Node: node, MTU: mtu})
		}
	}
	slices.SortFunc(tooSmall, func(a, b v1alpha1.NodeUnderlay) int {
		if a.MTU != b.MTU {
			return int(a.MTU - b.MTU)
		}
		return strings.Compare(a.Node, b.Node)
	})
	smallest, _ := smallestUnderlay(underlays)
	st.Underlay = v1alpha1.UnderlayReport{
		NodesReporting: int32(len(underlays)),
		SmallestMTU:    smallest,
		NodesTooSmall:  int32(len(tooSmall)),
		TooSmall:       tooSmall[:min(len(tooSmall), v1alpha1.MaxTooSmallNamed)],
	}
	if len(st.Underlay.TooSmall) == 0 {
		st.Underlay.TooSmall = nil
	}

	fits := metav1.Condition{Type: v1alpha1.NetworkConfigUnderlayFits, ObservedGeneration: cfg.Generation}
	switch {
	case len(underlays) == 0:
		fits.Status, fits.Reason = metav1.ConditionUnknown, v1alpha1.ReasonNoUnderlayReports
		fits.Message = fmt.Sprintf("No node reports its underlay MTU (annotation %s)", v1alpha1.UnderlayMTUAnnotation)
	case len(tooSmall) > 0:
		fits.Status, fits.Reason = metav1.ConditionFalse, v1alpha1.ReasonUnderlayTooSmall
		named := make([]string, 0, len(st.Underlay.TooSmall))
		for _, n := range st.Underlay.TooSmall[:min(len(tooSmall), 5)] {
			named = append(named, fmt.Sprintf("%s (%d)", n.Node, n.MTU))
		}
		list := strings.Join(named, ", ")
		if len(tooSmall) > len(named) {
			list += fmt.Sprintf(" and %d more", len(tooSmall)-len(named))
		}
		fits.Message = fmt.Sprintf("%d of %d nodes have an underlay MTU below %d, the overlay MTU %d plus VXLAN's %d bytes: %s; packets larger than their underlay carries are lost",
			len(tooSmall), len(underlays), need, st.OverlayMTU, v1alpha1.VXLANOverhead, list)
	default:
		fits.Status, fits.Reason = metav1.ConditionTrue, v1alpha1.ReasonUnderlayFits
		fits.Message = fmt.Sprintf("All %d reporting nodes have an underlay MTU of at least %d, the overlay MTU %d plus VXLAN's %d bytes",
			len(underlays), need, st.OverlayMTU, v1alpha1.VXLANOverhead)
	}
	meta.SetStatusCondition(&st.Conditions, fits)
	return st
}
