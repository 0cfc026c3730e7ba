package registry

import (
	"context"
	"errors"
	"slices"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/storage"
	cacherstorage "k8s.io/apiserver/pkg/storage/cacher"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/apiserver/pkg/storage/storagebackend/factory"
	"k8s.io/client-go/tools/cache"
)

// CachePerTrigger returns optsGetter with a storage decorator that keeps a
// watch cache per trigger of the resource (generic.StoreOptions.TriggerFunc),
// where the apiserver library's cache supports only one.
//
// A trigger lets the watch cache hand an event only to the watchers that
// select the event's value of the trigger's field, instead of testing the
// event against the filter of every watcher. With several kinds of watchers
// that select by different fields (node agents watch their node's
// attachments and, per network, the network's), one trigger leaves all
// watchers of the other kinds to be tested against every event, and their
// number grows with the cluster. Each watch (and list, so that an informer
// lists and watches the same cache) goes to the cache of the first trigger,
// in the fields' order, that its field selector requires an exact value of;
// other requests go to the cache of the first trigger. Every cache holds all
// objects (memory) and watches etcd on its own.
//
// With the watch cache off, or with fewer than two triggers, the decorator
// is optsGetter's own.
func CachePerTrigger(optsGetter generic.RESTOptionsGetter) generic.RESTOptionsGetter {
	return triggerOptions{optsGetter}
}

type triggerOptions struct{ generic.RESTOptionsGetter }

func (g triggerOptions) GetRESTOptions(resource schema.GroupResource, example runtime.Object) (generic.RESTOptions, error) {
	opts, err := g.RESTOptionsGetter.GetRESTOptions(resource, example)
	if err != nil {
		return opts, err
	}
	opts.Decorator = cachePerTrigger(opts.Decorator)
	return opts, nil
}

func cachePerTrigger(decorate generic.StorageDecorator) generic.StorageDecorator {
	return func(config *storagebackend.ConfigForResource, resourcePrefix string,
		keyFunc func(obj runtime.Object) (string, error), newFunc, newListFunc func() runtime.Object,
		getAttrs storage.AttrFunc, triggers storage.IndexerFuncs, indexers *cache.Indexers,
	) (storage.Interface, factory.DestroyFunc, error) {
		if len(triggers) < 2 {
			return decorate(config, resourcePrefix, keyFunc, newFunc, newListFunc, getAttrs, triggers, indexers)
		}
		fields := make([]string, 0, len(triggers))
		for f := range triggers {
			fields = append(fields, f)
		}
		slices.Sort(fields)
		r := &triggerRouter{fields: fields}
		destroy := func() {
			for _, d := range r.destroy {
				d()
			}
		}
		for i, f := range fields {
			s, d, err := decorate(config, resourcePrefix, keyFunc, newFunc, newListFunc, getAttrs, storage.IndexerFuncs{f: triggers[f]}, indexers)
			if err != nil {
				destroy()
				return nil, nil, err
			}
			r.destroy = append(r.destroy, d)
			if i == 0 && !cached(s) {
				// No watch cache: a trigger means nothing.
				return s, d, nil
			}
			r.stores = append(r.stores, s)
		}
		r.Interface = r.stores[0]
		return r, destroy, nil
	}
}

// cached reports whether s is a watch cache, perhaps under decorators
// that have an Unwrap method (replayingStorage).
func cached(s storage.Interface) bool {
	for {
		switch d := s.(type) {
		case *cacherstorage.CacheDelegator:
			return true
		case interface{ Unwrap() storage.Interface }:
			s = d.Unwrap()
		default:
			return false
		}
	}
}

// triggerRouter sends each watch and list to the cache of the trigger its
// field selector names; everything else goes to the first.
type triggerRouter struct {
	// Interface is stores[0].
	storage.Interface
	// fields are the triggers' fields, sorted; stores[i] is the cached
	// storage whose trigger is fields[i].
	fields  []string
	stores  []storage.Interface
	destroy []factory.DestroyFunc
}

// storeFor returns the storage whose trigger p selects an exact value of.
func (r *triggerRouter) storeFor(p storage.SelectionPredicate) storage.Interface {
	for i, f := range r.fields {
		if !slices.Contains(p.IndexFields, f) || p.Field == nil {
			continue
		}
		if _, ok := p.Field.RequiresExactMatch(f); ok {
			return r.stores[i]
		}
	}
	return r.stores[0]
}

func (r *triggerRouter) Watch(ctx context.Context, key string, opts storage.ListOptions) (watch.Interface, error) {
	return r.storeFor(opts.Predicate).Watch(ctx, key, opts)
}

func (r *triggerRouter) GetList(ctx context.Context, key string, opts storage.ListOptions, listObj runtime.Object) error {
	return r.storeFor(opts.Predicate).GetList(ctx, key, opts, listObj)
}

// ReadinessCheck reports whether every cache is ready.
func (r *triggerRouter) ReadinessCheck() error {
	var errs []error
	for _, s := range r.stores {
		errs = append(errs, s.ReadinessCheck())
	}
	return errors.Join(errs...)
}
