package daemon

// This file lists the metadata of an addon's objects, whose fingerprints
// tell the drift check which objects changed since it last looked.

import (
	"context"
	"fmt"
	"hash/fnv"
	"sort"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kos-sdn/kos/channels"
)

// fingerprint is what of an object's metadata changes when someone edits
// it: its generation, labels and annotations when it has a generation (so
// that status updates do not count), else its resourceVersion; and its UID,
// which changes when it is deleted and made again.
func fingerprint(m metav1.Object) string {
	if m.GetGeneration() == 0 {
		return string(m.GetUID()) + "/rv" + m.GetResourceVersion()
	}
	h := fnv.New64a()
	for _, set := range []map[string]string{m.GetLabels(), m.GetAnnotations()} {
		keys := make([]string, 0, len(set))
		for k := range set {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			h.Write([]byte(k + "=" + set[k] + "\x00"))
		}
		h.Write([]byte{1})
	}
	return string(m.GetUID()) + "/g" + strconv.FormatInt(m.GetGeneration(), 10) + "/" + strconv.FormatUint(h.Sum64(), 16)
}

// listLimit is the page size of the drift check's metadata lists.
const listLimit = 500

// listedObject is what a metadata list found of an object.
type listedObject struct {
	fingerprint     string
	resourceVersion string
}

// listFingerprints lists the metadata of an addon's objects, one list per
// resource and namespace its objects are in.
func (d *Daemon) listFingerprints(ctx context.Context, addon string, st *addonDrift) (map[channels.ObjectKey]listedObject, error) {
	set := map[listScope]bool{}
	out := map[channels.ObjectKey]listedObject{}
	for _, t := range st.targets {
		if t.Key.IsNamespace() {
			// Found by name: another addon's apply may have taken it.
			m, err := d.client.Metadata.Resource(t.Mapping.Resource).Get(ctx, t.Key.Name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
			case err != nil:
				return nil, fmt.Errorf("reading %s to check for drift: %w", t.Key, err)
			case m.DeletionTimestamp == nil:
				out[t.Key] = listedObject{fingerprint: fingerprint(m), resourceVersion: m.ResourceVersion}
			}
			continue
		}
		set[listScope{gvr: t.Mapping.Resource, gk: t.Key.GroupKind, namespace: t.Key.Namespace}] = true
	}
	selector := labels.SelectorFromSet(labels.Set{channels.IdentityLabel: addon}).String()
	for sc := range set {
		if err := d.listIn(ctx, sc, selector, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// listScope is one metadata list of the drift check: a resource in one
// namespace ("" for a cluster-scoped one).
type listScope struct {
	gvr       schema.GroupVersionResource
	gk        schema.GroupKind
	namespace string
}

// listIn adds to out the objects of sc that selector selects and that
// are not being deleted, a page of listLimit at a time.
func (d *Daemon) listIn(ctx context.Context, sc listScope, selector string, out map[channels.ObjectKey]listedObject) error {
	opts := metav1.ListOptions{LabelSelector: selector, Limit: listLimit}
	for {
		var list *metav1.PartialObjectMetadataList
		var err error
		if sc.namespace == "" {
			list, err = d.client.Metadata.Resource(sc.gvr).List(ctx, opts)
		} else {
			list, err = d.client.Metadata.Resource(sc.gvr).Namespace(sc.namespace).List(ctx, opts)
		}
		if err != nil {
			return fmt.Errorf("listing %s to check for drift: %w", sc.gk, err)
		}
		for i := range list.Items {
			m := &list.Items[i]
			if m.DeletionTimestamp != nil {
				continue
			}
			out[channels.ObjectKey{GroupKind: sc.gk, Namespace: m.Namespace, Name: m.Name}] = listedObject{fingerprint: fingerprint(m), resourceVersion: m.ResourceVersion}
		}
		if list.Continue == "" {
			return nil
		}
		opts.Continue = list.Continue
	}
}
