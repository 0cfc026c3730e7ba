package channels

import (
	"context"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// This file is what a client that applies installed releases again (the
// daemon's drift repair, package channels/daemon) needs of Apply: the
// objects of a release as Apply sends them, applying them again under the
// Lease, and deciding again whether a release is still the installed one.

// CreateOnlyAnnotation, set to "true" on an object of a manifest, applies
// the object only when it does not exist: an install creates it, and
// neither an update nor drift repair changes it once it is there (a
// deleted one is drift, and created again in repair mode). It suits
// objects an addon seeds for its users to edit, such as a default
// configuration.
const CreateOnlyAnnotation = "channels.kos.example.com/create-only"

// CreateOnly reports whether a manifest's object is to be created only
// (CreateOnlyAnnotation).
func CreateOnly(u *unstructured.Unstructured) bool {
	return u.GetAnnotations()[CreateOnlyAnnotation] == "true"
}

// Object is one object of a release as Apply sends it: stamped with the
// addon's labels, placed in its namespace, and mapped to its resource.
type Object struct {
	Obj     *unstructured.Unstructured
	Key     ObjectKey
	Mapping *meta.RESTMapping
}

// Objects reads, verifies, decodes, stamps and maps the objects of release
// a, as Apply does. Every object's kind must be served.
func (c *Client) Objects(ctx context.Context, f *Fetcher, a *Addon) ([]*Object, error) {
	objs, err := releaseObjects(ctx, f, a)
	if err != nil {
		return nil, err
	}
	w := &addonWriter{client: c, parallelism: defaultParallelism}
	rel, err := w.prepare(ctx, objs)
	if err != nil {
		return nil, err
	}
	out := make([]*Object, 0, len(objs))
	for _, u := range objs {
		t := rel.ready[u]
		if t == nil {
			return nil, fmt.Errorf("%s: the server does not serve its kind", keyOf(u))
		}
		out = append(out, &Object{Obj: t.obj, Key: t.key, Mapping: t.mapping})
	}
	return out, nil
}

// Reapply applies objs again as Apply applies them, parallelism at a time
// (0 means Apply's default): server-side apply with force, or, for an
// object to be created only (CreateOnly), creating it unless it exists.
// It calls done with each object and the server's answer, one call at a
// time, and returns every error joined. The caller holds the Lease
// (WithLease).
func (c *Client) Reapply(ctx context.Context, objs []*Object, parallelism int, done func(o *Object, live *unstructured.Unstructured)) error {
	w := &addonWriter{client: c, parallelism: parallelism}
	var mu sync.Mutex
	return w.each(ctx, len(objs), func(ctx context.Context, i int) error {
		o := objs[i]
		t := &target{obj: o.Obj, key: o.Key, mapping: o.Mapping}
		var out *unstructured.Unstructured
		var err error
		if CreateOnly(o.Obj) {
			out, err = w.createOnce(ctx, t)
		} else {
			out, err = w.applyOne(ctx, t)
		}
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		done(o, out)
		return nil
	})
}

// WithLease runs fn while holding the channels Lease as identity (see
// package channels/lease), reporting taking, waiting for and releasing it
// to onEvent, which may be nil.
func (c *Client) WithLease(ctx context.Context, identity string, onEvent func(Event), fn func(context.Context) error) error {
	return c.withLease(ctx, identity, newReporter(onEvent), fn)
}

// Redecide decides the items of a plan again against the install records
// on the cluster now, as another run may have applied since the plan was
// made: call it holding the Lease.
func (c *Client) Redecide(ctx context.Context, items []PlanItem, opts DecideOptions) error {
	return c.decide(ctx, items, opts)
}
