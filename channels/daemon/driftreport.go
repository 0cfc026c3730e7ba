package daemon

// This file reports drift that is not repaired: the drifted metric, a log
// line and a Warning Event naming who changed the object.

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/klog/v2"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kos-sdn/kos/channels"
)

// reportDrift records what inspect found of one object whose drift is
// reported rather than repaired: when it is gone, or changed, and that was
// not reported yet, it posts an Event on it naming who changed it and sets
// its metric (drift "deleted", "changed", or "controller" when only
// controllers changed it); when it is back as its release has it, it
// clears the metric. It returns how many objects it newly reported (0 or
// 1).
func (d *Daemon) reportDrift(ctx context.Context, addon string, st *addonDrift, t *channels.Object, f driftFinding) (int, error) {
	st.seen[t.Key] = ""
	if f.live != nil {
		st.seen[t.Key] = fingerprint(f.live)
	}
	label := f.how
	if f.byController() {
		label = "controller"
	}
	now := ""
	if label != "" {
		now = label + "\x00" + describeOwners(append(append([]fieldOwner(nil), f.people...), f.controllers...))
	}
	before := st.reported[t.Key]
	switch {
	case now == before:
		return 0, nil
	case now == "":
		delete(st.reported, t.Key)
		d.metrics.setDrifted(addon, t.Key, driftLabel(before), false)
		return 0, nil
	}
	if before != "" {
		d.metrics.setDrifted(addon, t.Key, driftLabel(before), false)
	}
	st.reported[t.Key] = now
	d.metrics.setDrifted(addon, t.Key, label, true)
	klog.FromContext(ctx).Info("Object drifted from its release; not repaired", "addon", addon, "object", t.Key.String(), "drift", label,
		"people", describeOwners(f.people), "controllers", describeOwners(f.controllers))
	if err := postDriftEvent(ctx, d.client.Kube, d.opts.Apply.Identity, addon, t, f); err != nil {
		return 1, err
	}
	return 1, nil
}

// driftLabel is the drift label of a reported state (see reportDrift).
func driftLabel(reported string) string {
	label, _, _ := strings.Cut(reported, "\x00")
	return label
}

// driftMessage says how an object drifted, for its Event: who changed
// which fields, and whether they were people or controllers.
func driftMessage(key channels.ObjectKey, addon string, f driftFinding) string {
	switch {
	case f.how == "deleted":
		return fmt.Sprintf("%s was deleted: it is missing from the release of addon %s, which is not re-applied (drift mode report); the next release of the addon applies it", key, addon)
	case f.byController():
		return fmt.Sprintf("%s has fields of the release of addon %s that controllers set since (%s): channels leaves them to their controllers, even in drift mode repair", key, addon, describeOwners(f.controllers))
	}
	by := "by hand"
	if len(f.people) > 0 {
		by += " (" + describeOwners(f.people) + ")"
	}
	msg := fmt.Sprintf("%s was changed %s: it differs from the release of addon %s, which is not re-applied (drift mode report); the next release of the addon applies it", key, by, addon)
	if len(f.controllers) > 0 {
		msg += "; fields controllers set (" + describeOwners(f.controllers) + ") are left to them"
	}
	return msg
}

// postDriftEvent posts a Warning Event, reason Drifted, on an object that
// drifted from its release; a deleted object's Event names it without its
// UID. Events of cluster-scoped objects go to the default namespace, as
// kubectl looks for them.
func postDriftEvent(ctx context.Context, kube kubernetes.Interface, instance, addon string, t *channels.Object, f driftFinding) error {
	live := f.live
	namespace := t.Key.Namespace
	if namespace == "" {
		namespace = metav1.NamespaceDefault
	}
	ref := corev1.ObjectReference{
		APIVersion: t.Obj.GetAPIVersion(), Kind: t.Obj.GetKind(),
		Namespace: t.Key.Namespace, Name: t.Key.Name,
	}
	if live != nil {
		ref.UID, ref.ResourceVersion = live.GetUID(), live.GetResourceVersion()
	}
	now := metav1.Now()
	ev := &corev1.Event{
		ObjectMeta:          metav1.ObjectMeta{GenerateName: t.Key.Name + ".", Namespace: namespace},
		InvolvedObject:      ref,
		Reason:              DriftEventReason,
		Message:             driftMessage(t.Key, addon, f),
		Type:                corev1.EventTypeWarning,
		Source:              corev1.EventSource{Component: channels.FieldManager},
		ReportingController: channels.FieldManager,
		ReportingInstance:   instance,
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
	}
	if _, err := kube.CoreV1().Events(namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("posting the drift event of %s: %w", t.Key, err)
	}
	return nil
}

// DriftEventReason is the reason of the Events reporting drift.
const DriftEventReason = "Drifted"
