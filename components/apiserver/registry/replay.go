package registry

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/apiserver/pkg/storage/storagebackend/factory"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// ReplayUncertainWrites returns optsGetter with a storage decorator that
// sends a create, an update or a delete to etcd again when etcd could not
// tell whether it was applied, and only in the ways that cannot apply it
// twice.
//
// etcd's client sends a read again by itself, but a write only when it
// never left: a write in flight to a member that dies (its connection
// reset), or a proposal lost with a leader that dies (etcd's "request timed
// out" after 7 s), comes back Unavailable, and the library hands it to the
// client as a 500, although the write may or may not have been applied.
// Every write of the library's storage is a transaction guarded by the
// key's mod revision, which this decorator relies on:
//
//   - A create is guarded by "the key does not exist". Sent again, it
//     either passes (the first was not applied) or finds the key taken;
//     then the stored object is read, and if it has the UID the create gave
//     this object, the first was applied and the create passed; any other
//     object is the client's 409 AlreadyExists, as it would have been.
//   - An update is guarded by the mod revision it read. It is sent again
//     only while the object still has that revision, read afresh from etcd:
//     then the first was provably not applied, and at most one of the two
//     can be (both carry the same guard, even if the first lands late).
//     If the object changed meanwhile (perhaps by the first), the client
//     gets etcd's error, as without the decorator: neither success nor a
//     conflict would be sure.
//   - A delete is guarded by the mod revision it read, as an update is,
//     and sent again on the same terms; if the object is gone, the client
//     gets etcd's error.
//
// A write is sent again at most replays times, replayPause apart, within
// the request's deadline. Each is logged.
func ReplayUncertainWrites(optsGetter generic.RESTOptionsGetter) generic.RESTOptionsGetter {
	return replayOptions{optsGetter}
}

// replays is how often a write whose outcome etcd could not tell is sent
// again; replayPause is the wait before each (a variable for tests).
const replays = 2

var replayPause = 500 * time.Millisecond

type replayOptions struct{ generic.RESTOptionsGetter }

func (g replayOptions) GetRESTOptions(resource schema.GroupResource, example runtime.Object) (generic.RESTOptions, error) {
	opts, err := g.RESTOptionsGetter.GetRESTOptions(resource, example)
	if err != nil {
		return opts, err
	}
	decorate := opts.Decorator
	opts.Decorator = func(config *storagebackend.ConfigForResource, resourcePrefix string,
		keyFunc func(obj runtime.Object) (string, error), newFunc, newListFunc func() runtime.Object,
		getAttrs storage.AttrFunc, triggers storage.IndexerFuncs, indexers *cache.Indexers,
	) (storage.Interface, factory.DestroyFunc, error) {
		s, destroy, err := decorate(config, resourcePrefix, keyFunc, newFunc, newListFunc, getAttrs, triggers, indexers)
		if err != nil {
			return nil, nil, err
		}
		return &replayingStorage{Interface: s}, destroy, nil
	}
	return opts, nil
}

// replayingStorage is a storage whose writes are sent again
// when etcd could not tell their outcome (ReplayUncertainWrites).
type replayingStorage struct {
	storage.Interface
}

// Unwrap returns the storage it decorates.
func (s *replayingStorage) Unwrap() storage.Interface { return s.Interface }

func (s *replayingStorage) Create(ctx context.Context, key string, obj, out runtime.Object, ttl uint64) error {
	err := s.Interface.Create(ctx, key, obj, out, ttl)
	for range replays {
		if !uncertain(ctx, err) || !pause(ctx) {
			return err
		}
		klog.FromContext(ctx).Info("Sending a create again: etcd could not tell whether it was applied", "key", key, "err", err)
		uncertainErr := err
		err = s.Interface.Create(ctx, key, obj, out, ttl)
		if storage.IsExist(err) {
			return s.createdBy(ctx, key, obj, out, err, uncertainErr)
		}
	}
	return err
}

// createdBy reads the object at key into out after a create of obj sent
// again found the key taken: nil if it is obj (the first create was
// applied), else exists, or uncertain when it cannot be read.
func (s *replayingStorage) createdBy(ctx context.Context, key string, obj, out runtime.Object, exists, uncertain error) error {
	want, err := meta.Accessor(obj)
	if err != nil || want.GetUID() == "" || out == nil {
		return exists
	}
	if err := s.Interface.Get(ctx, key, storage.GetOptions{}, out); err != nil {
		return uncertain
	}
	got, err := meta.Accessor(out)
	if err != nil || got.GetUID() != want.GetUID() {
		return exists
	}
	klog.FromContext(ctx).Info("A create sent again had been applied the first time", "key", key, "uid", want.GetUID())
	return nil
}

// errChanged is what an update sent again returns when the object is not
// at the revision the first was guarded by.
var errChanged = errors.New("the object changed since the update whose outcome etcd could not tell")

func (s *replayingStorage) GuaranteedUpdate(ctx context.Context, key string, destination runtime.Object, ignoreNotFound bool,
	preconditions *storage.Preconditions, tryUpdate storage.UpdateFunc, cachedExistingObject runtime.Object,
) error {
	// guard is the resourceVersion (the mod revision) of the object the
	// last attempt updated, which its transaction was guarded by; tried
	// says whether it got that far.
	var guard string
	tried := false
	record := func(input runtime.Object, res storage.ResponseMeta) (runtime.Object, *uint64, error) {
		guard, tried = resourceVersion(input), true
		return tryUpdate(input, res)
	}
	err := s.Interface.GuaranteedUpdate(ctx, key, destination, ignoreNotFound, preconditions, record, cachedExistingObject)
	for range replays {
		if !uncertain(ctx, err) || !pause(ctx) {
			return err
		}
		update := record
		if tried {
			// A transaction guarded by guard was sent: send it again only
			// as long as the object is still at guard.
			sent := guard
			update = func(input runtime.Object, res storage.ResponseMeta) (runtime.Object, *uint64, error) {
				if resourceVersion(input) != sent {
					return nil, nil, errChanged
				}
				return record(input, res)
			}
		}
		klog.FromContext(ctx).Info("Sending an update again: etcd could not tell whether it was applied", "key", key, "err", err)
		uncertainErr := err
		err = s.Interface.GuaranteedUpdate(ctx, key, destination, ignoreNotFound, preconditions, update, nil)
		if errors.Is(err, errChanged) {
			return uncertainErr
		}
	}
	return err
}

func (s *replayingStorage) Delete(ctx context.Context, key string, out runtime.Object, preconditions *storage.Preconditions,
	validateDeletion storage.ValidateObjectFunc, cachedExistingObject runtime.Object, opts storage.DeleteOptions,
) error {
	// guard and tried as in GuaranteedUpdate: the library validates the
	// object it read right before its transaction, guarded by that
	// object's revision.
	var guard string
	tried := false
	record := func(ctx context.Context, obj runtime.Object) error {
		guard, tried = resourceVersion(obj), true
		return validateDeletion(ctx, obj)
	}
	err := s.Interface.Delete(ctx, key, out, preconditions, record, cachedExistingObject, opts)
	for range replays {
		if !uncertain(ctx, err) || !pause(ctx) {
			return err
		}
		validate := record
		if tried {
			sent := guard
			validate = func(ctx context.Context, obj runtime.Object) error {
				if resourceVersion(obj) != sent {
					return errChanged
				}
				return record(ctx, obj)
			}
		}
		klog.FromContext(ctx).Info("Sending a delete again: etcd could not tell whether it was applied", "key", key, "err", err)
		uncertainErr := err
		err = s.Interface.Delete(ctx, key, out, preconditions, validate, nil, opts)
		if errors.Is(err, errChanged) || tried && storage.IsNotFound(err) {
			// Gone, perhaps by the first.
			return uncertainErr
		}
	}
	return err
}

// uncertain reports whether err is etcd's or its client's Unavailable, for
// a request whose context is still live: the write may or may not have been
// applied.
func uncertain(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil {
		return false
	}
	var etcdErr rpctypes.EtcdError
	if errors.As(err, &etcdErr) {
		return etcdErr.Code() == codes.Unavailable
	}
	st, ok := status.FromError(err)
	return ok && st.Code() == codes.Unavailable
}

// pause waits replayPause, and reports whether ctx is still live after.
func pause(ctx context.Context) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(replayPause):
		return true
	}
}

// resourceVersion is obj's resourceVersion, "" for an object not stored.
func resourceVersion(obj runtime.Object) string {
	m, err := meta.Accessor(obj)
	if err != nil {
		return ""
	}
	return m.GetResourceVersion()
}
