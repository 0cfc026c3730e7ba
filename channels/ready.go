package channels

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

// How often the readiness gate checks its deadline and may report progress,
// and how often it reports progress when nothing changes.
const (
	progressTick     = time.Second
	progressInterval = 10 * time.Second
)

var apiServiceKind = schema.GroupKind{Group: "apiregistration.k8s.io", Kind: "APIService"}

// waiting is an applied object the readiness gate waits for.
type waiting struct {
	key     ObjectKey
	message string
}

// watchGroup is the objects of one kind in one namespace that the readiness
// gate waits for, which one watch follows.
type watchGroup struct {
	gvr       schema.GroupVersionResource
	gk        schema.GroupKind
	namespace string
	names     map[string]bool
	// labeled is set when every object carries the addon's IdentityLabel,
	// which the watch then selects by.
	labeled bool
}

// seen is an object as a watch saw it; obj is nil once it is deleted.
type seen struct {
	key ObjectKey
	obj *unstructured.Unstructured
}

// waitReady waits until every applied object is ready, as kstatus computes
// it: Deployments, DaemonSets and StatefulSets rolled out, Jobs complete,
// and so on; and APIServices Available, which kstatus does not know. It
// reads the objects as apply returned them, then follows those not ready
// with one watch per kind and namespace (by the addon's IdentityLabel)
// rather than reading them again. It reports progress while it waits, and
// fails on the first object kstatus finds Failed, on one deleted while it
// waits, or when timeout passes, naming the objects not ready and why.
func (w *addonWriter) waitReady(ctx context.Context, addon string, objs []*unstructured.Unstructured, timeout time.Duration, r *reporter) error {
	pending := map[ObjectKey]*waiting{}
	groups := map[string]*watchGroup{}
	for _, u := range objs {
		if u == nil {
			continue
		}
		ready, msg, err := w.readiness(ctx, u)
		if err != nil {
			return err
		}
		if ready {
			continue
		}
		key := keyOf(u)
		mapping, err := w.client.mapping(ctx, u.GroupVersionKind(), false)
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		pending[key] = &waiting{key: key, message: msg}
		id := mapping.Resource.String() + "/" + key.Namespace
		g := groups[id]
		if g == nil {
			g = &watchGroup{gvr: mapping.Resource, gk: key.GroupKind, namespace: key.Namespace, names: map[string]bool{}, labeled: true}
			groups[id] = g
		}
		g.names[key.Name] = true
		g.labeled = g.labeled && u.GetLabels()[IdentityLabel] == addon
	}
	if len(pending) == 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events := make(chan seen)
	for _, g := range groups {
		w.watch(ctx, g, addon, events)
	}
	line := func() string {
		ws := make([]*waiting, 0, len(pending))
		for _, p := range pending {
			ws = append(ws, p)
		}
		sort.Slice(ws, func(i, j int) bool { return ws[i].key.String() < ws[j].key.String() })
		return describeWaiting(ws)
	}
	lastLine := line()
	r.report(EventProgress, addon, "Waiting for %s", lastLine)
	lastReport := time.Now()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	ticker := time.NewTicker(progressTick)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", line(), context.Cause(ctx))
		case <-deadline.C:
			return fmt.Errorf("not ready after %s: %s; the release stays unrecorded, fix it and run again (or raise --timeout)", timeout, line())
		case <-ticker.C:
			// Progress at most once a tick, whatever the watches see.
			if l := line(); l != lastLine || time.Since(lastReport) >= progressInterval {
				r.report(EventProgress, addon, "Waiting for %s", l)
				lastReport, lastLine = time.Now(), l
			}
		case ev := <-events:
			p, ok := pending[ev.key]
			if !ok {
				continue
			}
			if ev.obj == nil {
				return fmt.Errorf("%s was deleted while waiting for it to be ready", ev.key)
			}
			ready, msg, err := w.readiness(ctx, ev.obj)
			if err != nil {
				return err
			}
			if !ready {
				p.message = msg
				continue
			}
			delete(pending, ev.key)
			if len(pending) == 0 {
				r.report(EventProgress, addon, "Ready")
				return nil
			}
		}
	}
}

// watch follows the objects of a group until ctx is done, sending each
// version of them it sees (first as listed, then as watched, listing again
// when the watch ends) to out. It selects by the addon's IdentityLabel when
// every object carries it, by name when the group is one object, and
// filters by name in any case.
func (w *addonWriter) watch(ctx context.Context, g *watchGroup, addon string, out chan<- seen) {
	ri := resourceFor(w.client.Dynamic, g.gvr, g.namespace)
	narrow := func(o *metav1.ListOptions) {
		switch {
		case g.labeled:
			o.LabelSelector = IdentityLabel + "=" + addon
		case len(g.names) == 1:
			for name := range g.names {
				o.FieldSelector = "metadata.name=" + name
			}
		}
	}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			narrow(&o)
			return ri.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			narrow(&o)
			return ri.Watch(ctx, o)
		},
	}
	send := func(obj any, deleted bool) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		u, ok := obj.(*unstructured.Unstructured)
		if !ok || !g.names[u.GetName()] {
			return
		}
		ev := seen{key: ObjectKey{GroupKind: g.gk, Namespace: u.GetNamespace(), Name: u.GetName()}, obj: u}
		if deleted {
			ev.obj = nil
		}
		select {
		case out <- ev:
		case <-ctx.Done():
		}
	}
	inf := cache.NewSharedIndexInformer(lw, &unstructured.Unstructured{}, 0, cache.Indexers{})
	// The handlers run on the informer's goroutine: what they send is read
	// in the order it happened.
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { send(obj, false) },
		UpdateFunc: func(_, obj any) { send(obj, false) },
		DeleteFunc: func(obj any) { send(obj, true) },
	})
	// The informer stops when waitReady returns and cancels ctx.
	go inf.RunWithContext(ctx)
}

// mustHold names, for kinds kstatus calls Current too early, the condition
// that must be True as well: kstatus takes a running Job for Current, and
// does not know APIServices at all.
var mustHold = map[schema.GroupKind]string{
	apiServiceKind:                "Available",
	{Group: "batch", Kind: "Job"}: "Complete",
}

// readiness is readiness, except that a PersistentVolumeClaim whose
// StorageClass binds only once a pod uses the claim (WaitForFirstConsumer,
// the default of most clouds' classes) is ready while Pending: kstatus calls
// it InProgress, but it is as ready as it can be before its first pod, which
// may be a CronJob's, hours later.
func (w *addonWriter) readiness(ctx context.Context, u *unstructured.Unstructured) (bool, string, error) {
	ready, msg, err := readiness(u)
	if ready || err != nil || u.GroupVersionKind().GroupKind() != pvcKind {
		return ready, msg, err
	}
	phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
	class, _, _ := unstructured.NestedString(u.Object, "spec", "storageClassName")
	if phase != string(corev1.ClaimPending) || class == "" || w.client.Kube == nil {
		return ready, msg, nil
	}
	sc, err := w.client.Kube.StorageV1().StorageClasses().Get(ctx, class, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return ready, msg, nil
	}
	if err != nil {
		return false, "", fmt.Errorf("reading StorageClass %s of %s: %w", class, keyOf(u), err)
	}
	if sc.VolumeBindingMode != nil && *sc.VolumeBindingMode == storagev1.VolumeBindingWaitForFirstConsumer {
		return true, "", nil
	}
	return ready, msg, nil
}

// pvcKind is the kind whose readiness depends on its StorageClass.
var pvcKind = schema.GroupKind{Kind: "PersistentVolumeClaim"}

// readiness says whether an object is ready and, if not, why, in kstatus's
// words; it fails when kstatus finds the object Failed.
func readiness(u *unstructured.Unstructured) (bool, string, error) {
	key := keyOf(u)
	res, err := status.Compute(u)
	if err != nil {
		return false, "", fmt.Errorf("computing the status of %s: %w", key, err)
	}
	if res.Status == status.FailedStatus {
		return false, "", fmt.Errorf("%s failed: %s", key, res.Message)
	}
	if res.Status != status.CurrentStatus {
		return false, res.Message, nil
	}
	want, ok := mustHold[key.GroupKind]
	if !ok {
		return true, "", nil
	}
	obj, err := status.GetObjectWithConditions(u.Object)
	if err != nil {
		return false, "", fmt.Errorf("reading the conditions of %s: %w", key, err)
	}
	for _, c := range obj.Status.Conditions {
		if c.Type == want {
			if c.Status == corev1.ConditionTrue {
				return true, "", nil
			}
			return false, fmt.Sprintf("not %s: %s: %s", want, c.Reason, c.Message), nil
		}
	}
	if res.Message != "" && key.GroupKind != apiServiceKind {
		return false, res.Message, nil
	}
	return false, "not " + want + " yet", nil
}

// describeWaiting lists the objects waited for and why, on one line.
func describeWaiting(ws []*waiting) string {
	parts := make([]string, len(ws))
	for i, w := range ws {
		parts[i] = w.key.String()
		if w.message != "" {
			parts[i] += " (" + w.message + ")"
		}
	}
	return strings.Join(parts, ", ")
}
