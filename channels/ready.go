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
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

// How often the readiness gate reads the objects it waits for, and how often
// it reports progress when nothing changes.
const (
	readyPollInterval = time.Second
	progressInterval  = 10 * time.Second
)

var apiServiceKind = schema.GroupKind{Group: "apiregistration.k8s.io", Kind: "APIService"}

// waiting is an applied object the readiness gate waits for.
type waiting struct {
	key     objectKey
	ri      dynamic.ResourceInterface
	message string
}

// waitReady waits until every applied object is ready, as kstatus computes
// it: Deployments, DaemonSets and StatefulSets rolled out, Jobs complete,
// and so on; and APIServices Available, which kstatus does not know. It
// reports progress while it waits, and fails on the first object kstatus
// finds Failed, or when timeout passes, naming the objects not ready and
// why.
func (w *addonWriter) waitReady(ctx context.Context, addon string, objs []*unstructured.Unstructured, timeout time.Duration, r *reporter) error {
	var pending []*waiting
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
		var ri dynamic.ResourceInterface = w.client.Dynamic.Resource(mapping.Resource)
		if key.Namespace != "" {
			ri = w.client.Dynamic.Resource(mapping.Resource).Namespace(key.Namespace)
		}
		pending = append(pending, &waiting{key: key, ri: ri, message: msg})
	}
	if len(pending) == 0 {
		return nil
	}
	sort.Slice(pending, func(i, j int) bool { return pending[i].key.String() < pending[j].key.String() })
	deadline := time.Now().Add(timeout)
	lastReport, lastLine := time.Time{}, ""
	ticker := time.NewTicker(readyPollInterval)
	defer ticker.Stop()
	for {
		line := describeWaiting(pending)
		if line != lastLine || time.Since(lastReport) >= progressInterval {
			r.report(EventProgress, addon, "Waiting for %s", line)
			lastReport, lastLine = time.Now(), line
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %s: %s; the release stays unrecorded, fix it and run again (or raise --timeout)", timeout, line)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", line, context.Cause(ctx))
		case <-ticker.C:
		}
		var still []*waiting
		for _, p := range pending {
			u, err := p.ri.Get(ctx, p.key.Name, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("reading %s: %w", p.key, err)
			}
			ready, msg, err := w.readiness(ctx, u)
			if err != nil {
				return err
			}
			if !ready {
				p.message = msg
				still = append(still, p)
			}
		}
		pending = still
		if len(pending) == 0 {
			r.report(EventProgress, addon, "Ready")
			return nil
		}
	}
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
