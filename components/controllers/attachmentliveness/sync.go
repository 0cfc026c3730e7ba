package attachmentliveness

import (
	"context"
	"errors"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
)

// sync brings the Ready conditions of the attachments of the node key names
// in line with its Lease: Unknown on the Ready ones while the Lease is
// stale, derived by the server once the Lease is renewed or gone. Until the
// controller has seen a renewal or a Lease go stale (after it started, or
// took the lead) it leaves the marks as they are: clearing them would
// undo a predecessor's for a Lease duration. While the Lease is not stale
// the key comes back when it would be, which no event announces.
func (c *Controller) sync(ctx context.Context, key cache.ObjectName) error {
	node := key.Name
	lease, err := c.leases.Get(node)
	if apierrors.IsNotFound(err) {
		lease = nil
	} else if err != nil {
		return fmt.Errorf("reading the lease of node %s: %w", node, err)
	}
	v, silence, recheck := c.judge(node, lease)
	if recheck > 0 {
		c.queue.AddAfter(node, recheck)
	}
	objs, err := c.attachments.ByIndex(attachmentsByNodeIndex, node)
	if err != nil {
		return fmt.Errorf("listing the attachments of node %s: %w", node, err)
	}
	var errs []error
	marked := 0
	for _, obj := range objs {
		// The cache's object: read it, never change it.
		att := obj.(*v1alpha1.NetworkAttachment)
		ready := meta.FindStatusCondition(att.Status.Conditions, v1alpha1.NetworkAttachmentReady)
		switch {
		case v == silent && ready != nil && ready.Status == metav1.ConditionTrue:
			if err := c.mark(ctx, att, silence); err != nil {
				errs = append(errs, err)
				continue
			}
			marked++
		case (v == alive || v == unjudged) && markedByUs(ready):
			if err := c.clear(ctx, att); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if marked > 0 {
		klog.FromContext(ctx).Info("Marked the attachments of a node whose agent stopped heartbeating", "node", node, "attachments", marked, "message", silence)
	}
	return errors.Join(errs...)
}

// verdict is what the controller makes of a node's Lease.
type verdict int

const (
	// unjudged: the node has no Lease; its agent does not heartbeat.
	unjudged verdict = iota
	// pending: the Lease is not stale, but the controller has not seen it
	// renewed yet.
	pending
	// alive: the controller saw the Lease renewed, and not long ago.
	alive
	// silent: the Lease has gone unrenewed for its duration and the grace.
	silent
)

// judge returns its verdict on node's Lease (nil when it has none); for a
// silent node, a message saying since when; and when to look again (0:
// only on an event).
func (c *Controller) judge(node string, lease *coordinationv1.Lease) (v verdict, silence string, recheck time.Duration) {
	now := c.clock.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if lease == nil {
		delete(c.seen, node)
		c.setSilentLocked(node, false)
		return unjudged, "", 0
	}
	var renewed time.Time
	if lease.Spec.RenewTime != nil {
		renewed = lease.Spec.RenewTime.Time
	}
	hb, ok := c.seen[node]
	switch {
	case !ok:
		hb = heartbeat{renewTime: renewed, seenAt: now}
		c.seen[node] = hb
	case !hb.renewTime.Equal(renewed):
		hb = heartbeat{renewTime: renewed, seenAt: now, renewalSeen: true}
		c.seen[node] = hb
	}
	duration := DefaultLeaseDuration
	if s := lease.Spec.LeaseDurationSeconds; s != nil && *s > 0 {
		duration = time.Duration(*s) * time.Second
	}
	deadline := hb.seenAt.Add(duration + c.grace)
	if now.Before(deadline) {
		c.setSilentLocked(node, false)
		if !hb.renewalSeen {
			return pending, "", deadline.Sub(now)
		}
		return alive, "", deadline.Sub(now)
	}
	c.setSilentLocked(node, true)
	last := "never"
	if !renewed.IsZero() {
		last = renewed.UTC().Format(time.RFC3339)
	}
	return silent, fmt.Sprintf("The agent of node %s has not renewed its Lease %s/%s (duration %s) since %s", node, lease.Namespace, lease.Name, duration, last), 0
}

// setSilentLocked records whether node is judged silent and updates the
// gauge. c.mu is held.
func (c *Controller) setSilentLocked(node string, silent bool) {
	if silent {
		c.silent[node] = true
	} else {
		delete(c.silent, node)
	}
	if c.silentNodes != nil {
		c.silentNodes.Set(float64(len(c.silent)))
	}
}

// markedByUs tells whether the Ready condition is the Unknown this
// controller asks for.
func markedByUs(ready *metav1.Condition) bool {
	return ready != nil && ready.Status == metav1.ConditionUnknown && ready.Reason == v1alpha1.ReasonAgentNotHeartbeating
}

// mark asks the server to set att's Ready to Unknown with message.
func (c *Controller) mark(ctx context.Context, att *v1alpha1.NetworkAttachment, message string) error {
	out := att.ForStatusWrite()
	meta.SetStatusCondition(&out.Status.Conditions, metav1.Condition{
		Type:               v1alpha1.NetworkAttachmentReady,
		Status:             metav1.ConditionUnknown,
		ObservedGeneration: att.Generation,
		Reason:             v1alpha1.ReasonAgentNotHeartbeating,
		Message:            message,
	})
	updated, err := c.client.NetworkV1alpha1().NetworkAttachments(att.Namespace).UpdateStatus(ctx, out, metav1.UpdateOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("marking attachment %s/%s: %w", att.Namespace, att.Name, err)
	}
	// The write was of the stored status (its resourceVersion says so),
	// which the server derives Ready from: a server that honours the
	// request keeps it. One that does not is older than this controller;
	// retrying would not change its mind.
	if !markedByUs(meta.FindStatusCondition(updated.Status.Conditions, v1alpha1.NetworkAttachmentReady)) {
		c.ignored.Do(func() {
			klog.FromContext(ctx).Info("The KOS API does not keep Ready=Unknown on attachments; upgrade kos-apiserver for stale Ready", "attachment", klog.KObj(att))
		})
	}
	return nil
}

// clear asks the server to derive att's Ready afresh.
func (c *Controller) clear(ctx context.Context, att *v1alpha1.NetworkAttachment) error {
	out := att.ForStatusWrite()
	meta.RemoveStatusCondition(&out.Status.Conditions, v1alpha1.NetworkAttachmentReady)
	_, err := c.client.NetworkV1alpha1().NetworkAttachments(att.Namespace).UpdateStatus(ctx, out, metav1.UpdateOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("clearing the mark of attachment %s/%s: %w", att.Namespace, att.Name, err)
	}
	return nil
}
